"""Issue 28 item 3: PlatformSpec as grouped, validated data. A platform file written flat and the
same file written in grouped tables ([hardware], [links], ...) load to equal specs; a bad key, a
wrong type or a value outside a field's declared constraint is one line and exit 2; with_values
routes flat names to their group and refuses unknown ones; every field says what it is."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prism_strategy.cli import app
from prism_strategy.specs.cluster import IDENTITY, PlatformSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.platform_file import SITE_TABLES
from prism_strategy.specs.platform_groups import FIELD_GROUP, GROUPS, ComputeTerms
from prism_strategy.specs.presets import DATA, load_platform, platform_names, read_toml

DOCS = Path(__file__).resolve().parents[3] / "docs" / "platform_files.md"


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(v)  # TOML basic strings take JSON's escapes


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def _table(header: str, values: dict) -> list[str]:
    scalars = [f"{_key(k)} = {_toml_value(v)}" for k, v in values.items() if not isinstance(v, dict)]
    lines = [f"[{header}]", *scalars] if header else scalars
    for k, v in values.items():
        if isinstance(v, dict):
            lines += _table(f"{header}.{k}" if header else k, v)
    return lines


def _write(path: Path, flat: dict, grouped: bool) -> Path:
    """The same platform table in either form (site tables dropped: emit/site.py reads those)."""
    flat = {k: v for k, v in flat.items() if k not in SITE_TABLES}
    if not grouped:
        path.write_text("\n".join(_table("", flat)) + "\n")
        return path
    top = {k: v for k, v in flat.items() if k not in FIELD_GROUP}
    groups: dict[str, dict] = {}
    for k, v in flat.items():
        if k in FIELD_GROUP:
            groups.setdefault(FIELD_GROUP[k], {})[k] = v
    lines = _table("", {k: v for k, v in top.items() if not isinstance(v, dict)})
    for g, values in groups.items():
        lines += _table(g, values)
    lines += _table("", {k: v for k, v in top.items() if isinstance(v, dict)})
    path.write_text("\n".join(lines) + "\n")
    return path


def _flat(name: str) -> dict:
    raw = read_toml(DATA / "platforms" / f"{name}.toml")
    out = {k: v for k, v in raw.items() if k not in GROUPS}
    for g in GROUPS:
        out |= raw.get(g, {})
    return out


@pytest.mark.parametrize("name", platform_names())
def test_a_preset_written_flat_and_written_grouped_loads_to_one_spec(tmp_path, name):
    flat = load_platform(str(_write(tmp_path / "flat.toml", _flat(name), grouped=False)))
    grouped = load_platform(str(_write(tmp_path / "grouped.toml", _flat(name), grouped=True)))
    assert flat == grouped
    assert flat.with_values(defaulted=()) == load_platform(name)  # a preset lists no defaults; a user's copy does


def test_grouped_tables_inherit_from_a_base_and_defaults_keep_their_flat_names(tmp_path):
    f = tmp_path / "a100-4.toml"
    f.write_text(
        'name = "a100-4"\nbase = "dgx-a100-40"\n[hardware]\ndevices_per_node = 4\n[links]\nnics_per_node = 2\n'
    )
    g = tmp_path / "a100-4-flat.toml"
    g.write_text('name = "a100-4"\nbase = "dgx-a100-40"\ndevices_per_node = 4\nnics_per_node = 2\n')
    p, base = load_platform(str(f)), load_platform("dgx-a100-40")
    assert p == load_platform(str(g))
    assert (p.hardware.devices_per_node, p.links.nics_per_node) == (4, 2)
    assert p.links.intra_bw_gbps == base.links.intra_bw_gbps and p.source("intra_bw_gbps").startswith("from base")
    assert p.source("devices_per_node") == "platform file a100-4"


def test_defaulted_fields_are_named_flat_as_a_file_writes_them(tmp_path):
    f = tmp_path / "bare.toml"
    f.write_text(
        'name = "bare"\ndevice = "cpu"\nbackend = "gloo"\n[hardware]\ndevices_per_node = 2\nmemory_gib = 8.0\n'
        "peak_tflops_bf16 = 1.0\npeak_tflops_fp32 = 1.0\nhbm_bw_gbps = 50.0\n[links]\nintra_bw_gbps = 5.0\n"
        "intra_ring_bw_gbps = 5.0\nintra_latency_us = 10.0\nnic_bw_gbps = 1.0\nnics_per_node = 1\n"
        "inter_latency_us = 20.0\n"
    )
    p = load_platform(str(f))
    assert {"usable_fraction", "achievable_fraction", "ccl_worker_count", "launcher"} <= set(p.defaulted)
    assert all(d in FIELD_GROUP or d in IDENTITY for d in p.defaulted)
    assert "links" not in p.defaulted and "devices_per_node" not in p.defaulted


def _plan(tmp_path: Path, body: str):
    f = tmp_path / "bad.toml"
    f.write_text('name = "bad"\nbase = "dgx-a100-40"\n' + body)
    res = CliRunner().invoke(app, ["plan", "--model", "qwen3-0.6b", "--platform", str(f), "--nodes", "1"])
    return res.exit_code, res.output.strip()


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("intra_bw_gbsp = 300.0\n", "unknown platform field 'intra_bw_gbsp' (did you mean 'intra_bw_gbps'?"),
        ("[links]\nmemory_gib = 80.0\n", "[links] has no field 'memory_gib' (it belongs in [hardware]"),
        ("memory_gib = 80.0\n[hardware]\nmemory_gib = 40.0\n", "memory_gib is given twice"),
        ('[hardware]\nmemory_gib = "lots"\n', "field memory_gib: Input should be a valid number"),
        ('[oneccl]\nccl_transport = "tcp"\n', "field ccl_transport: Input should be 'ofi' or 'mpi'"),
        ("usable_fraction = 1.5\n", "usable_fraction must be in (0, 1], got 1.5"),
        ("[hardware]\ndevices_per_node = 0\n", "devices_per_node must be in (0, 1e+09], got 0"),
        ("[calibration]\nrank_jitter = 1.0\n", "rank_jitter must be in [0, 1), got 1.0"),
        ("[nccl.nccl_scale]\ninter_bw = -2.0\n", "nccl_scale.inter_bw must be in (0, 1e+09], got -2.0"),
        ("[compute_terms]\nattention_ratio = 0.0\n", "compute_terms.attention_ratio must be in (0, 1e+09], got 0.0"),
    ],
)
def test_a_bad_platform_file_is_one_line_and_exit_2(tmp_path, body, says):
    code, out = _plan(tmp_path, body)
    assert code == 2 and "\n" not in out and "Traceback" not in out
    assert says in out and "bad.toml" in out


def test_with_values_routes_flat_names_to_their_groups():
    p = load_platform("aurora")
    q = p.with_values(intra_bw_gbps=20.0, activation_factor=1.5, ccl_worker_count=2, sources={"x": "y"})
    assert (q.links.intra_bw_gbps, q.calibration.activation_factor, q.oneccl.ccl_worker_count) == (20.0, 1.5, 2)
    assert q.sources == {"x": "y"} and q.hardware == p.hardware and q.allocator == p.allocator
    assert q.links == dataclasses.replace(p.links, intra_bw_gbps=20.0)
    assert q.value("intra_bw_gbps") == 20.0 and p.links.intra_bw_gbps != 20.0


def test_with_values_refuses_an_unknown_name_and_a_value_outside_its_constraint():
    p = load_platform("dgx-h100")
    with pytest.raises(SpecError, match=r"platform 'dgx-h100': unknown platform field 'nic_bw'.*'nic_bw_gbps'"):
        p.with_values(nic_bw=10.0)
    with pytest.raises(SpecError, match="unknown platform field 'links'"):
        p.with_values(links=p.links)
    with pytest.raises(SpecError, match=r"bw_efficiency must be in \(0, 1\], got 0"):
        p.with_values(bw_efficiency=0)
    with pytest.raises(SpecError, match="no field 'hbm'"):
        p.value("hbm")


def test_from_flat_checks_the_constraints_too():
    flat = _flat("cpu") | {"ring_channels": 0}
    with pytest.raises(SpecError, match=r"ring_channels must be in \(0, 1e\+09\], got 0"):
        PlatformSpec.from_flat(flat)


@pytest.mark.parametrize("cls", [PlatformSpec, ComputeTerms, *GROUPS.values()], ids=lambda c: c.__name__)
def test_every_field_has_a_docstring(cls):
    missing = [n for n, f in cls.__pydantic_fields__.items() if not (f.description or "").strip()]
    assert not missing, f"{cls.__name__} fields without a docstring: {missing}"


def test_the_docs_table_lists_every_field_in_its_group():
    rows = dict(re.findall(r"^\| `(\w+)` \| (\w+) \|", DOCS.read_text(), flags=re.M))
    assert {f: g for f, g in rows.items() if f in FIELD_GROUP} == FIELD_GROUP
    assert set(rows) - set(FIELD_GROUP) <= set(IDENTITY)


SHARED = {"rank_jitter", "expandable_segments"}
"""Platform fields whose names the training and plan policies carry too (replace on those is theirs)."""


def test_code_changes_a_platform_only_through_with_values():
    """No `dataclasses.replace(platform, intra_bw_gbps=...)` in src/: a flat name goes through
    with_values, which routes it to its group and checks it (a replace on a group itself is fine)."""
    import ast

    found = []
    for path in sorted((Path(__file__).resolve().parents[3] / "src").rglob("*.py")):
        for call in ast.walk(ast.parse(path.read_text())):
            if not isinstance(call, ast.Call) or not call.args:
                continue
            name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
            on_group = isinstance(call.args[0], ast.Attribute) and call.args[0].attr in GROUPS
            if name == "replace" and not on_group and any(k.arg in FIELD_GROUP.keys() - SHARED for k in call.keywords):
                found.append(f"{path.name}:{call.lineno}")
    assert not found, f"replace() with a platform field outside with_values: {found}"

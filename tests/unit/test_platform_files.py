"""Issue #26 finding 4: a sparse platform file gets no silent values. The issue's A100 file
without nvlink_links is refused with ONE error naming every missing hardware fact; `base =
"dgx-a100-40"` inherits them; fields the backend's model never reads are not required; every
value left to PlatformSpec's default is named in provenance and once under the plan table."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from prism_strategy.cli import app
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.presets import load_platform, platform_names

SPARSE = """name = "a100-old"
device = "cuda"
backend = "nccl"
devices_per_node = 4
memory_gib = 40.0
peak_tflops_bf16 = 312.0
peak_tflops_fp32 = 19.5
hbm_bw_gbps = 1555.0
intra_bw_gbps = 300.0
nic_bw_gbps = 25.0
nics_per_node = 4
gpu_arch = "ampere"
"""


def test_sparse_nccl_file_is_refused_naming_every_missing_fact_at_once(tmp_path):
    f = tmp_path / "a100-old.toml"
    f.write_text(SPARSE)
    res = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--platform", str(f), "--nodes", "1"])
    assert res.exit_code == 2
    line = res.output.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "nvlink_links" in line and "cpu_vendor" in line and 'base = "' in line


def test_nccl_file_needs_no_field_the_nccl_model_does_not_read(tmp_path):
    f = tmp_path / "a100-ok.toml"
    f.write_text(SPARSE.replace('name = "a100-old"', 'name = "a100-ok"') + 'nvlink_links = 12\ncpu_vendor = "amd"\n')
    p = load_platform(str(f))  # no intra_latency_us, inter_latency_us, intra_ring_bw_gbps
    assert "not read by the nccl model" in p.source("intra_latency_us")
    assert "framework_reserve_gib" in p.defaulted and "usable_fraction" in p.defaulted
    assert "nvlink_links" not in p.defaulted


def test_base_inherits_the_presets_values_and_says_where_they_came_from(tmp_path):
    f = tmp_path / "a100-4.toml"
    f.write_text('name = "a100-4"\nbase = "dgx-a100-40"\ndevices_per_node = 4\n')
    p, base = load_platform(str(f)), load_platform("dgx-a100-40")
    assert (p.hardware.devices_per_node, p.hardware.nvlink_links, p.allocator.framework_reserve_gib) == (
        4,
        base.hardware.nvlink_links,
        2.0,
    )
    assert p.source("nvlink_links").startswith("from base dgx-a100-40: ")
    assert p.source("devices_per_node") == "platform file a100-4"
    assert "framework_reserve_gib" not in p.defaulted and p.base == "dgx-a100-40"


def test_defaults_are_named_in_provenance_and_once_under_the_table(tmp_path):
    f = tmp_path / "a100-full.toml"
    f.write_text(SPARSE.replace('name = "a100-old"', 'name = "a100-full"') + 'nvlink_links = 12\ncpu_vendor = "amd"\n')
    args = ["plan", "--model", "qwen3-0.6b", "--platform", str(f), "--nodes", "1"]
    d = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    text = d["options"][0]["provenance"]["platform_defaults"]
    assert "framework_reserve_gib 1" in text and "usable_fraction 0.95" in text
    out = CliRunner(env={"COLUMNS": "100"}).invoke(app, args).output
    assert out.count("PlatformSpec defaults") == 1


def test_an_unknown_base_is_bad_input(tmp_path):
    f = tmp_path / "x.toml"
    f.write_text('name = "x"\nbase = "dgx-a999"\n')
    with pytest.raises(SpecError, match="base 'dgx-a999' is not a platform preset"):
        load_platform(str(f))


@pytest.mark.parametrize("name", platform_names())
def test_every_preset_gives_its_backends_facts_and_lists_no_defaults(name):
    assert load_platform(name).defaulted == ()

"""Platform files and model configs at the edge (issue 38 item 2): numbers finite, of their declared
type (pydantic strict: no bool or string for a count) and within the declared bounds; `sources` a
table; nesting capped; a model_type that is not a string; `plan(platform=None)`. Each refusal is a
SpecError of one line naming the file and the field."""

from __future__ import annotations

import json

import pytest

from prism_strategy import plan
from prism_strategy.flags import scenario_from_flags
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.hf import load_hf_config
from prism_strategy.specs.platform_groups import MAX_QUANTITY
from prism_strategy.specs.presets import load_platform

HEAD = 'name = "mine"\nbase = "dgx-a100-40"\n'


def _platform(tmp_path, body: str, name: str = "p.toml"):
    f = tmp_path / name
    f.write_text(HEAD + body)
    return f, load_platform(str(f))


@pytest.mark.parametrize(
    ("body", "field", "said"),
    [
        ("[hardware]\nmemory_gib = inf\n", "memory_gib", "not a finite number"),
        ("[hardware]\nmemory_gib = nan\n", "memory_gib", "not a finite number"),
        ("[links]\nintra_bw_gbps = inf\n", "intra_bw_gbps", "not a finite number"),
        ("[links]\nnic_bw_gbps = -inf\n", "links.nic_bw_gbps = -inf", "not a finite number"),
        ("[links]\nintra_latency_us = 1e308\n", "intra_latency_us", "must be in [0, 1e+09], got 1e+308"),
        ("[hardware]\npeak_tflops_bf16 = 1e300\n", "peak_tflops_bf16", "must be in (0, 1e+09]"),
        ("[hardware]\ndevices_per_node = true\n", "devices_per_node", "valid integer, got True"),
        ('[hardware]\ndevices_per_node = "8"\n', "devices_per_node", "valid integer, got '8'"),
        ("[hardware]\ndevices_per_node = 8.0\n", "devices_per_node", "valid integer, got 8.0"),
        ('[hardware]\nmemory_gib = "80"\n', "memory_gib", "valid number, got '80'"),
        ("[hardware]\nmemory_gib = true\n", "memory_gib", "valid number, got True"),
        ('[allocator]\nexpandable_segments = "true"\n', "expandable_segments", "valid boolean, got 'true'"),
        ('sources = ["a", "b"]\n', "sources", "must be a table"),
        ("x = " + "[" * 975 + "]" * 975 + "\n", "", "nests deeper than"),
    ],
)
def test_a_bad_platform_value_is_one_line_naming_file_and_field(tmp_path, body, field, said):
    with pytest.raises(SpecError) as e:
        _platform(tmp_path, body)
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path / "p.toml") in msg and field in msg and said in msg


def test_the_bounds_keep_every_real_value(tmp_path):
    """The upper bound is far above any preset (the largest: 4,800 GB/s of HBM) and an int stays
    accepted for a float field: strict types refuse only the wrong kinds."""
    _, p = _platform(tmp_path, "[hardware]\nmemory_gib = 80\nhbm_bw_gbps = 4800.0\n")
    assert p.hardware.memory_gib == 80.0 and p.hardware.hbm_bw_gbps == 4800.0
    _, q = _platform(tmp_path, f"[links]\nintra_latency_us = {MAX_QUANTITY}\n", "edge.toml")
    assert q.links.intra_latency_us == MAX_QUANTITY  # the bound itself is inside: refusals start past it


def test_with_values_is_held_to_the_same_types():
    p = load_platform("aurora")
    with pytest.raises(SpecError, match="devices_per_node"):
        p.with_values(devices_per_node=True)
    with pytest.raises(SpecError, match="intra_bw_gbps"):
        p.with_values(intra_bw_gbps=float("inf"))
    assert p.with_values(devices_per_node=6).hardware.devices_per_node == 6


LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "intermediate_size": 128,
    "vocab_size": 256,
    "max_position_embeddings": 128,
}


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"model_type": ["llama"]}, "model_type must be a string"),
        ({"model_type": {"a": 1}}, "model_type must be a string"),
        ({"hidden_size": float("inf")}, "hidden_size = inf"),
        ({"vocab_size": float("nan")}, "vocab_size = nan"),
        ({"num_hidden_layers": 10**400}, "num_hidden_layers = "),
    ],
)
def test_a_bad_model_config_is_one_line(tmp_path, change, said):
    f = tmp_path / "config.json"
    f.write_text(json.dumps(LLAMA | change))
    with pytest.raises(SpecError) as e:
        load_hf_config(f)
    assert "\n" not in str(e.value) and str(f) in str(e.value) and said in str(e.value)


@pytest.mark.parametrize("platform", [None, 3, {"name": "aurora"}, ["aurora"]])
def test_plan_with_a_platform_of_the_wrong_type_is_a_clear_error(platform):
    with pytest.raises(SpecError, match=f"platform must be a preset name.*got {type(platform).__name__}"):
        plan("qwen3-0.6b", platform=platform)


def test_a_platform_path_object_is_a_platform(tmp_path):
    f, _ = _platform(tmp_path, "")
    assert scenario_from_flags("qwen3-0.6b", platform=f).platform.name == "mine"

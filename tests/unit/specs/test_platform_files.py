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


_CHANGED = {
    "ring_channels": 4, "mdfi_bw_gbps": 77.0, "host_copy_gbps": 9.0, "host_copy_node_gbps": 30.0,
    "scaleout_rank_bw_gbps": 3.0, "host_ring_node_gbps": 11.0, "allreduce_algorithm": "ring",
    "scaleout_algorithm": "ring", "bw_efficiency": 0.3, "collective_overhead_us": 400.0,
    "scaleout_overhead_us": 300.0, "comm_overlap": 0.1, "ccl_worker_count": 4,
    "ccl_algorithms": {"CCL_ALLGATHER": "ring"}, "ccl_scaleout": {"all_reduce": "rabenseifner"},
    "ccl_transport": "mpi", "ccl_gpu_rdma": True, "ccl_topo_min_ppn": 8, "ccl_host_staging": "whole buffer",
    "nccl_scale": {"intra_bw": 0.2, "net_latency": 5.0}, "gpu_arch": "volta", "nvlink_links": 2,
    "sm_count": 8, "cpu_vendor": "amd",
}  # fmt: skip


@pytest.mark.parametrize("preset", ["dgx-h100", "aurora", "cpu"])
def test_a_field_listed_as_not_modelled_leaves_that_backends_estimates_unchanged(preset):
    """data/platform_fields.toml [not_modelled] is what the plan's defaults note leaves out: each
    listed field, changed, must not move a step time, a range or a memory figure on that backend."""
    from prism_strategy.estimate.option import estimate_option
    from prism_strategy.flags import scenario_from_flags
    from prism_strategy.specs.platform_file import not_modelled
    from prism_strategy.strategies import get_strategy

    sc = scenario_from_flags("qwen3-0.6b", platform=preset, nodes=2, seq_len=256, micro_batch=2)
    fields = sorted(not_modelled(sc.platform.collective_library))
    assert fields and set(fields) <= set(_CHANGED)

    def figures(s):
        out = []
        for name in ("ddp", "fsdp_full_shard", "hsdp_shard_grad_op", "zero2"):
            e = estimate_option(s, get_strategy(name))
            out.append((e.step.step_time_s, e.step_time_s_range, e.device_peak_bytes, e.oom))
        return out

    base = figures(sc)
    for f in fields:
        changed = sc.with_platform(sc.platform.with_values(**{f: _CHANGED[f]}))
        assert figures(changed) == base, f"{f} moves the {sc.platform.collective_library} estimate"


def test_the_defaults_note_names_what_moved_the_answer_first_and_counts_the_rest(tmp_path):
    f = tmp_path / "a100-old.toml"
    f.write_text(SPARSE + 'nvlink_links = 12\ncpu_vendor = "amd"\n')
    p = load_platform(str(f))
    from prism_strategy.specs.platform_file import defaults_note, defaults_text

    note = defaults_note(p)
    for name in ("achievable_fraction 0.5", "framework_reserve_gib 1", "allocator_cache_factor", "sm_count"):
        assert name in note
    assert "ccl_" not in note and "mdfi_bw_gbps" not in note and "the nccl model never reads" in note
    assert note.index("achievable_fraction") < note.index("sm_count")
    named = [k for k in p.defaulted if k in note]
    assert "ccl_worker_count 1" in defaults_text(p) and len(named) < len(p.defaulted) / 2

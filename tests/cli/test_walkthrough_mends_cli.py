"""The fresh walk-through's findings left for other rooms (issue 26, brief `mends`): each command as
the user typed it, and what the user must get back."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prism_strategy.cli import app

runner = CliRunner(env={"COLUMNS": "100"})

A100_OLD = """name = "a100-old"
device = "cuda"
backend = "nccl"
devices_per_node = 4
memory_gib = 40
peak_tflops_bf16 = 312
peak_tflops_fp32 = 19.5
hbm_bw_gbps = 1555
intra_bw_gbps = 300
nic_bw_gbps = 25
nics_per_node = 2
gpu_arch = "ampere"
cpu_vendor = "amd"
nvlink_links = 12
"""


def _one_line(res, code: int = 2) -> str:
    assert res.exit_code == code, res.output
    line = res.output.strip()
    assert "\n" not in line and "Traceback" not in line, res.output
    return line


def test_the_plans_defaults_note_names_what_the_nccl_model_reads_not_onecclss_settings(tmp_path):
    f = tmp_path / "a100-old.toml"
    f.write_text(A100_OLD)
    res = runner.invoke(app, ["plan", "--model", "qwen3-0.6b", "--platform", str(f), "--nodes", "2"])
    assert res.exit_code == 0, res.output
    note = res.output[res.output.index("PlatformSpec defaults") :]
    for moved in ("achievable_fraction 0.5", "framework_reserve_gib 1", "allocator_cache_factor", "sm_count"):
        assert moved in note
    assert "ccl_worker_count" not in note and "mdfi_bw_gbps" not in note and "host_copy_gbps" not in note


def test_emit_on_a_file_without_base_refuses_a_multi_node_job_without_a_launcher(tmp_path):
    f = tmp_path / "a100-old.toml"
    f.write_text(A100_OLD)
    out = tmp_path / "emit_b"
    args = ["emit", "--strategy", "fsdp_full_shard", "--platform", str(f), "--nodes", "2", "--out", str(out)]
    line = _one_line(runner.invoke(app, args))
    assert "names no launcher for a 2-node job" in line and 'launcher = "slurm"' in line and '"pbs"' in line
    assert "env profile" not in line and not out.exists()


def test_emit_on_a_file_without_base_or_profile_writes_its_launcher_and_no_profile_exports(tmp_path):
    f = tmp_path / "a100-old.toml"
    f.write_text(A100_OLD + 'launcher = "slurm"\n')
    out = tmp_path / "emit_b"
    args = ["emit", "--strategy", "fsdp_full_shard", "--platform", str(f), "--nodes", "2", "--out", str(out)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert (out / "launch.slurm").exists() and not (out / "env.sh").exists()
    assert "export NCCL" not in (out / "launch.slurm").read_text()
    said = " ".join(res.output.split())
    assert "names no env_profile: no env.sh" in said and "cuda-nccl" in said
    doctor = res.output[res.output.index("prism-strategy doctor") :].split()[1:]
    assert runner.invoke(app, doctor).exit_code == 0  # the printed check runs clean


def test_emit_on_a_one_node_file_without_launcher_says_torchrun_aloud(tmp_path):
    f = tmp_path / "a100-old.toml"
    f.write_text(A100_OLD)
    out = tmp_path / "e1"
    args = ["emit", "--strategy", "ddp", "--platform", str(f), "--nodes", "1", "--out", str(out)]
    res = runner.invoke(app, [*args, "--env-profile", "cuda-nccl"])
    assert res.exit_code == 0, res.output
    assert "names no launcher: torchrun (the default)" in " ".join(res.output.split()) and (out / "env.sh").exists()


def test_emit_names_the_one_count_out_of_range_and_its_value(tmp_path):
    base = ["emit", "--strategy", "ddp", "--platform", "aurora", "--out", str(tmp_path / "e15")]
    assert _one_line(runner.invoke(app, [*base, "--micro-batch", "0"])) == "error: --micro-batch must be >= 1, got 0"
    assert _one_line(runner.invoke(app, [*base, "--grad-accum", "-1"])) == "error: --grad-accum must be >= 1, got -1"
    assert not (tmp_path / "e15").exists()


NCCL_LOG = Path(__file__).resolve().parents[1] / "fixtures" / "imports" / "all_reduce_perf_2x8_h100.out"


def test_an_nccl_tests_import_takes_its_nodes_from_the_hosts_the_log_names(tmp_path):
    log = tmp_path / "my_nccl.txt"  # not named all_reduce_perf*
    log.write_text(NCCL_LOG.read_text())
    db = tmp_path / "r.db"
    args = ["results", "import", str(log), "--format", "nccl-tests", "--platform", "dgx-h100", "--db", str(db)]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert (d["nodes"], d["ranks_per_node"], d["points"]) == (2, 8, 16)


def test_a_nodes_flag_the_hosts_contradict_names_the_hosts_not_a_ranks_per_node_figure(tmp_path):
    db = tmp_path / "r.db"
    args = ["results", "import", str(NCCL_LOG), "--platform", "dgx-h100", "--nodes", "3", "--db", str(db)]
    line = _one_line(runner.invoke(app, args))
    assert "the log ran on 2 hosts (h100-a017, h100-a018), not --nodes 3" in line
    assert "ranks per node" not in line and not db.exists()


def test_read_commands_leave_an_empty_or_foreign_db_file_byte_identical(tmp_path):
    empty, foreign = tmp_path / "empty.json", tmp_path / "notes.db"
    empty.write_bytes(b"")
    foreign.write_bytes(b"my notes, not a database\n" * 40)
    plan = ["plan", "--model", "qwen3-0.6b", "--platform", "dgx-h100", "--nodes", "1"]
    reads = (["compare"], ["results"], ["calibrate", "--platform", "cpu", "--out", str(tmp_path / "c.toml")], plan)
    for args in reads:
        res = runner.invoke(app, [*args, "--db", str(empty)])
        assert res.exit_code in (0, 1, 2) and "Traceback" not in res.output, (args, res.output)
        assert empty.read_bytes() == b"", args  # no schema written into the user's file
        bad = runner.invoke(app, [*args, "--db", str(foreign)])
        if args[0] != "plan":  # plan reads curves only when it finds a store
            assert "not a usable SQLite database" in _one_line(bad), args
        assert foreign.read_bytes() == b"my notes, not a database\n" * 40, args
    res = runner.invoke(app, ["compare", "--db", str(empty)])
    assert res.exit_code == 1 and "holds no successful run" in res.output
    assert not (tmp_path / "c.toml").exists()


def _cpu_row(store, precision: str = "fp32", platform: str = "cpu"):
    from prism_strategy.bench.results.store import Result
    from prism_strategy.cli.bench_inputs import base_config

    cfg = base_config(model="tiny-llama", nproc=2, ranks_per_node=None, micro_batch=2, seq_len=32, steps=1,
                      warmup=1, precision="fp32", ckpt_freq=0, grad_accum=1, timeout_s=60)  # fmt: skip
    cfg = cfg | {"strategy": "ddp", "precision": precision}
    return store.add(Result(kind="bench", status="ok", strategy="ddp", platform=platform, config=cfg,
                            measured={"step_time_s": 0.5, "samples_per_s": 8.0}, fingerprint={"host": "h"}))  # fmt: skip


def test_bench_refuses_an_unknown_precision_before_launching(tmp_path):
    db = tmp_path / "run.db"
    for cmd in (["bench"], ["ceiling"], ["tune"], ["census"], ["commbench"]):
        args = [*cmd, "--model", "tiny-llama", "--precision", "fp8", "--nproc", "2"]
        line = _one_line(runner.invoke(app, [*args, *(["--db", str(db)] if cmd[0] != "census" else [])]))
        assert "fp8" in line and "fp32" in line and "bf16-mixed" in line, (cmd, line)
    assert not db.exists()  # nothing launched, nothing stored


def test_compare_skips_and_names_a_stored_row_it_cannot_read(tmp_path):
    from prism_strategy.bench.results.store import Store

    store = Store(tmp_path / "run.db")
    good, fp8, gone = _cpu_row(store), _cpu_row(store, "fp8"), _cpu_row(store, platform="a-platform-gone")
    res = CliRunner().invoke(app, ["compare", "--db", str(store.path), "--json"])
    assert res.exit_code == 0, res.output
    assert [r["id"] for r in json.loads(res.stdout)] == [good]
    said = " ".join(res.stderr.split())
    assert f"skipped stored result {fp8} (ddp, cpu):" in said and "unknown precision 'fp8'" in said
    assert f"skipped stored result {gone} (ddp, a-platform-gone)" in said


def test_a_missing_model_file_is_named_once_resolved(tmp_path, monkeypatch):
    (tmp_path / "run049").mkdir()
    monkeypatch.chdir(tmp_path / "run049")
    line = _one_line(runner.invoke(app, ["plan", "--model", "../nofile.json", "--platform", "dgx-h100"]))
    assert f"model file '{tmp_path / 'nofile.json'}' does not exist" in line
    assert line.count("nofile.json") == 1 and ".." not in line


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="DeepSpeed is not installed")
def test_a_stale_build_lock_is_the_one_line_bench_prints_no_progress_first(tmp_path, monkeypatch):
    lock = tmp_path / "ext" / "deepspeed_shm_comm" / "lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    args = ["bench", "--strategies", "zero2", "--nproc", "2", "--db", str(tmp_path / "r.db"), "--timeout-s", "5"]
    line = _one_line(CliRunner().invoke(app, args))
    assert line.startswith("error: DeepSpeed's op build lock") and f"rm {lock}" in line
    assert not (tmp_path / "r.db").exists()


def test_rank_jitters_description_says_what_an_unmeasured_point_takes():
    """specs/platform_groups.py said "None = unmeasured: only the range's slow side takes it"; since
    the cudascale change the point takes the published average (estimate/scale_loss.py)."""
    from prism_strategy.estimate.scale_loss import default_jitter, late_ranks
    from prism_strategy.specs.platform_groups import CalibrationSpec

    doc = " ".join(CalibrationSpec.__pydantic_fields__["rank_jitter"].description.split())
    unmeasured, j = late_ranks(512, 8, 1.0, 10, None), default_jitter()
    assert unmeasured.seconds > 0 and unmeasured.cv == j.point and unmeasured.slow_seconds > 0
    assert "the point takes the published average" in doc and "only the range's slow side" not in doc
    assert f"cv ~{j.point:.1%}" in doc and f"cv ~{j.high:.1%}" in doc


def test_the_range_legend_says_how_each_platform_familys_range_was_made():
    said = {}
    for platform in ("aurora", "dgx-h100"):
        res = runner.invoke(app, ["plan", "--model", "qwen3-0.6b", "--platform", platform, "--nodes", "2"])
        assert res.exit_code == 0, res.output
        said[platform] = " ".join(res.output.split())
        assert "the low side widened beyond what was measured" not in said[platform]
        prov = runner.invoke(app, ["plan", "--model", "qwen3-0.6b", "--platform", platform, "--nodes", "2", "--json"])
        basis = json.loads(prov.stdout)["options"][0]["provenance"]["range"]
        assert ("composed from the step's parts" in basis) == (platform == "aurora")  # what the legend must follow
    assert (
        "range = 80% range of samples/s (composed from the step's parts, each with the held-out errors"
        in said["aurora"]
    )
    assert "range = 80% range of samples/s (the fit's leave-one-out errors" in said["dgx-h100"]
    assert "scale beyond the measured nodes and late ranks widen the low side" in said["dgx-h100"]

"""Issue 35: `bench --launched` under real launchers on this machine: MPICH's and Open MPI's
`mpiexec -n 4`, two torchrun "nodes" on localhost running the emitted bench_torchrun.sh, and the
emitted bench.sbatch under a one-host Slurm. Each stores the same kinds of rows as local `bench`; an
out-of-memory candidate is recorded and the job goes on; a hung rank ends the job within the group's
timeout with the verdict stored (under mpiexec and under sbatch).

The launchers come from Debian's packages (.ci/run installs mpich, openmpi-bin); where one is missing
outside CI the test is skipped, in CI it fails."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _harness import ROOT, base_env, free_port
from typer.testing import CliRunner

from prism_strategy.bench.results.store import Store
from prism_strategy.cli import app

pytestmark = pytest.mark.distributed

BENCH = ["--model", "tiny-llama", "--nproc", "4", "--ranks-per-node", "2", "--seq-len", "32", "--micro-batch", "2"]
LOCAL_KEYS = {"step_time_s", "samples_per_s", "forward_s", "backward_s", "optimizer_s", "peak_memory_bytes"}
"""What local `bench` stores of a run that finished (bench/launch/harness.py measured)."""


def _launcher(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing: .ci/run installs it from Debian's packages")
        pytest.skip(f"{name} is not installed (apt-get install mpich openmpi-bin)")
    return path


def _env(db: Path, **extra: str) -> dict[str, str]:
    env = base_env() | {"PRISM_STRATEGY_DB": str(db)} | extra
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return env


def _mpiexec(launcher: list[str], db: Path, *flags: str, env: dict[str, str] | None = None, timeout: float = 300):
    cmd = [*launcher, sys.executable, "-m", "prism_strategy.cli", "bench", "--launched", *BENCH, *flags, "--json"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env or _env(db), cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - t0


def _rows(db: Path) -> dict[str, object]:
    return {r.strategy: r for r in Store(db).query()}


@pytest.fixture(scope="module")
def mpich_run(tmp_path_factory):
    """MPICH's mpiexec, 4 ranks (2 'nodes' x 2): ddp then fsdp_full_shard, no memory cap."""
    db = tmp_path_factory.mktemp("mpich") / "results.db"
    proc, _ = _mpiexec([_launcher("mpiexec.mpich"), "-n", "4"], db, "--strategies", "ddp,fsdp_full_shard")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return db, proc


def test_mpich_stores_the_rows_local_bench_stores(mpich_run):
    db, proc = mpich_run
    rows = _rows(db)
    assert set(rows) == {"ddp", "fsdp_full_shard"}
    for r in rows.values():
        assert r.status == "ok" and LOCAL_KEYS <= set(r.measured)
        assert r.measured["backend"] == "gloo" and len(r.measured["step_s_per_rank"]) == 4
        assert r.measured["step_time_s"] == max(r.measured["step_s_per_rank"])  # the slowest rank sets the pace
        assert r.measured["step_s_per_rank"][r.measured["slowest_rank"]] == r.measured["step_time_s"]
    report = json.loads(proc.stdout)  # rank 0 alone reports
    assert [x["strategy"] for x in report["results"]] == ["ddp", "fsdp_full_shard"] and report["skipped"] == []


def test_open_mpi_records_an_out_of_memory_candidate_and_goes_on(mpich_run, tmp_path):
    """The CPU cap between the two candidates' measured peaks (DDP holds every parameter's states on
    each rank, FSDP a quarter of them): DDP runs first, does not fit, and FSDP still runs."""
    peaks = {s: r.measured["peak_memory_bytes"] for s, r in _rows(mpich_run[0]).items()}
    assert peaks["ddp"] > peaks["fsdp_full_shard"]
    cap_gib = (peaks["ddp"] * peaks["fsdp_full_shard"]) ** 0.5 / 2**30
    db = tmp_path / "results.db"
    mpiexec = [_launcher("mpiexec.openmpi"), "--allow-run-as-root", "--oversubscribe", "-n", "4"]
    proc, _ = _mpiexec(mpiexec, db, "--strategies", "ddp,fsdp_full_shard", "--memory-limit", f"{cap_gib:.6f}")
    assert proc.returncode != 0  # a candidate did not run to the end: a finding
    rows = _rows(db)
    assert rows["ddp"].status == "oom" and "does not fit at micro-batch 2" in rows["ddp"].measured["error"]
    assert rows["fsdp_full_shard"].status == "ok" and LOCAL_KEYS <= set(rows["fsdp_full_shard"].measured)


def test_a_hung_rank_ends_the_job_within_its_timeout_with_the_verdict_stored(tmp_path):
    """Two ranks (one node): the hang and its verdict need no more, and they start in half the time."""
    db, timeout_s = tmp_path / "results.db", 6
    env = _env(db, PRISM_BENCH_FAULT="hang:1:1")
    flags = ("--strategies", "ddp,fsdp_full_shard", "--steps", "1", "--timeout-s", str(timeout_s), "--nproc", "2")
    proc, seconds = _mpiexec([_launcher("mpiexec.mpich"), "-n", "2"], db, *flags, env=env, timeout=240)
    assert proc.returncode != 0
    rows = _rows(db)
    assert set(rows) == {"ddp"} and rows["ddp"].status == "failed"
    assert "process group failed" in rows["ddp"].measured["error"]
    assert "skipped: fsdp_full_shard: not started: ddp failed" in proc.stderr
    assert seconds < 120  # the group's 6 s timeout twice (the step, the gather) plus the ranks' start


def test_two_torchrun_nodes_run_the_emitted_bench_job(tmp_path):
    res = CliRunner().invoke(
        app,
        ["plan", "--model", "tiny-llama", "--platform", "dgx-h100", "--nodes", "2", "--ranks-per-node", "2",
         "--seq-len", "32", "--micro-batch", "2", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    (tmp_path / "plan.json").write_text(res.stdout)
    out = tmp_path / "job"
    res = CliRunner().invoke(app, ["emit", "--from-plan", str(tmp_path / "plan.json"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    db, port = tmp_path / "results.db", str(free_port())
    nodes = [
        subprocess.Popen(
            ["bash", str(out / "bench_torchrun.sh")],
            env=_env(db, NNODES="2", NODE_RANK=str(n), MASTER_PORT=port, PRISM_BENCH_STRATEGIES="ddp"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )
        for n in (1, 0)
    ]  # fmt: skip
    outs = [p.communicate(timeout=300) for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], [e[-3000:] for _, e in outs]
    row = _rows(db)["ddp"]
    assert row.status == "ok" and LOCAL_KEYS <= set(row.measured)
    assert row.config["layout"]["nodes"] == 2 and len(row.measured["step_s_per_rank"]) == 4
    # plan --db shows the run at the layout it measured, and only there
    plan = ["plan", "--model", "tiny-llama", "--platform", "dgx-h100", "--seq-len", "32", "--micro-batch", "2"]
    at = CliRunner().invoke(app, [*plan, "--nodes", "2", "--ranks-per-node", "2", "--db", str(db), "--json"])
    (seen,) = json.loads(at.stdout)["measured_at_layout"]
    assert seen["strategy"] == "ddp" and seen["samples_per_s"] == row.measured["samples_per_s"]
    elsewhere = CliRunner().invoke(app, [*plan, "--nodes", "1", "--ranks-per-node", "4", "--db", str(db), "--json"])
    assert json.loads(elsewhere.stdout)["measured_at_layout"] == []


def _one_line_exit_2(proc) -> str:
    lines = [x for x in proc.stderr.splitlines() if x.strip() and "Warning" not in x and "warn(" not in x]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return lines[0]


def _single_rank(db: str, *flags: str) -> subprocess.CompletedProcess:
    env = _env(Path(db), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    cmd = [sys.executable, "-m", "prism_strategy.cli", "bench", "--launched", "--model", "tiny-llama", "--nproc", "1"]
    return subprocess.run([*cmd, "--db", db, *flags], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_bad_input_to_a_launched_bench_is_one_line(tmp_path):
    no_launcher = subprocess.run(
        [sys.executable, "-m", "prism_strategy.cli", "bench", "--launched", "--model", "tiny-llama"],
        env=_env(tmp_path / "r.db"), cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "no launcher variables" in _one_line_exit_2(no_launcher)
    assert "--budget-min must be > 0" in _one_line_exit_2(_single_rank(str(tmp_path / "r.db"), "--budget-min", "0"))
    blocked = tmp_path / "file"
    blocked.write_text("a file where the store's folder would be")
    line = _one_line_exit_2(_single_rank(str(blocked / "results.db")))
    assert "results store" in line and "--db" in line
    assert not (tmp_path / "r.db").exists()


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    from _slurm import OneHostSlurm, missing

    if (why := missing()) is not None:
        if os.environ.get("CI"):
            pytest.fail(why + ": .ci/run installs it")
        pytest.skip(why)
    cluster = OneHostSlurm(tmp_path_factory.mktemp("slurm"))
    cluster.start()
    yield cluster
    cluster.stop()


CPU_SLURM = 'name = "cpu-slurm"\nbase = "cpu"\nlauncher = "slurm"\n'
"""This machine as a Slurm platform: the cpu preset (gloo ranks), Slurm's launcher."""


def _emitted_slurm_job(tmp_path: Path) -> Path:
    """plan on this machine as a Slurm platform, then emit --from-plan: the job folder."""
    (tmp_path / "cpu-slurm.toml").write_text(CPU_SLURM)
    plan = ["plan", "--model", "tiny-llama", "--platform", str(tmp_path / "cpu-slurm.toml"), "--nodes", "1"]
    res = CliRunner().invoke(app, [*plan, "--ranks-per-node", "4", "--seq-len", "32", "--micro-batch", "2", "--json"])
    assert res.exit_code == 0, res.output
    (tmp_path / "plan.json").write_text(res.stdout)
    res = CliRunner().invoke(app, ["emit", "--from-plan", str(tmp_path / "plan.json"), "--out", str(tmp_path / "job")])
    assert res.exit_code == 0, res.output
    return tmp_path / "job"


def _sbatch(slurm, job: Path, env: dict[str, str], cwd: Path) -> tuple[str, float]:
    """Submit the emitted bench.sbatch and wait for it: (its output, seconds from submit to end)."""
    t0 = time.monotonic()
    submit = subprocess.run(
        ["sbatch", "--parsable", str(job / "bench.sbatch")],
        env=env | slurm.env, cwd=cwd, capture_output=True, text=True, check=True,
    )  # fmt: skip
    job_id = submit.stdout.strip().split(";")[0]
    slurm.wait(job_id, timeout_s=600)
    return (cwd / f"slurm-{job_id}.out").read_text(errors="replace"), time.monotonic() - t0


def test_sbatch_of_the_emitted_bench_job_runs_three_candidates_one_out_of_memory(slurm, mpich_run, tmp_path):
    """The emitted job's three candidates under sbatch, with a CPU memory cap set at submit time below
    DDP's measured peak (every parameter's states on each rank) and far above what the sharded
    strategies hold (a quarter of the optimizer states): DDP is recorded as not fitting, the two others
    complete, and compare shows them."""
    job = _emitted_slurm_job(tmp_path)
    db = tmp_path / "results.db"
    ddp_peak = _rows(mpich_run[0])["ddp"].measured["peak_memory_bytes"]
    # DeepSpeed's candidates would JIT-build its CPU optimizer inside the job: the three FSDP/DDP ones here
    env = _env(db, PRISM_PYTHON=sys.executable, PRISM_BENCH_STRATEGIES="ddp,fsdp_full_shard,hsdp_shard_grad_op")
    env["PRISM_BENCH_MEMORY_LIMIT"] = f"{0.9 * ddp_peak / 2**30:.6f}"
    output, _ = _sbatch(slurm, job, env, tmp_path)
    rows = _rows(db)
    assert set(rows) == {"ddp", "fsdp_full_shard", "hsdp_shard_grad_op"}, output[-4000:]
    assert rows["ddp"].status == "oom" and "does not fit at micro-batch 2" in rows["ddp"].measured["error"]
    done = [rows["fsdp_full_shard"], rows["hsdp_shard_grad_op"]]
    assert all(r.status == "ok" and LOCAL_KEYS <= set(r.measured) for r in done), output[-4000:]
    platform_file = str((tmp_path / "cpu-slurm.toml").resolve())  # loads again from any folder
    assert all(r.platform == platform_file and r.fingerprint["env"]["MASTER_ADDR"] for r in rows.values())
    res = CliRunner().invoke(app, ["compare", "--db", str(db), "--json"])
    assert res.exit_code == 0, res.output
    assert {row["strategy"] for row in json.loads(res.stdout)} >= {r.strategy for r in done}


def test_sbatch_of_a_job_with_a_hung_rank_ends_within_its_timeout_with_the_verdict(slurm, tmp_path):
    job = _emitted_slurm_job(tmp_path)
    db, timeout_s = tmp_path / "results.db", 6
    env = _env(db, PRISM_PYTHON=sys.executable, PRISM_BENCH_STRATEGIES="ddp,fsdp_full_shard")
    env |= {"PRISM_BENCH_FAULT": "hang:1:1", "PRISM_BENCH_TIMEOUT_S": str(timeout_s)}
    output, seconds = _sbatch(slurm, job, env, tmp_path)
    rows = _rows(db)
    assert set(rows) == {"ddp"} and rows["ddp"].status == "failed", output[-4000:]
    assert "process group failed" in rows["ddp"].measured["error"]
    assert "skipped: fsdp_full_shard: not started: ddp failed" in output
    assert seconds < 150  # the group's 6 s timeout twice (the step, the gather), the ranks' start, Slurm's polls


def test_tune_launched_under_mpich_stores_every_run_it_measured(tmp_path):
    """tune's search, every rank timing each candidate: rank 0 reports, each measured run is stored."""
    db = tmp_path / "results.db"
    cmd = [_launcher("mpiexec.mpich"), "-n", "4", sys.executable, "-m", "prism_strategy.cli", "tune", "--launched"]
    cmd += [*BENCH[:8], "--strategies", "ddp,fsdp_full_shard", "--micro-batches", "2", "--db", str(db), "--json"]
    proc = subprocess.run(cmd, env=_env(db), cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout)
    stored = Store(db).query()
    assert report["grid_size"] == 2 and report["runs"] == len(stored) == 2 and report["stop_reason"]
    assert {r.strategy for r in stored} == {"ddp", "fsdp_full_shard"}  # the best-predicted of each, first
    best = max(report["measured"], key=lambda m: m["samples_per_s"])
    assert report["best"]["samples_per_s"] == best["samples_per_s"]

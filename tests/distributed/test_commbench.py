"""commbench in CI: ONE launch (4 gloo ranks as 2 nodes x 2) replays the step collectives of
ddp, fsdp_full_shard, zero3 and hsdp_full_shard (node-local shard and cross-node replicate
groups of the 2x2 mesh) and times each kind.

What is asserted comes from outside commbench: the kinds (op, group, dtype, calls) are the
engine model's own `step_collectives` for the scenario, computed here; the replayed payload per
call equals the engine's bytes per call up to the rounding to whole elements split evenly over
the group (< group size x element bytes); the profiler's record of the replay matched (the
report's error is empty); every kind has a positive measured time; and the store holds one
point per kind, which load_curves turns into curves for the planner.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from prism_strategy.bench.results.curves import load_curves
from prism_strategy.bench.results.store import Store
from prism_strategy.cli import app
from prism_strategy.cli.bench_inputs import census_base
from prism_strategy.engines import step_collectives
from prism_strategy.inputs.stored import scenario_from_row
from prism_strategy.specs.parts import model_parts
from prism_strategy.strategies import get_strategy

pytestmark = pytest.mark.distributed
STRATEGIES = ("ddp", "fsdp_full_shard", "zero3", "hsdp_full_shard")
ITEMSIZE = {"float32": 4, "bfloat16": 2}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    db = tmp_path_factory.mktemp("commbench") / "results.db"
    res = CliRunner().invoke(
        app,
        [
            "commbench",
            "--model",
            "tiny-llama",
            "--strategies",
            ",".join(STRATEGIES),
            "--nproc",
            "4",
            "--ranks-per-node",
            "2",
            "--db",
            str(db),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout), db


def _engine_kinds(strategy):
    base = census_base(model="tiny-llama", nproc=4, ranks_per_node=2)  # commbench's defaults
    sc = scenario_from_row(base)
    parts = model_parts(sc.model, sc.training)
    return step_collectives(get_strategy(strategy), parts, sc.training, sc.layout)


def test_every_engine_collective_is_replayed_and_timed(run):
    data, _ = run
    assert (data["world"], data["nodes"], data["ranks_per_node"], data["backend"]) == (4, 2, 2, "gloo")
    by_name = {s["strategy"]: s for s in data["strategies"]}
    assert list(by_name) == list(STRATEGIES)
    for name in STRATEGIES:
        s, want = by_name[name], _engine_kinds(name)
        assert s["ok"] and s["error"] == "", s["error"]
        got = s["collectives"]
        assert [(c["op"], c["group"], c["dtype"], c["calls"]) for c in got] == [
            (w.op, w.group, w.dtype, w.calls) for w in want
        ]
        for c, w in zip(got, want):
            assert c["ranks"] == w.group_size
            assert abs(c["bytes_per_call_replayed"] - w.bytes_per_call) < w.group_size * ITEMSIZE[w.dtype] + 1
            assert c["seconds_per_call_measured"] > 0 and c["seconds_per_call_predicted"] > 0
        assert s["comm_s_measured"] == pytest.approx(sum(c["calls"] * c["seconds_per_call_measured"] for c in got))


def test_hsdp_replays_on_the_node_and_replicate_groups(run):
    data, _ = run
    hsdp = next(s for s in data["strategies"] if s["strategy"] == "hsdp_full_shard")
    groups = {(c["op"], c["group"], c["ranks"]) for c in hsdp["collectives"]}
    assert groups == {("all_gather", "node", 2), ("reduce_scatter", "node", 2), ("all_reduce", "across_nodes", 2)}


def test_measured_points_are_stored_with_their_fingerprint(run):
    data, db = run
    fp = data["fingerprint"]
    assert (fp["nodes"], fp["ranks_per_node"], fp["backend"], fp["platform"]) == (2, 2, "gloo", "cpu")
    assert fp["torch"] and fp["backend_version"].startswith("gloo")
    curves = load_curves(Store(db), "cpu")
    kinds = sum(len(s["collectives"]) for s in data["strategies"])
    assert data["stored"] == kinds == sum(len(c.points) for c in curves)
    across = [c for c in curves if c.nodes == 2 and c.ranks == 2]
    assert across and all(c.concurrent == 2 and c.label == "commbench" for c in across)


def test_one_rank_is_bad_input():
    res = CliRunner().invoke(app, ["commbench", "--nproc", "1", "--ranks-per-node", "1"])
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and "at least 2" in res.stderr


def test_launched_mode_as_emitted_jobs_run_it(tmp_path):
    """emit's commbench.pbs / .sbatch run `commbench --launched` on every rank a scheduler
    started; here torchrun starts the 4 ranks (2x2): rank 0 alone prints the report and stores."""
    import subprocess
    import sys

    from prism_strategy.bench.launch.harness import free_port

    db = tmp_path / "r.db"
    cmd = (
        f"exec {sys.executable} -m prism_strategy.cli commbench --launched --model tiny-llama "
        f"--strategies hsdp_shard_grad_op --nproc 4 --ranks-per-node 2 --db {db} --json"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node=4",
            f"--master-port={free_port()}",
            "--no-python",
            "bash",
            "-c",
            cmd,
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout)  # one JSON document: the other ranks print nothing
    (s,) = data["strategies"]
    assert s["ok"] and [(c["op"], c["group"]) for c in s["collectives"]] == [
        (w.op, w.group) for w in _engine_kinds("hsdp_shard_grad_op")
    ]
    assert data["stored"] == len(s["collectives"]) == sum(len(c.points) for c in load_curves(Store(db), "cpu"))


def test_the_stored_gloo_points_calibrate_the_cpu_platforms_comm_terms(run, tmp_path):
    """`calibrate --fit comm` on the rows this launch stored: the alpha-beta ring's terms fitted to
    real gloo timings, each decided by named points or held with a reason, and left out by group
    shape and by op (the launch has 3 shapes and 3 ops), written only when better than the preset."""
    _, db = run
    out = tmp_path / "cpu.toml"
    res = CliRunner().invoke(
        app, ["calibrate", "--platform", "cpu", "--db", str(db), "--out", str(out), "--fit", "comm", "--json"]
    )
    report = json.loads(res.stdout)
    c = report["comm"]
    assert res.exit_code == 0 and report["written"] and out.is_file(), report.get("refused")
    assert c["after"]["comm_median"] <= c["before"]["comm_median"]
    assert all(bool(t["decided_by"]) != bool(t["held"]) for t in c["terms"])
    left = {row["left_out"] for row in c["leave_one_out"]}
    assert {"ranks 1x2", "ranks 2x2", "ranks 2x1", "op all_reduce", "op all_gather", "op reduce_scatter"} <= left

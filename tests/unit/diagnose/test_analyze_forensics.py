"""What grew in a collapse (analysis/forensics.py) from capture records built by hand: each cause
is named with its op, ranks and group; `analyze` reads the records from a folder, a run cut
mid-capture included; `--json` carries them under `forensics`."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from prism_strategy.analysis.forensics import analyze_forensics
from prism_strategy.cli import app
from prism_strategy.diagnose.analyze import analyze

UNITS = 4


def rec(window, step, rank, *, bwd, cpu=0.02, rs=0.01, ar=0.005, gc=0.0, alloc=None):
    """One captured step: per unit a reduce_scatter then an all_reduce (HSDP's order in backward)."""
    return {
        "kind": "forensic",
        "window": window,
        "step": step,
        "rank": rank,
        "wall": {"forward": 0.05, "backward": bwd, "optimizer": 0.01},
        "cpu": {"forward": 0.05, "backward": cpu, "optimizer": 0.01},
        "collectives": [
            {"op": "all_gather", "phase": "forward", "group": "0,1", "first_call": 0, "calls": UNITS,
             "bytes": 4096, "host_s": [0.002] * UNITS},
            {"op": "reduce_scatter", "phase": "backward", "group": "0,1", "first_call": UNITS, "calls": UNITS,
             "bytes": 4096, "host_s": [rs / UNITS] * UNITS},
            {"op": "all_reduce", "phase": "backward", "group": "0,2", "first_call": UNITS + 1, "calls": UNITS,
             "bytes": 2048, "host_s": [ar / UNITS] * UNITS},
        ],
        "gc": {"backward": {"count": 1, "pause_s": gc, "max_s": gc}},
        "allocator": alloc or {"available": False, "why": "CPU"},
    }  # fmt: skip


def run(after, ranks=4, before=None):
    """Baseline steps 3-7 (backward 0.1 s), collapse steps 30-34 from after(rank) -> rec kwargs."""
    out = []
    for r in range(ranks):
        out += [rec("baseline", s, r, bwd=0.1, **(before(r) if before else {})) for s in range(3, 8)]
        out += [rec("collapse", s, r, **after(r)) for s in range(30, 35)]
    return out


META = {r: {"rank": r, "host": "h", "local_rank": r % 2, "ranks_per_node": 2, "node": r // 2} for r in range(4)}


def test_reduce_scatter_grown_on_all_ranks_is_collective_bound():
    fx = analyze_forensics(run(lambda r: {"bwd": 1.1, "rs": 1.01}), META)
    assert fx["kind"] == "collective" and fx["op"] == "reduce_scatter" and fx["phase"] == "backward"
    assert fx["where"]["group"] == "all ranks" and fx["units"]["grew"] == "every call"
    row = next(g for g in fx["grew"] if g.get("op") == "reduce_scatter")
    assert row["ranks"] == [0, 1, 2, 3] and row["before"] == 0.01 and row["after"] == 1.01
    assert not any(g.get("op") == "all_reduce" for g in fx["grew"])
    assert "CCL_ATL_SYNC_COLL=1" in fx["experiment"]


def test_one_slow_node_is_named_and_the_others_wait_in_the_next_collective():
    """Node 1's reduce-scatters slow; node 0's ranks wait for them in the replica all-reduce, which
    comes later in issue order: the cause is the first that grew."""

    def after(r):
        return {"bwd": 1.1, "rs": 1.01} if r >= 2 else {"bwd": 1.1, "ar": 1.005}

    fx = analyze_forensics(run(after), META)
    assert fx["kind"] == "collective" and fx["op"] == "reduce_scatter"
    assert fx["where"] == {"group": "node 1", "nodes": [1], "ranks": [2, 3]}
    assert "one node fewer, leaving out node 1" in fx["experiment"]
    ar = next(g for g in fx["grew"] if g.get("op") == "all_reduce")
    assert ar["ranks"] == [0, 1]


def test_one_tile_on_every_node_is_named():
    def after(r):
        return {"bwd": 1.1, "rs": 1.01} if r % 2 == 1 else {"bwd": 1.1, "ar": 1.005}

    fx = analyze_forensics(run(after), META)
    assert fx["where"]["group"] == "local rank (tile) 1 on every node" and fx["where"]["ranks"] == [1, 3]


def test_cpu_time_growing_with_wall_time_is_host_bound():
    fx = analyze_forensics(run(lambda r: {"bwd": 1.1, "cpu": 1.0}), META)
    assert fx["kind"] == "host" and fx["cause"] == "cpu"
    assert any(g.get("name") == "host CPU time" and g["phase"] == "backward" for g in fx["grew"])
    assert "pinned" in fx["experiment"]


def test_gc_pauses_in_backward_are_host_bound_gc():
    fx = analyze_forensics(run(lambda r: {"bwd": 1.1, "cpu": 1.0, "gc": 0.9}), META)
    assert fx["kind"] == "host" and fx["cause"] == "gc" and "gc.freeze()" in fx["experiment"]


def test_allocator_retries_during_the_collapse_are_allocator_bound():
    def alloc(retries):
        return {"available": True, "reserved_bytes": 2**30, "num_alloc_retries": retries, "allocated_bytes": 2**29}

    records = []
    for r in range(2):
        records += [rec("baseline", s, r, bwd=0.1, alloc=alloc(0)) for s in range(3, 8)]
        records += [rec("collapse", s, r, bwd=1.1, cpu=0.5, alloc=alloc(s - 29)) for s in range(30, 35)]
    fx = analyze_forensics(records, META)
    assert fx["kind"] == "allocator" and "expandable_segments" in fx["experiment"]
    assert any(g.get("name") == "num_alloc_retries" for g in fx["grew"])


def test_nothing_that_grew_is_unexplained():
    fx = analyze_forensics(run(lambda r: {"bwd": 1.1}), META)
    assert fx["kind"] == "unexplained" and "torch.profiler" in fx["experiment"]


def test_baseline_only_has_no_kind():
    records = [rec("baseline", s, r, bwd=0.1) for r in range(2) for s in range(3, 8)]
    fx = analyze_forensics(records, META)
    assert fx["kind"] is None and fx["windows"] == {"baseline": [3, 7, 5]}


def write_run(folder, *, collapse_from=20, steps=36, cut_capture_at=None):
    """A StepMonitor folder: 4 ranks whose backward grows 10x from `collapse_from`, with the
    capture's records; the rank-2 file ends mid-line at capture step `cut_capture_at` (killed)."""
    folder.mkdir()
    for r in range(4):
        lines = [json.dumps({"kind": "meta", **META[r], "world_size": 4, "t0": 0.0})]
        for s in range(steps):
            bwd = 1.1 if s >= collapse_from else 0.1
            lines.append(json.dumps({"kind": "step", "step": s, "rank": r, "step_s": bwd + 0.07,
                                     "phases": {"data": 0.01, "forward": 0.05, "backward": bwd, "optimizer": 0.01}}))  # fmt: skip
            if 3 <= s < 8:
                lines.append(json.dumps(rec("baseline", s, r, bwd=0.1)))
            if 30 <= s < 35:
                lines.append(json.dumps(rec("collapse", s, r, bwd=1.1, rs=1.01)))
            if r == 2 and s == cut_capture_at:
                (folder / f"rank{r}.jsonl").write_text("\n".join(lines)[:-20])  # cut mid-write, no close
                break
        else:
            lines.append(json.dumps({"kind": "close", "rank": r, "steps": steps}))
            (folder / f"rank{r}.jsonl").write_text("\n".join(lines) + "\n")


def test_analyze_reports_forensics_beside_the_collapse(tmp_path):
    write_run(tmp_path / "run")
    v = analyze(tmp_path / "run")
    assert v.verdict == "collapse" and v.forensics["kind"] == "collective"
    out = CliRunner().invoke(app, ["analyze", str(tmp_path / "run"), "--json"])
    assert out.exit_code == 1
    fx = json.loads(out.output)["forensics"]
    assert fx["kind"] == "collective" and fx["op"] == "reduce_scatter"
    assert {"op", "phase", "ranks", "before", "after"} <= set(fx["grew"][1])
    text = CliRunner().invoke(app, ["analyze", str(tmp_path / "run")]).output
    assert "collective-bound: reduce_scatter in backward grew on all ranks" in text
    assert "to settle it:" in text and all(len(line) <= 100 for line in text.splitlines())


def test_a_run_killed_mid_capture_still_analyses(tmp_path):
    write_run(tmp_path / "run", cut_capture_at=32)
    v = analyze(tmp_path / "run")
    assert v.verdict == "incomplete" and v.forensics["kind"] == "collective"
    assert v.forensics["windows"]["collapse"] == [30, 34, 5]  # rank 2's steps 30-31 + the others'
    assert any("rank2.jsonl" in s for s in v.skipped)


def test_a_collapse_found_after_the_run_ended_says_the_window_never_opened(tmp_path):
    write_run(tmp_path / "run", collapse_from=20, steps=30)  # capture records only for the baseline
    v = analyze(tmp_path / "run")
    assert v.verdict == "collapse" and v.forensics["kind"] is None
    assert "ended before the capture's collapse window" in v.forensics["message"]

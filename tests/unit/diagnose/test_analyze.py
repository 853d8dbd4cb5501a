"""Detectors on synthetic step logs, PRISM-style parsing, bad input (no process group)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from prism_strategy.analysis.detect import DetectConfig, Series, StepTimes, detect_all
from prism_strategy.diagnose.analyze import analyze, analyze_run
from prism_strategy.diagnose.logs import RunLog, load_run
from prism_strategy.readers.prism import parse_timing_line
from prism_strategy.specs.errors import SpecError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "logs"


def synth(steps=40, ranks=4, *, fwd=0.10, bwd=0.30, opt=0.05, tokens=4096.0, seed=0, modify=None):
    """Synchronous DP steps with 3% jitter; modify(step, rank, dict) may change the phases."""
    rng = random.Random(seed)
    out = []
    for s in range(steps):
        for r in range(ranks):
            ph = {"data": 0.01, "forward": fwd, "backward": bwd, "optimizer": opt, "tokens": tokens}
            if modify:
                modify(s, r, ph)
            j = {k: v * rng.uniform(0.97, 1.03) if k != "tokens" else v for k, v in ph.items()}
            total = j["data"] + j["forward"] + j["backward"] + j["optimizer"]
            out.append(StepTimes(s, r, total, j["data"], j["forward"], j["backward"], j["optimizer"], j["tokens"]))
    return out


def kinds(records, cfg=None):
    return [e.kind for e in detect_all(Series.from_records(records), cfg or DetectConfig())]


def test_healthy_has_no_event():
    assert kinds(synth()) == []
    v = analyze_run(RunLog(records=synth()))
    assert v.verdict == "healthy" and v.healthy and v.events == ()


def collapse_after(step, factor=10.0):
    def modify(s, r, ph):
        if s >= step:
            ph["backward"] *= factor

    return modify


def test_collapse_all_ranks_backward_rises_forward_flat():
    v = analyze_run(RunLog(records=synth(modify=collapse_after(20))))
    assert v.verdict == "collapse"
    ev = v.events[0].evidence
    assert ev["from_step"] == 20 and ev["to_step"] == 39
    assert ev["backward_factor"] == pytest.approx(10, rel=0.1) and ev["forward_factor"] < 1.2
    assert "straggler" not in [e.kind for e in v.events]


def test_collapse_needs_enough_consecutive_steps():
    def blip(s, r, ph):
        if s in (20, 21, 22, 23):  # 4 < 5 steps
            ph["backward"] *= 10

    assert kinds(synth(modify=blip)) == []


def test_collapse_not_when_one_rank_stays_fast():
    def partial(s, r, ph):
        if s >= 20 and r != 1:
            ph["backward"] *= 10

    assert "collapse" not in kinds(synth(modify=partial))


def test_whole_slowdown_with_forward_is_not_collapse():
    def both(s, r, ph):
        if s >= 20:
            ph["backward"] *= 4
            ph["forward"] *= 4

    assert "collapse" not in kinds(synth(modify=both))


def slow_rank(rank, factor=2.0):
    def modify(s, r, ph):
        extra = ph["forward"] * (factor - 1)
        if r == rank:
            ph["forward"] += extra
        else:
            ph["backward"] += extra  # the others wait for it in the gradient all-reduce

    return modify


def test_straggler_is_named_with_its_wait():
    v = analyze_run(RunLog(records=synth(modify=slow_rank(2))))
    assert v.verdict == "straggler" and v.events[0].ranks == (2,)
    ev = v.events[0].evidence
    assert ev["local_ratio"]["2"] == pytest.approx(1.8, rel=0.1)
    assert ev["collective_wait_s"]["2"] < min(ev["collective_wait_s"][r] for r in "013")
    assert ev["cause"] == "compute" and ev["causes"]["2"]["cpu_time"] == "not recorded"


def test_intermittent_descheduling_is_not_a_straggler():
    def sometimes(s, r, ph):
        if r == 3 and s % 2:
            ph["forward"] *= 4

    assert "straggler" not in kinds(synth(modify=sometimes))


def test_slow_rank_with_more_tokens_is_not_a_straggler():
    def more_tokens(s, r, ph):
        slow_rank(2)(s, r, ph)
        if r == 2:
            ph["tokens"] *= 2

    assert "straggler" not in kinds(synth(modify=more_tokens))


def test_input_skew_step_time_follows_tokens():
    rng = random.Random(3)

    def skew(s, r, ph):
        n = rng.uniform(0.2, 1.0)
        ph["tokens"] = 4096 * n
        ph["forward"] *= n
        ph["backward"] *= n

    v = analyze_run(RunLog(records=synth(modify=skew)))
    assert v.verdict == "input_skew"
    assert v.events[0].evidence["spearman_compute_vs_tokens"] > 0.9


def test_constant_tokens_never_skew():
    assert "input_skew" not in kinds(synth(modify=collapse_after(20)))


def test_hang_report_outranks_collapse(tmp_path):
    run = RunLog(
        records=synth(modify=collapse_after(20)),
        hang_reports=[
            {
                "event": "hang",
                "step": 39,
                "phase": "backward",
                "ranks_reached": [0, 1, 3],
                "ranks_not_reached": {"2": {"step": 39, "phase": "forward"}},
                "timeout_s": 5,
            }
        ],
    )
    v = analyze_run(run)
    assert v.verdict == "hang" and [e.kind for e in v.events] == ["hang", "collapse"]
    assert v.events[0].ranks == (2,) and "'backward'" in v.message


def test_to_dict_has_the_contract_keys():
    d = analyze_run(RunLog(records=synth(modify=slow_rank(1)))).to_dict()
    assert {"verdict", "events", "ranks", "evidence"} <= set(d)
    assert d["events"][0]["event"] == "straggler" and d["events"][0]["ranks"] == [1]
    assert set(d["ranks"]) == {"0", "1", "2", "3"}
    json.dumps(d)


# -- PRISM-style logs -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "line, want",
    [
        (
            "[rank3]: [TIMING] step 21 | Data 0.010s | Fwd 0.312s | Bwd 11.9s | Opt 0.095s | Total 12.3s",
            (21, 3, 12.3, 0.010, 0.312, 11.9, 0.095),
        ),
        ("[TIMING] Data: 12ms Fwd: 300ms Bwd: 1000ms Opt: 90ms", (0, 0, 1.402, 0.012, 0.3, 1.0, 0.09)),
        ("[default1]:[TIMING] iter=7 data=1.0 fwd=2.0 bwd=3.0 opt=4.0 seq 512", (7, 1, 10.0, 1.0, 2.0, 3.0, 4.0)),
        (
            "2026-01-01 INFO rank 5 [timing] Forward 0.2s Backward 0.4s Optimizer 0.1s",
            (0, 5, 0.7, math.nan, 0.2, 0.4, 0.1),
        ),
    ],
)
def test_parse_timing_line(line, want):
    rec = parse_timing_line(line, {})
    got = (rec.step, rec.rank, rec.step_s, rec.data, rec.forward, rec.backward, rec.optimizer)
    for g, w in zip(got, want):
        assert (math.isnan(g) and math.isnan(w)) or g == pytest.approx(w)


def test_timing_line_without_phases_is_ignored():
    assert parse_timing_line("[TIMING] DATA_READ done", {}) is None
    assert parse_timing_line("step 3 loss 2.0", {}) is None


def test_prism_timing_log_collapse():
    v = analyze(FIXTURES / "prism_collapse")
    assert v.verdict == "collapse" and v.events[0].ranks == (0, 1, 2, 3)
    assert v.events[0].evidence["from_step"] in (20, 21)


def test_prism_perf_jsonl_healthy_and_straggler():
    assert analyze(FIXTURES / "prism_healthy" / "perf.jsonl").verdict == "healthy"
    v = analyze([FIXTURES / "prism_straggler"])
    assert v.verdict == "straggler" and v.events[0].ranks == (2,)
    assert v.ranks[2].forward == pytest.approx(0.54, rel=0.1)  # ms keys read as ms


# -- bad input ---------------------------------------------------------------------------------
def test_missing_path(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        load_run([tmp_path / "nope"])


def test_empty_dir_and_unrelated_files(tmp_path):
    with pytest.raises(SpecError, match="no step records"):
        load_run([tmp_path])
    (tmp_path / "notes.txt").write_text("nothing to see\n")
    with pytest.raises(SpecError, match="no step records"):
        load_run([tmp_path])


def test_malformed_jsonl_line_names_file_and_line(tmp_path):
    good = json.dumps({"kind": "step", "step": 0, "rank": 0, "step_s": 1.0, "phases": {"forward": 0.5}})
    (tmp_path / "rank0.jsonl").write_text(f"{good}\n{{not json\n{good}\n")
    with pytest.raises(SpecError, match=r"rank0\.jsonl:2: malformed JSON"):
        load_run([tmp_path])


def test_unterminated_last_line_is_skipped(tmp_path):
    good = json.dumps({"kind": "step", "step": 0, "rank": 0, "step_s": 1.0, "phases": {"forward": 0.5}})
    (tmp_path / "rank0.jsonl").write_text(f"{good}\n{good[:20]}")
    run = load_run([tmp_path])
    assert len(run.records) == 1 and run.skipped


def test_step_record_missing_fields(tmp_path):
    (tmp_path / "rank0.jsonl").write_text(json.dumps({"kind": "step", "rank": 0}) + "\n")
    with pytest.raises(SpecError, match="rank0.jsonl:1"):
        load_run([tmp_path])


def with_cpu(records, cpu_of=lambda rec: rec.forward):
    """Attach CPU times (CPU devices): by default CPU time == wall time of the local phases."""
    return [r._replace(cpu_forward=cpu_of(r), cpu_local=r.data + cpu_of(r) + r.optimizer) for r in records]


def straggler_of(records):
    v = analyze_run(RunLog(records=records))
    assert v.verdict == "straggler" and v.events[0].ranks == (2,), v.message
    return v.events[0]


def test_waiting_rank_is_a_straggler_by_wall_time():
    recs = synth(modify=slow_rank(2))  # rank 2's wall forward is 2x ...
    ev = straggler_of(with_cpu(recs, cpu_of=lambda r: 0.1))  # ... its CPU time is not: it waits
    assert ev.evidence["cause"] == "waiting" and "waiting, not computing" in ev.message
    assert ev.evidence["causes"]["2"]["extra_cpu_s"] == pytest.approx(0, abs=0.01)
    assert ev.evidence["causes"]["2"]["extra_wall_s"] == pytest.approx(0.1, rel=0.15)


def test_compute_straggler_shows_in_cpu_time():
    ev = straggler_of(with_cpu(synth(modify=slow_rank(2))))  # real extra compute: CPU time grows
    assert ev.evidence["cause"] == "compute"
    assert ev.evidence["causes"]["2"]["extra_cpu_s"] == pytest.approx(0.1, rel=0.15)


def test_data_phase_straggler_is_the_data_loader():
    def slow_data(s, r, ph):
        if r == 2:
            ph["data"] += 0.12
        else:
            ph["backward"] += 0.12

    ev = straggler_of(with_cpu(synth(modify=slow_data)))
    assert ev.evidence["cause"] == "data_loader" and "data loader" in ev.message
    assert ev.evidence["causes"]["2"]["extra_data_s"] == pytest.approx(0.12, rel=0.15)


def test_uniform_waiting_on_every_rank_is_healthy():
    rng = random.Random(5)

    def contended(s, r, ph):  # every rank descheduled now and then, none consistently
        if rng.random() < 0.3:
            ph["forward"] *= rng.uniform(1.5, 4)

    assert kinds(with_cpu(synth(modify=contended), cpu_of=lambda r: 0.1)) == []


def meta(rank, **kw):
    return json.dumps({"kind": "meta", "rank": rank, "t0": 1.0, "host": "h", "cpus": 2, **kw})


def step_line(s, rank):
    return json.dumps(
        {
            "kind": "step",
            "step": s,
            "rank": rank,
            "step_s": 0.5,
            "phases": {"forward": 0.1, "backward": 0.3, "optimizer": 0.1},
        }
    )


def test_log_without_close_is_incomplete(tmp_path):
    for r, last in ((0, 11), (1, 12), (2, -1)):
        lines = [meta(r)] + [step_line(s, r) for s in range(last + 1)]
        (tmp_path / f"rank{r}.jsonl").write_text("\n".join(lines) + "\n")
    v = analyze(tmp_path)
    assert v.verdict == "incomplete" and not v.healthy and v.events[0].ranks == (0, 1, 2)
    assert v.events[0].evidence["last_step"] == {"0": 11, "1": 12, "2": None}
    assert "rank 0 after step 11, rank 1 after step 12, rank 2 before its first step" in v.message


def test_closed_log_is_complete_and_hang_outranks_incomplete(tmp_path):
    for r in (0, 1):
        lines = [meta(r)] + [step_line(s, r) for s in range(20)]
        close = [json.dumps({"kind": "close", "rank": r, "steps": 20})] if r == 0 else []
        (tmp_path / f"rank{r}.jsonl").write_text("\n".join(lines + close) + "\n")
    v = analyze(tmp_path)
    assert v.verdict == "incomplete" and v.events[0].ranks == (1,)
    (tmp_path / "rank1.jsonl").write_text(
        (tmp_path / "rank1.jsonl").read_text() + json.dumps({"kind": "close", "steps": 20}) + "\n"
    )
    assert analyze(tmp_path).verdict == "healthy"  # a close without a rank is the file's rank
    (tmp_path / "rank1.jsonl").write_text("\n".join([meta(1)] + [step_line(s, 1) for s in range(20)]) + "\n")
    (tmp_path / "hang_report.json").write_text(
        json.dumps({"event": "hang", "step": 20, "phase": "backward", "written": 2.0})
    )
    assert [e.kind for e in analyze(tmp_path).events] == ["hang"]


def test_oversubscribed_host_is_named_on_a_straggler(tmp_path):
    recs = with_cpu(synth(modify=slow_rank(2)), cpu_of=lambda r: 0.1)
    run = RunLog(records=recs, meta={r: {"host": "h", "cpus": 2} for r in range(4)}, closed={r: 40 for r in range(4)})
    v = analyze_run(run)
    assert v.verdict == "straggler" and v.evidence["oversubscribed"] == [{"host": "h", "ranks": 4, "cpus": 2}]
    assert "host h ran 4 ranks on 2 CPUs" in v.message and "real straggler" in v.message


def test_small_absolute_forward_jitter_does_not_hide_a_collapse():
    def collapse_with_jitter(s, r, ph):
        ph["forward"] = 0.003
        if s >= 20:
            ph["backward"] *= 10
            if r == 3:
                ph["forward"] = 0.006  # 2x, but +3 ms next to +2.7 s of backward

    assert kinds(synth(modify=collapse_with_jitter)) == ["collapse"]


def test_restart_in_same_dir_uses_the_last_run(tmp_path):
    def step(s, bwd):
        return json.dumps(
            {"kind": "step", "step": s, "rank": 0, "step_s": bwd + 0.1, "phases": {"forward": 0.1, "backward": bwd}}
        )

    first = [json.dumps({"kind": "meta", "rank": 0, "t0": 100.0})] + [
        step(s, 1.0 if s < 10 else 10.0) for s in range(30)
    ]
    second = [json.dumps({"kind": "meta", "rank": 0, "t0": 200.0})] + [step(s, 1.0) for s in range(20)]
    second.append(json.dumps({"kind": "close", "rank": 0, "steps": 20}))
    (tmp_path / "rank0.jsonl").write_text("\n".join(first + second) + "\n")
    (tmp_path / "hang_report.json").write_text(json.dumps({"event": "hang", "step": 3, "written": 150.0}))
    run = load_run([tmp_path])
    assert len(run.records) == 20 and not run.hang_reports and len(run.skipped) == 2
    assert analyze(tmp_path).verdict == "healthy"


def test_rank_from_path_needs_a_word_boundary(tmp_path):
    d = tmp_path / "frank2024" / "rank_3"
    d.mkdir(parents=True)
    (d / "perf.jsonl").write_text(json.dumps({"step": 0, "fwd_time": 0.1, "bwd_time": 0.2}) + "\n")
    assert load_run([d]).records[0].rank == 3

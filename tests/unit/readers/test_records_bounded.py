"""Issue 38 item 3: the readers hold step records in bounded memory. Truth: window means
computed in the test from the records appended (the definition in readers/steps.Records), and
the lines of a file against Python's own splitting of its text."""

from __future__ import annotations

import math

import pytest

from prism_strategy.readers.collective_log import MAX_LINE, on_progress, text_lines
from prism_strategy.readers.steps import Records, StepTimes
from prism_strategy.specs.errors import SpecError


def _rec(step: int, rank: int) -> StepTimes:
    return StepTimes(step, rank, 1.0 + step + rank / 10, data=0.01 * step, forward=math.nan)


def test_records_past_the_cap_are_averaged_over_windows_of_steps():
    recs = Records(cap=64)
    for step in range(200):
        for rank in range(2):
            recs.append(_rec(step, rank), f"/logs/train.log:{1 + 2 * step + rank}")
    assert len(recs) <= 64 and recs.stride in (8, 16, 32)
    w = recs.stride
    assert sum(recs.counts()) == 400 and recs.merged == 400 - len(recs)
    for (r, where), n in zip(recs.with_wheres(), recs.counts()):
        steps = [s for s in range(200) if s // w == r.step // w]
        assert r.step == steps[0] and n == len(steps)  # the window's first step, its step count
        assert r.step_s == pytest.approx(sum(1.0 + s + r.rank / 10 for s in steps) / n)
        assert r.data == pytest.approx(sum(0.01 * s for s in steps) / n) and math.isnan(r.forward)
        assert where == f"/logs/train.log:{1 + 2 * steps[0] + r.rank}"
    assert [(r.step, r.rank) for r in recs][:2] == [(0, 0), (0, 1)]  # read order kept
    assert "averaged over windows of" in recs.note()


def test_records_under_the_cap_read_back_as_appended():
    recs = Records(cap=100)
    rows = [(_rec(s, r), f"a:{s}") for s in range(10) for r in range(3)]
    for rec, where in rows:
        recs.append(rec, where)
    assert list(recs.with_wheres()) == rows or all(  # nan != nan: compare field by field
        a[1] == b[1] and all((x == y) or (math.isnan(x) and math.isnan(y)) for x, y in zip(a[0], b[0]))
        for a, b in zip(recs.with_wheres(), rows)
    )
    assert recs[-1].step == 9 and recs.stride == 1 and recs.note() == ""


def test_text_lines_match_pythons_lines_and_report_progress(tmp_path, monkeypatch):
    p = tmp_path / "x.log"
    text = "a\r\nb\n\nc"  # Windows line end, blank line, a last line cut without its newline
    p.write_bytes(text.encode())
    assert list(text_lines(p)) == [(1, "a", True), (2, "b", True), (3, "", True), (4, "c", False)]
    p.write_text("x\n" * 5)
    import prism_strategy.readers.collective_log as cl

    monkeypatch.setattr(cl, "PROGRESS_EVERY", 2)
    seen: list[tuple[int, int]] = []
    on_progress(lambda path, done, size: seen.append((done, size)))
    try:
        assert len(list(text_lines(p))) == 5
    finally:
        on_progress(None)
    assert seen == [(4, 10), (8, 10), (10, 10)]


def test_a_line_longer_than_the_cap_is_refused_after_reading_only_the_cap(tmp_path):
    p = tmp_path / "big.log"
    with open(p, "wb") as f:
        f.truncate(1 << 30)  # 1 GiB of NUL bytes and no newline (sparse: no disk used)
    with pytest.raises(SpecError, match=f"longer than {MAX_LINE:,} characters"):
        list(text_lines(p))


def test_step_windows_take_the_slowest_rank_of_steps_every_rank_logged():
    from prism_strategy.readers.training_log import ParsedLog, step_windows

    log = ParsedLog(format="prism-log", files=[])
    rows = [  # (step, rank, step_s, forward): rank 1 logs step 2 twice (the later one wins), step 3 only rank 0
        (1, 0, 1.0, 0.3),
        (1, 1, 1.2, math.nan),
        (2, 1, 9.0, 0.1),
        (2, 0, 1.1, 0.4),
        (2, 1, 1.3, 0.2),
        (3, 0, 1.0, 0.3),
    ]
    for i, (step, rank, t, fwd) in enumerate(rows, 1):
        log.record(StepTimes(step, rank, t, forward=fwd), f"x.log:{i}")
    got = [(w.last_step, w.steps, w.where, w.step_s, w.phases) for w in step_windows(log)]
    assert got == [(1, 1, "x.log:1", 1.2, {"forward": 0.3}), (2, 1, "x.log:4", 1.3, {"forward": 0.4})]


def test_a_run_past_the_record_cap_imports_windows_of_several_steps(tmp_path, monkeypatch):
    import prism_strategy.readers.steps as steps
    from prism_strategy.readers import read_run

    monkeypatch.setattr(steps, "MAX_RECORDS", 100)
    log = tmp_path / "train.log"
    line = "[rank{r}]: [TIMING] step {s} | Data 10.0ms | Fwd 0.300s | Bwd {b:.3f}s | Opt 0.090s | Total {t:.3f}s\n"
    with open(log, "w") as f:
        for s in range(400):
            for r in range(2):
                b = 1.0 + s / 1000
                f.write(line.format(r=r, s=s, b=b, t=0.4 + b))
    parsed = read_run(log)
    stride = parsed.records.stride
    assert len(parsed.records) <= 100 and stride > 1
    assert any("averaged over windows of" in n for n in parsed.notes)
    assert sum(w.steps for w in parsed.windows) == 400
    for w in parsed.windows:
        window = range(w.last_step // stride * stride, w.last_step + 1)
        assert w.steps == len(window) and (w.last_step + 1) % stride == 0 or w.last_step == 399
        assert w.step_s == pytest.approx(sum(0.4 + 1.0 + s / 1000 for s in window) / len(window), abs=2e-3)

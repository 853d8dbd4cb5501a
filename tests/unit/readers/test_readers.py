"""One reading layer (readers.READERS) for `analyze` and `results import`: the same log reads the
same way for both, and the behaviours that changed when the two grammars became one: logs analyze
used to read wrongly or silently now read right or exit 2 naming file:line, and logs import used
to refuse are now stored."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prism_strategy import readers
from prism_strategy.bench.importers import build_import, read_log
from prism_strategy.cli import app
from prism_strategy.diagnose.logs import load_run
from prism_strategy.specs.errors import SpecError

FIX = Path(__file__).resolve().parents[2] / "fixtures"
IMP, LOGS = FIX / "imports", FIX / "logs"
SRC = Path(__file__).resolve().parents[3] / "src" / "prism_strategy"
CPU = dict(
    model="tiny-llama",
    mode="e2e",
    strategy="ddp",
    platform="cpu",
    nodes=1,
    micro_batch=2,
    seq_len=128,
    ckpt_freq=0,
    precision="fp32",
)
A1 = dict(
    model="qwen3-0.6b",
    vision="siglip2-base-patch16-224",
    platform="aurora",
    seq_len=512,
    ckpt_freq=1,
    precision="bf16-pure",
    mode="e2e",
)


def test_every_reader_has_the_four_names_and_a_unique_format():
    for r in readers.READERS:
        assert isinstance(r.FORMAT, str) and r.SUFFIXES and callable(r.looks_like) and callable(r.read), r
    assert len(readers.FORMATS) == len(readers.READERS)
    assert not set(readers.FORMATS) & set(readers.COLLECTIVE_FORMATS)


def test_the_timing_grammar_lives_in_one_file():
    files = [
        p.relative_to(SRC).as_posix()
        for p in SRC.rglob("*.py")
        if re.search(r"re\.compile\([^\n]*TIMING", p.read_text())
    ]
    assert files == ["readers/prism.py"]


def _torchrun_log(tmp_path: Path) -> Path:
    """Two ranks through torchrun (`[rankN]:` prefixes), colour codes, CRLF line ends, one line
    holding both ranks' unbuffered writes, steps 0-9; rank 1's backward is 0.1 s longer."""
    lines = ["[rank0]: \x1b[32mINFO\x1b[0m starting"]
    for s in range(10):
        r0 = f"[rank0]: [TIMING] step {s} | Data 10.0ms | Fwd 0.300s | Bwd 0.500s | Opt 0.100s"
        r1 = f"[rank1]: [TIMING] step {s} | Data 10.0ms | Fwd 0.300s | Bwd 0.600s | Opt 0.100s"
        if s == 2:
            r0 = r0.replace("[TIMING]", "\x1b[36m[TIMING]\x1b[0m")
        lines += [r0 + r1] if s == 4 else [r0, r1]
    p = tmp_path / "train.log"
    p.write_bytes(("\r\n".join(lines) + "\r\n").encode())
    return p


def test_a_per_rank_timing_log_reads_the_same_for_analyze_and_import(tmp_path):
    path = _torchrun_log(tmp_path)
    run = load_run([path])
    assert sorted((r.rank, r.step) for r in run.records) == [(r, s) for r in (0, 1) for s in range(10)]
    assert {round(r.backward, 6) for r in run.records if r.rank == 1} == {0.6}  # line 6 split per rank
    log = read_log(path)
    assert [w.last_step for w in log.windows] == list(range(10))
    assert all(w.step_s == pytest.approx(1.01) and w.phases["backward"] == pytest.approx(0.6) for w in log.windows)
    # import used to refuse this log at its first [TIMING] line (only PRISM's own shape parsed)
    assert build_import(path, CPU).result.measured["step_time_s"] == pytest.approx(1.01)


def test_a_phase_named_without_a_time_exits_2_in_analyze_too():
    # analyze used to read line 47 ('Bwd: ?1.884s') as a step with no backward
    with pytest.raises(SpecError, match=r"malformed\.log:47: \[TIMING\] line"):
        load_run([IMP / "prism" / "malformed.log"])
    res = CliRunner().invoke(app, ["analyze", str(IMP / "prism" / "malformed.log")])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1 and "malformed.log:47" in res.output


@pytest.mark.parametrize(
    "line, records",
    [
        ("[TIMING] step 3 | Data: ?0.01s | Fwd 0.3s", None),
        ("[TIMING] step 3 | Data = | Fwd 0.3s", None),
        ("[TIMING] step 3 | Fwd 0.3s | Bwd 0.5s (data loader idle)", 1),
        ("[TIMING] DATA_READ done", 0),
    ],
)
def test_a_phase_field_without_a_time_is_bad_but_prose_is_not(tmp_path, line, records):
    p = tmp_path / "x.log"
    p.write_text(line + "\n")
    if records is None:
        with pytest.raises(SpecError, match=r"x\.log:1: \[TIMING\] line"):
            readers.prism.read(p)
    else:
        log = readers.prism.read(p)
        assert len(log.records) == records and all(r.step_s == pytest.approx(0.8) for r in log.records)


def test_a_cut_last_line_is_left_out_by_analyze_and_refused_by_import():
    path = IMP / "prism" / "partial.log"  # ends '[TIMING] Data: 0.023s | Fwd: 0' (no newline)
    run = load_run([path])
    assert max(r.step for r in run.records) == 100  # analyze used to add a step with a 0 s forward
    assert all(r.forward > 0.5 for r in run.records)
    assert any(":64:" in s and "cut off" in s for s in run.skipped)
    shown = CliRunner().invoke(app, ["analyze", str(path), "--json"])
    assert any(":64:" in s for s in json.loads(shown.output)["skipped"])  # said, not silently dropped
    with pytest.raises(SpecError, match=r"partial\.log:64: .*cut off"):
        build_import(path, A1)


def test_prism_native_log_gives_analyze_the_logged_steps_and_interval_means():
    """analyze used to count PRISM's [TIMING] lines as steps 0, 1, 2 ... with their running
    means; now each record is the import's window: the logged step, the mean over its interval."""
    path = IMP / "prism" / "train.log"
    run, log = load_run([path]), read_log(path)
    assert [r.step for r in run.records] == list(range(10, 201, 10)) == [w.last_step for w in log.windows]
    assert [r.backward for r in run.records] == [w.phases["backward"] for w in log.windows]
    logged = [float(m) for m in re.findall(r"Bwd: ([0-9.]+)s", path.read_text())]
    assert run.records[1].backward == pytest.approx(2 * logged[1] - logged[0], abs=1e-9)  # steps 11-20


def test_prism_perf_jsonl_gives_analyze_its_50_step_windows_not_every_record():
    """analyze used to read every record (per-log, per-50 and eval events) as a step."""
    run = load_run([IMP / "prism_perf"])
    assert [r.step for r in run.records] == [50, 100, 150, 200]
    rows = [json.loads(x) for x in (IMP / "prism_perf" / "perf.jsonl").read_text().splitlines()]
    per_50 = [r for r in rows if r.get("site") == "trainer_native_per_50"]
    assert [r.step_s for r in run.records] == [r["total_step_s"] for r in per_50]


def test_per_step_perf_jsonl_is_now_importable_as_the_slowest_rank_per_step():
    """import used to find no window in per-step records; each step is now the slowest rank's."""
    path = LOGS / "prism_healthy" / "perf.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    slowest = {s: max(r["step_time"] for r in rows if r["step"] == s) for s in {r["step"] for r in rows}}
    log = read_log(path)
    assert {w.last_step: w.step_s for w in log.windows} == slowest
    steady = build_import(path, CPU).result.measured["step_time_s"]
    assert min(slowest.values()) < steady < max(slowest.values())


def test_prism_running_mean_line_without_its_step_line_is_refused_by_both(tmp_path):
    """A grep of PRISM's [TIMING] lines loses the 'Step N: Loss' lines: the running means cannot be
    undone. analyze used to count them as steps 0, 1, 2 with the running means as step times."""
    p = tmp_path / "grep.log"
    p.write_text(
        "".join(f"  [TIMING] Data: 0.010s | Fwd: 0.500s | Bwd: {1 + i / 10:.3f}s | Opt: 0.030s\n" for i in range(5))
    )
    for read in (lambda: load_run([p]), lambda: read_log(p)):
        with pytest.raises(SpecError, match=r"grep\.log:1: \[TIMING\] line with no 'Step N: Loss' line"):
            read()


def test_a_named_format_is_read_as_named_and_a_bad_name_lists_them(tmp_path):
    with pytest.raises(SpecError, match="no step times in it"):
        read_log(IMP / "prism" / "train.log", fmt="torchtitan-log")
    with pytest.raises(SpecError, match=r"--format 'nope' is not a log format; one of stepmonitor, .*nccl-tests"):
        read_log(IMP / "prism" / "train.log", fmt="nope")
    (tmp_path / "perf.jsonl").write_text((LOGS / "prism_healthy" / "perf.jsonl").read_text())
    (tmp_path / "train.log").write_text((LOGS / "prism_collapse" / "train.log").read_text())
    assert len(load_run([tmp_path]).sources) == 2
    only = load_run([tmp_path], "prism-perf.jsonl")
    assert only.sources == [str(tmp_path / "perf.jsonl")] and {r.rank for r in only.records} == {0, 1}
    res = CliRunner().invoke(app, ["analyze", str(tmp_path), "--format", "prism-log", "--json"])
    assert res.exit_code == 1 and json.loads(res.output)["verdict"] == "collapse"


def test_a_collective_benchmark_is_detected_without_format(tmp_path):
    res = CliRunner().invoke(
        app,
        [
            "results",
            "import",
            str(IMP / "all_reduce_perf_2x8_h100.out"),
            "--platform",
            "dgx-h100",
            "--nodes",
            "2",
            "--db",
            str(tmp_path / "r.db"),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["points"] == 16


def test_stepmonitor_file_and_folder_agree():
    folder = IMP / "monitor" / "good"
    run = load_run([folder])
    log = read_log(folder)
    steps = {w.last_step: w.step_s for w in log.windows}
    for s, t in steps.items():
        assert t == max(r.step_s for r in run.records if r.step == s)
    assert not math.isnan(sum(steps.values()))


def test_a_long_launcher_preamble_does_not_hide_the_timing_lines(tmp_path):
    """NCCL_DEBUG=INFO prints lines per rank and channel at start-up; import used to look for
    [TIMING] in the first 4 MiB only and refused such a log that analyze read."""
    p = tmp_path / "job.out"
    preamble = "x4102c5s0b0n0:12345:12345 [0] NCCL INFO Channel 00/32 : 0 1 2 3 4 5 6 7 8 9 10 11\n"
    with p.open("w") as f:
        f.write(preamble * int(4.2 * 2**20 / len(preamble) + 1))
        f.writelines(f"[rank0]: [TIMING] step {s} | Data 0.01s | Fwd 0.3s | Bwd 0.5s | Opt 0.1s\n" for s in range(8))
    assert p.stat().st_size > 4 * 2**20
    assert len(load_run([p]).records) == 8 and len(read_log(p).windows) == 8


def test_records_without_a_time_are_not_steps_and_a_zero_step_is_not_stored(tmp_path):
    """With per-step JSONL importable, a metrics file of losses would have stored 0 s steps."""
    losses = tmp_path / "metrics.jsonl"
    losses.write_text("".join(json.dumps({"step": s, "loss": 2.0}) + "\n" for s in range(10)))
    with pytest.raises(SpecError, match="no step records found"):
        load_run([losses])
    zero = tmp_path / "zero.log"
    zero.write_text("".join(f"[TIMING] step {s} | Data 0s | Fwd 0s | Bwd 0s | Opt 0s\n" for s in range(10)))
    with pytest.raises(SpecError, match=r"zero\.log:1: a step time of 0.0 s is not a measurement"):
        build_import(zero, CPU)


def test_running_means_logged_by_every_rank_keep_their_ranks(tmp_path):
    """PRISM's 'Step N: Loss' + [TIMING] running-mean pair, written by each rank with torchrun's
    prefix: each rank's means are undone on their own, its records keep its rank, and the windows
    `results import` stores come from one rank (rank 0), not a mix."""
    lines = []
    for s in (10, 20, 30):
        for r in range(3):
            lines.append(f"[rank{r}]: Step {s}: Loss 2.0 (rank_mean=2.0, rank0=2.0, tokens=100)")
            lines.append(f"[rank{r}]:   [TIMING] Data: {0.1 * (r + 1):.3f}s | Fwd: 0.300s | Bwd: 0.500s | Opt: 0.050s")
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    log = readers.prism.read(path)
    assert sorted({rec.rank for rec in log.records}) == [0, 1, 2]
    data = {rec.rank: round(rec.data, 3) for rec in log.records if rec.step == 30}
    assert data == {0: 0.1, 1: 0.2, 2: 0.3}  # constant running means undo to the same interval means
    assert [w.last_step for w in log.windows] == [10, 20, 30] and log.windows[-1].phases["data"] == pytest.approx(0.1)

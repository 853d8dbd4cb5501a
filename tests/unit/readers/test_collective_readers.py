"""Collective-benchmark readers (readers/nccl_tests.py, readers/oneccl_benchmark.py) on the
constructed fixtures (tests/fixtures/imports/make_collective_fixtures.py, written to the
printers' source) and on cut or altered copies of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from prism_strategy.readers import nccl_tests, oneccl_benchmark
from prism_strategy.specs.errors import SpecError

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "imports"
NCCL, ONECCL = FIX / "all_reduce_perf_2x8_h100.out", FIX / "oneccl_allreduce_2x12_aurora.log"


def _row(path: Path, size: int) -> list[str]:
    return next(line.split() for line in path.read_text().splitlines() if line.split()[:1] == [str(size)])


def test_nccl_tests_all_reduce_reads_sizes_ranks_and_in_place_time():
    log = nccl_tests.read(NCCL)
    assert (log.op, log.dtype, log.ranks, log.hosts) == ("all_reduce", "float32", 16, ("h100-a017", "h100-a018"))
    assert [s.bytes for s in log.samples] == [8 * 4**k for k in range(16)]
    row = _row(NCCL, 134217728)  # in-place time is column 10 (all_reduce runs in place in DDP)
    s = next(s for s in log.samples if s.bytes == 134217728)
    lines = NCCL.read_text().splitlines()
    at = next(i for i, x in enumerate(lines, 1) if x.split()[:1] == ["134217728"])
    assert s.seconds == pytest.approx(float(row[9]) * 1e-6) and s.where == f"{NCCL}:{at}"
    assert nccl_tests.looks_like(NCCL) and not nccl_tests.looks_like(ONECCL)


def test_nccl_tests_all_gather_takes_out_of_place_time(tmp_path):
    text = NCCL.read_text().replace("all_reduce_perf", "all_gather_perf").replace("     sum  ", "    none  ")
    p = tmp_path / "ag.out"
    p.write_text(text)
    log = nccl_tests.read(p)
    row = _row(p, 1048576 * 8)
    assert log.op == "all_gather"
    assert next(s for s in log.samples if s.bytes == 8388608).seconds == pytest.approx(float(row[5]) * 1e-6)


@pytest.mark.parametrize(
    ("cut", "message"),
    [
        (lambda t: t[: t.index("  2097152") + 40], "cut off: a truncated log"),
        (lambda t: t[: t.index("# Out of bounds")], "ends before nccl-tests' '# Avg bus bandwidth' footer"),
        (lambda t: t.replace("    98.59   21.27   39.89       0", "    98.59   21.27   39.89       3"), "#wrong = 3"),
        (
            lambda t: "\n".join(
                x.replace(" float", "double") if x.split()[:1] == ["2097152"] else x for x in t.splitlines()
            ),
            "several data types",
        ),
        (
            lambda t: t.replace(
                "# Collective test starting: all_reduce_perf", "# Collective test starting: alltoall_perf"
            ),
            "alltoall_perf is not a collective",
        ),
    ],
)
def test_bad_nccl_tests_logs_name_file_and_line(tmp_path, cut, message):
    p = tmp_path / "all_reduce_perf.out"
    p.write_text(cut(NCCL.read_text()))
    with pytest.raises(SpecError, match=message) as e:
        nccl_tests.read(p)
    assert str(p) in str(e.value)


def test_oneccl_benchmark_reads_avg_time_and_processes():
    log = oneccl_benchmark.read(ONECCL)
    assert (log.op, log.dtype, log.ranks) == ("all_reduce", "bfloat16", 24)
    row = _row(ONECCL, 2097152)  # columns: #bytes #elem_count #repetitions t_min t_max t_avg stddev
    assert next(s for s in log.samples if s.bytes == 2097152).seconds == pytest.approx(float(row[5]) * 1e-6)
    assert oneccl_benchmark.looks_like(ONECCL) and not oneccl_benchmark.looks_like(NCCL)


def test_oneccl_allgatherv_payload_is_the_gathered_output(tmp_path):
    p = tmp_path / "ag.log"
    p.write_text(ONECCL.read_text().replace("# Benchmarking: allreduce", "# Benchmarking: allgatherv"))
    log = oneccl_benchmark.read(p)
    assert log.op == "all_gather" and log.samples[0].bytes == 2048 * 24  # per-rank send bytes x processes


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t[: t.index("# All done")], "ends before the benchmark's '# All done'"),
        (lambda t: t[: t.index("       8388608") + 30], "cut off: a truncated log"),
        (lambda t: t.replace("# Benchmarking: allreduce", "# Benchmarking: allreduce allgatherv"), "summed"),
        (lambda t: t.replace("buf_count:       1", "buf_count:       4"), "buf_count 4"),
    ],
)
def test_bad_oneccl_logs_are_refused(tmp_path, change, message):
    p = tmp_path / "bench.log"
    p.write_text(change(ONECCL.read_text()))
    with pytest.raises(SpecError, match=message):
        oneccl_benchmark.read(p)

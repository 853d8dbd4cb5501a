"""The shipped NCCL presets against real nccl-tests logs (issue 29 item 5): tests/fixtures/imports
holds three published all_reduce_perf runs, transcribed unchanged (each file's header names its
source): Oracle Cloud BM.GPU4.8 (8 x A100-SXM4-40GB) on 1 and 2 nodes, Google Cloud A3 Mega (8 x
H100 80GB HBM3) on 2 nodes. No fit used them (the presets are NCCL's own constants,
data/nccl_tuning.toml), so each is a held-out measurement of the preset its GPUs match.

Judged per regime, both sides: the bandwidth-bound end (>= 1 GiB, where NCCL's latency is under
1% of the call) and the latency-bound end (<= 64 KiB). The band is the project's held-out goal
(25%, bench/fit/fit_terms.py PRIOR_WEIGHT) widened by the log's own spread (the out-of-place vs
in-place time of each size: two timings of one call in one run). Where the preset misses, a strict
xfail states the gap (median predicted / measured) and its companion holds it there.
"""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

import pytest
from _holdout import known_gap

from prism_strategy.estimate.comm import collective_seconds
from prism_strategy.readers import nccl_tests
from prism_strategy.specs import load_platform

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "imports"
GOAL = math.log(1.25)
"""The project's 25% held-out goal, as |ln(predicted / measured)|."""
GPU_PRESET = {"NVIDIA A100-SXM4-40GB": "dgx-a100-40", "NVIDIA H100 80GB HBM3": "dgx-h100"}
"""The preset whose GPU the log's ranks report (nccl-tests' '# Rank ... device N [bus] NAME')."""
LOGS = {
    "oci-a100-1x8": "all_reduce_perf_1x8_a100_oci.out",
    "oci-a100-2x8": "all_reduce_perf_2x8_a100_oci.out",
    "a3mega-h100-2x8": "all_reduce_perf_2x8_h100_a3mega.out",
}
REGIMES = {"bandwidth": lambda b: b >= 2**30, "latency": lambda b: b <= 2**16}
GAPS = {
    ("oci-a100-2x8", "bandwidth"): 0.374,
    ("oci-a100-1x8", "latency"): 0.471,
    ("oci-a100-2x8", "latency"): 0.627,
    ("a3mega-h100-2x8", "latency"): 0.204,
}
"""Known gaps: today's median predicted / measured (the OCI 2 x 8 run's 71.6 GB/s busbw at 8 GiB over
RoCE; NCCL's base latencies at small sizes, which `calibrate --fit comm` refits: README)."""


def _gpu(path: Path) -> str:
    (name,) = {m.group(1).strip() for m in re.finditer(r"#\s+Rank.*device\s+\d+\s+\[[^\]]*\]\s+(.+)", path.read_text())}
    return name


def _rows(path: Path) -> list[tuple[float, float, float]]:
    """(bytes, out-of-place us, in-place us) of each data row."""
    out = []
    for line in path.read_text().splitlines():
        t = line.split()
        if len(t) >= 13 and t[0].isdigit():
            out.append((float(t[0]), float(t[5]), float(t[9])))
    return out


def ratios(key: str, regime: str) -> tuple[list[float], float, str]:
    """(predicted / measured per size, the log's spread as |ln|, the preset) for one regime."""
    path = FIXTURES / LOGS[key]
    log, preset = nccl_tests.read(path), GPU_PRESET[_gpu(path)]
    p, nodes = load_platform(preset), len(set(log.hosts))
    sizes = [s for s in log.samples if REGIMES[regime](s.bytes)]
    out = [collective_seconds("all_reduce", s.bytes, log.ranks, nodes, 1, p) / s.seconds for s in sizes]
    spread = max(abs(math.log(o / i)) for b, o, i in _rows(path) if REGIMES[regime](b))
    return out, spread, preset


def _cases():
    for key in LOGS:
        for regime in REGIMES:
            gap = GAPS.get((key, regime))
            size = f"{gap:.3g}x predicted / measured ({regime} regime)" if gap else ""
            marks = [pytest.mark.xfail(strict=True, reason=known_gap(size, LOGS[key]))] if gap else []
            yield pytest.param(key, regime, id=f"{key}-{regime}", marks=marks)


def test_the_logs_are_real_runs_matched_to_a_preset():
    for key, f in LOGS.items():
        text = (FIXTURES / f).read_text()
        assert text.startswith("# REAL RUN"), f
        assert _gpu(FIXTURES / f) in GPU_PRESET, f
        assert len(_rows(FIXTURES / f)) == len(nccl_tests.read(FIXTURES / f).samples)


@pytest.mark.out_of_sample
@pytest.mark.parametrize("key, regime", list(_cases()))
def test_the_matching_preset_prices_the_measured_all_reduce(key, regime):
    r, spread, preset = ratios(key, regime)
    assert r and all(abs(math.log(x)) <= GOAL + spread for x in r), (preset, [round(x, 3) for x in r])


@pytest.mark.out_of_sample
@pytest.mark.parametrize("key, regime", sorted(GAPS))
def test_known_preset_gap_stays_within_its_stated_size(key, regime):
    r, spread, _ = ratios(key, regime)
    stated = abs(math.log(GAPS[key, regime]))
    today = statistics.median(r)
    assert (today < 1) is (GAPS[key, regime] < 1) and abs(math.log(today)) <= stated + spread, today

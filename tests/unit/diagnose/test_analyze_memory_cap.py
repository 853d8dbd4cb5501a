"""Issue 38 item 3: `analyze` reads a log in bounded memory. A generated PRISM-style log (the
[TIMING] lines of tests/fixtures/logs/make_fixtures.py, 4 ranks, between NCCL INFO lines; backward
10x from the middle step: a collapse) is analysed in a child process under an address-space cap
(RLIMIT_AS), with the record cap (readers/steps.MAX_RECORDS) set low so a small log passes it.
Truth: the child's peak RSS against the same child on a log 1/10 the size, both measured here: a
reader that holds the log's text or a Python object per line grows with the log (7.4x its size
before), a bounded one does not. The 1 GB figure is benchmarks/analyze_memory.py's."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src"
NOISE = "[rank{r}]: node0:100{r}:100{r} [{r}] NCCL INFO Channel 00/0 : {r}[{r}] -> {q}[{q}] via P2P/IPC/read\n"
CHILD = """
import resource, sys
cap = int(sys.argv[1]) << 20
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
import prism_strategy.readers.steps as steps
steps.MAX_RECORDS = 4_000
from prism_strategy.cli import app
try:
    app(sys.argv[2:], standalone_mode=True)
finally:
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
"""
CAP_MB = 1200  # address space, not RSS: torch-free, but numpy and rich map more than they touch


def _write(path: Path, steps: int) -> None:
    rng = random.Random(0)
    with open(path, "w") as f:
        for step in range(steps):
            for r in range(4):
                j = lambda x: x * rng.uniform(0.97, 1.03)  # noqa: E731
                d, fw, b, o = j(0.010), j(0.31), j(1.0 if step < steps // 2 else 10.0), j(0.09)
                f.write(
                    f"[rank{r}]: [TIMING] step {step} | Data {d * 1000:.1f}ms | Fwd {fw:.3f}s | "
                    f"Bwd {b:.3f}s | Opt {o:.3f}s | Total {d + fw + b + o:.3f}s\n"
                )
                f.write(NOISE.format(r=r, q=(r + 1) % 4))


def _analyze(log: Path) -> tuple[int, dict, int]:
    env = {**os.environ, "PYTHONPATH": str(SRC), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    p = subprocess.run(
        [sys.executable, "-c", CHILD, str(CAP_MB), "analyze", str(log), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    return p.returncode, json.loads(p.stdout), int(p.stderr.strip().splitlines()[-1])


def test_analyze_memory_does_not_grow_with_the_log(tmp_path):
    small, big = tmp_path / "small.log", tmp_path / "big.log"
    _write(small, 1_250)
    _write(big, 12_500)  # ~10 MB, 50,000 step records: 12x the record cap
    assert big.stat().st_size > 9e6
    rc_s, v_s, rss_small = _analyze(small)
    rc_b, v_b, rss_big = _analyze(big)
    assert (rc_s, v_s["verdict"]) == (1, "collapse") and (rc_b, v_b["verdict"]) == (1, "collapse")
    assert any("averaged over windows of" in s for s in v_b["skipped"])
    assert abs(v_b["events"][0]["step"] - 12_500 // 2) <= 64  # the onset, to a window (32 steps here)
    grown_mb = (rss_big - rss_small) / 1024  # ru_maxrss is KiB on Linux
    assert grown_mb < 0.5 * big.stat().st_size / 1e6, (rss_small, rss_big)  # before: 7.4x the log's size

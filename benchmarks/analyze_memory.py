"""`analyze` and `results import` read a log in bounded memory (issue 38 item 3): lines are read
one at a time (readers/collective_log.text_lines) and step records are held as columns, averaged
over windows of steps past readers/steps.MAX_RECORDS, so a 1 GB log stays under 500 MB.

Writes a PRISM-style text log of about --mb megabytes (4 ranks, a torchrun-prefixed [TIMING]
line per rank per step as tests/fixtures/logs/make_fixtures.py writes them, between NCCL INFO
lines, backward growing 10x from the middle step on: a collapse), then runs
`prism-strategy analyze LOG --json` in a child process whose address space is capped
(RLIMIT_AS, --cap-mb) and prints its wall time, peak RSS and verdict.

Before: a 1 GB log took 9.5 min and 7.4 GB (the whole text, its lines and a Python object per
record). Measured here (2 CPU cores shared with 7 other jobs, load average ~9): a 945 MB log
(1,295,336 steps x 4 ranks) in 417 s, peak RSS 144 MB under a 500 MB address-space cap, verdict
collapse (exit 1); a 56 MB log peaks at 140 MB: flat, the interpreter and numpy are most of it.

    python benchmarks/analyze_memory.py [--mb 1000] [--cap-mb 500]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOISE = "[rank{r}]: node{n}:{pid}:{pid} [{r}] NCCL INFO Channel 00/0 : {r}[{r}] -> {q}[{q}] via P2P/IPC/read\n"


def write_log(path: Path, megabytes: float, ranks: int = 4, seed: int = 0) -> int:
    """A log of about `megabytes` MB; returns its step count. Backward grows 10x from the middle."""
    rng, target = random.Random(seed), megabytes * 1e6
    per_step = sum(len(line(s, r, 1.0, rng)) + len(NOISE) for s, r in ((0, 0), (0, 1))) * ranks // 2
    steps = max(20, int(target // per_step))
    with open(path, "w") as f:
        for step in range(steps):
            bwd = 1.0 if step < steps // 2 else 10.0
            for r in range(ranks):
                f.write(line(step, r, bwd, rng))
                f.write(NOISE.format(r=r, q=(r + 1) % ranks, n=r // 2, pid=1000 + r))
    return steps


def line(step: int, rank: int, bwd: float, rng: random.Random) -> str:
    j = lambda x: x * rng.uniform(0.97, 1.03)  # noqa: E731
    d, f, b, o = j(0.010), j(0.31), j(bwd), j(0.09)
    return (
        f"[rank{rank}]: [TIMING] step {step} | Data {d * 1000:.1f}ms | Fwd {f:.3f}s | "
        f"Bwd {b:.3f}s | Opt {o:.3f}s | Total {d + f + b + o:.3f}s\n"
    )


CHILD = """
import resource, sys
cap = int(sys.argv[1]) << 20
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
from prism_strategy.cli import app
app(sys.argv[2:], standalone_mode=True)
"""


def analyze_capped(log: Path, cap_mb: int) -> tuple[int, dict | None, str, float, float]:
    """(exit code, the --json verdict or None, stderr, wall seconds, child peak RSS in MB)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    if (ROOT / "src" / "prism_strategy").is_dir():
        env["PYTHONPATH"] = str(ROOT / "src")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-c", CHILD, str(cap_mb), "analyze", str(log), "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    wall = time.perf_counter() - t0
    rss = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    try:
        verdict = json.loads(p.stdout)
    except ValueError:
        verdict = None
    return p.returncode, verdict, p.stderr, wall, rss


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=1000)
    ap.add_argument("--cap-mb", type=int, default=500)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "train.log"
        steps = write_log(log, args.mb)
        size = log.stat().st_size / 1e6
        rc, verdict, err, wall, rss = analyze_capped(log, args.cap_mb)
    kind = verdict["verdict"] if verdict else err.strip().splitlines()[-1:] or "?"
    print(
        f"{size:,.0f} MB log ({steps:,} steps x 4 ranks): exit {rc}, {wall:.1f} s, peak RSS {rss:.0f} MB "
        f"under a {args.cap_mb} MB address-space cap; verdict {kind}"
    )
    return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())

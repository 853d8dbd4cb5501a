"""Plan latency: a full plan (8 strategies) with a 10-point node sweep, for 5 models.

Prints the median wall time per plan and its ratio to the 0.5 s target (the baseline).
Run: .venv/bin/python benchmarks/plan_latency.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from prism_strategy.flags import plan
from prism_strategy.specs.presets import forget_loaded

TARGET_S = 0.5
SWEEP = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
CASES = [
    dict(model="qwen3-0.6b", seq_len=512, platform="aurora"),
    dict(model="auroragpt-2b", seq_len=8192, ckpt_freq=1, platform="aurora"),
    dict(
        model="olmo-7b", vision="siglip2-so400m-patch14-384", mode="e2e", seq_len=1024, ckpt_freq=1, platform="aurora"
    ),
    dict(model="qwen3-8b", seq_len=4096, ckpt_freq=1, platform="dgx-h100"),
    dict(model="llama-2-7b", vision="siglip2-base-patch16-224", mode="projector", seq_len=2048, platform="polaris"),
]


def main(repeats: int = 5) -> None:
    forget_loaded()
    times = []
    for case in CASES:
        for _ in range(repeats):
            t0 = time.perf_counter()
            plan(nodes=2, sweep_nodes=SWEEP, **case)
            times.append(time.perf_counter() - t0)
        print(f"{case['model']:14s} {statistics.median(times[-repeats:]) * 1e3:8.1f} ms per plan")
    cli = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "prism_strategy.cli",
                "plan",
                "--model",
                "olmo-7b",
                "--nodes",
                "2",
                "--sweep-nodes",
                ",".join(map(str, SWEEP)),
                "--json",
            ],
            check=True,
            capture_output=True,
        )
        cli.append(time.perf_counter() - t0)
    print(f"whole CLI process (start-up + plan + sweep + JSON): {statistics.median(cli) * 1e3:.0f} ms")
    med = statistics.median(times)
    print(
        f"median per full plan + 10-point sweep: {med * 1e3:.1f} ms; ratio to the {TARGET_S} s target: "
        f"{med / TARGET_S:.3f} ({'PASS' if med < TARGET_S else 'FAIL'})"
    )


if __name__ == "__main__":
    main()

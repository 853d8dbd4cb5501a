"""What the bench worker's garbage collection between runs costs, frozen or not, in one process.

A launch runs many configs in turn (a census, a scan, a tune grid); between two runs each rank
frees the last one's cycles with `gc.collect()` (bench/launch/worker.py `collect_garbage`), and
DeepSpeed's ZeRO-3 setup runs another. A full collection walks every object the process holds:
torch's, transformers', DeepSpeed's. The worker freezes what survives (`gc.freeze()`), so later
collections walk only what the next run made. This measures both in the same process, after the
worker's imports: each round builds tiny Llama (the worker's own build_model), drops it, and
times the collection; first unfrozen rounds (the baseline), then rounds after `collect_garbage`.
Prints the median collection time of each and their ratio (frozen / unfrozen; lower is better).

    .venv/bin/python benchmarks/worker_gc.py             # 5 rounds each
    .venv/bin/python benchmarks/worker_gc.py --rounds 9 --json out/worker_gc.json
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import statistics
import time
from pathlib import Path


def _positive(raw: str) -> int:
    if not raw.isdigit() or int(raw) < 1:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a whole number of rounds >= 1; e.g. --rounds 5")
    return int(raw)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=_positive, default=5, help="collections timed per arm")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    return p.parse_args()


def _imports() -> list[str]:
    """What a ZeRO census rank imports before its first run (DeepSpeed when installed)."""
    import transformers  # noqa: F401

    import prism_strategy.bench.launch.worker  # noqa: F401

    names = ["torch", "transformers", "prism_strategy"]
    if importlib.util.find_spec("deepspeed") is not None:
        import deepspeed  # noqa: F401

        names.append("deepspeed")
    return names


def _round(build) -> float:
    model = build()
    del model
    t0 = time.perf_counter()
    gc.collect()
    return time.perf_counter() - t0


def main() -> int:
    args = parse_args()
    imported = _imports()
    from prism_strategy.bench.launch.worker import build_model, collect_garbage
    from prism_strategy.cli.bench_inputs import census_scenario

    sc = census_scenario("tiny-llama", nproc=1, ranks_per_node=1, micro_batch=1, seq_len=32)
    build = lambda: build_model(sc)  # noqa: E731
    build()  # transformers' lazy modeling imports, outside the timed rounds
    tracked = len(gc.get_objects())
    unfrozen = [_round(build) for _ in range(args.rounds)]
    collect_garbage()
    frozen = [_round(build) for _ in range(args.rounds)]
    out = {
        "imported": imported,
        "objects_tracked_before_freeze": tracked,
        "unfrozen_s": statistics.median(unfrozen),
        "frozen_s": statistics.median(frozen),
    }
    out["ratio"] = out["frozen_s"] / out["unfrozen_s"]
    print(f"imports: {', '.join(imported)}; {tracked:,} objects tracked before the freeze")
    print(f"gc.collect() after a run, median of {args.rounds}:")
    print(f"  unfrozen (baseline) {1000 * out['unfrozen_s']:9.2f} ms")
    print(f"  frozen (the worker) {1000 * out['frozen_s']:9.2f} ms   ratio {out['ratio']:.4f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

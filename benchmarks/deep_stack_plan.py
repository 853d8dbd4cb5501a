"""A plan on a very deep stack of identical layers costs about what a shallow one costs (issue 26,
finding 12: identical layers counted once and multiplied).

Two config.json models that differ only in num_hidden_layers (a tiny Llama: hidden 64, 4 heads,
1,000 and 100,000 layers, small enough to fit on one dgx-h100 node, so every option is timed).
After one plan of a 10-layer model (module imports, preset loading), each is planned once with
its caches empty (the first plan: what one CLI call pays) and then REPEATS times (a sweep or a
fit asking again). Printed: the first plan's seconds and the median of the repeats for each, and
the deep / shallow ratios, measured in the same run. The layer count grows 100x; the ratios
should stay near 1.

Measured (2 CPU cores shared with other jobs, so +-30% run to run): before the grouping of
identical blocks the repeated ratio was ~50; with the grouping 5.97 (the per-call sizes, 100,000
entries, still built and hashed by the price caches); with the sizes carried as (size, count)
runs (engines/runs.py) and the bucket fills, ZeRO-3 gathers and buffer sums computed per group
of identical blocks: repeated 0.8-1.3 (1.02 on a quiet machine: 0.020 s vs 0.021 s), first plan
2.85 when quiet (0.029 s vs 0.083 s), up to ~10x under load (what was left growing with the depth,
part_modules' per-block list and module_sizes, is gone since issue 38: PartModules holds only the
groups; tests/unit/specs/test_layer_count_bound.py counts a plan's calls and allocations): then
first plan 1.34 (0.072 s vs 0.097 s), repeated 1.22, on the loaded machine (load average ~9).

    python benchmarks/deep_stack_plan.py [--repeats 3] [--layers 100000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if (ROOT / "src" / "prism_strategy").is_dir():
    sys.path.insert(0, str(ROOT / "src"))

from prism_strategy.flags import plan  # noqa: E402

CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 128,
}
BASELINE_LAYERS = 1_000


def write_config(folder: Path, layers: int) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(CONFIG | {"num_hidden_layers": layers}))
    return str(folder)


def seconds_per_plan(model: str, repeats: int) -> tuple[float, float]:
    """(seconds of the first plan of this model, median seconds of the next `repeats`)."""

    def one() -> float:
        t0 = time.perf_counter()
        plan(model, platform="dgx-h100", nodes=1, seq_len=128)
        return time.perf_counter() - t0

    first = one()
    return first, statistics.median(one() for _ in range(repeats))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--layers", type=int, default=100_000)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        plan(write_config(Path(tmp) / "warm", 10), platform="dgx-h100", nodes=1, seq_len=128)  # imports, presets
        base = seconds_per_plan(write_config(Path(tmp) / "shallow", BASELINE_LAYERS), args.repeats)
        deep = seconds_per_plan(write_config(Path(tmp) / "deep", args.layers), args.repeats)
    for layers, (first, again) in ((BASELINE_LAYERS, base), (args.layers, deep)):
        print(f"{layers:>7,} layers: first plan {first:.3f} s, then {again:.3f} s per plan (median of {args.repeats})")
    times = args.layers / BASELINE_LAYERS
    print(
        f"ratio deep / shallow: first plan {deep[0] / base[0]:.2f}, then {deep[1] / base[1]:.2f} for {times:.0f}x the layers"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

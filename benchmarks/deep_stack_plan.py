"""A plan on a very deep stack of identical layers costs about what a shallow one costs (issue 26,
finding 12: identical layers counted once and multiplied).

Two config.json models that differ only in num_hidden_layers (a tiny Llama: hidden 64, 4 heads,
1,000 and 100,000 layers, small enough to fit on one dgx-h100 node, so every option is timed),
each planned in-process REPEATS times after one untimed plan (module imports, preset loading).
Printed: the median seconds per plan for each, and their ratio, measured in the same run; the
layer count grows 100x, the ratio should stay near 1 (before the grouping it was ~50).

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

from prism_strategy.planning.planner import plan  # noqa: E402

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


def seconds_per_plan(model: str, repeats: int) -> float:
    def one() -> float:
        t0 = time.perf_counter()
        plan(model, platform="dgx-h100", nodes=1, seq_len=128)
        return time.perf_counter() - t0

    one()
    return statistics.median(one() for _ in range(repeats))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--layers", type=int, default=100_000)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        base = seconds_per_plan(write_config(Path(tmp) / "shallow", BASELINE_LAYERS), args.repeats)
        deep = seconds_per_plan(write_config(Path(tmp) / "deep", args.layers), args.repeats)
    print(f"{BASELINE_LAYERS:>7,} layers: {base:.3f} s per plan (median of {args.repeats})")
    print(f"{args.layers:>7,} layers: {deep:.3f} s per plan (median of {args.repeats})")
    print(f"ratio deep / shallow: {deep / base:.2f} for {args.layers / BASELINE_LAYERS:.0f}x the layers")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

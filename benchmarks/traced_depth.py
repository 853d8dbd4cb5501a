"""`estimate` (a traced step on fake tensors) on a deep stack costs about what a shallow one costs
(issue 38 item 3: traced/depth.py traces two shallow depths per kind of block and extrapolates).

Two config.json models that differ only in num_hidden_layers (a tiny Llama: hidden 64, 4 heads;
4 and 1,000 layers), each run as `prism-strategy estimate` in a fresh process (imports included,
as a user pays them), fsdp_full_shard on one dgx-h100 node, micro-batch searched. Printed: the
wall seconds of each and the trace's own seconds; the 1,000-layer one should stay under 10 s.
Before the extrapolation a 1,000-layer model gave no answer in 200 s (~0.5 s per block).

Measured (2 CPU cores shared with 7 other jobs, load average ~9, so several times a quiet
machine's figures): 4 layers 20.0 s wall (traces 7.2 s), 1,000 layers 31.9 s (traces 16.4 s);
each micro-batch probe now traces 2 and 3 blocks instead of 1,000. At load average ~4: 4 layers
9.7 s wall (traces 3.6 s), 1,000 layers 10.6 s (traces 3.7 s): the rest is importing torch and
transformers, the same at any depth.

    python benchmarks/traced_depth.py [--layers 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 128,
}


def run(folder: Path, layers: int) -> tuple[float, float, str]:
    """(wall seconds, the trace's seconds, its method) of one `estimate --json` of this depth."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(CONFIG | {"num_hidden_layers": layers}))
    cmd = [sys.executable, "-m", "prism_strategy.cli", "estimate", "--model", str(folder)]
    cmd += ["--platform", "dgx-h100", "--seq-len", "128", "--strategy", "fsdp_full_shard", "--json"]
    env = {"PYTHONPATH": str(ROOT / "src")} if (ROOT / "src" / "prism_strategy").is_dir() else {}
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ, **env})
    wall = time.perf_counter() - t0
    d = json.loads(out.stdout)
    return wall, d["traced_seconds"], d["traced_method"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=1_000)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        for layers in (4, args.layers):
            wall, traced, method = run(Path(tmp) / str(layers), layers)
            print(f"{layers:>6,} layers: {wall:.1f} s wall, traces {traced:.1f} s ({method})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

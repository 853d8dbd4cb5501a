"""examples/train.py runs for real: a transformers Llama under an mpiexec-style launch with HSDP,
gradient accumulation, checkpointing and a StepMonitor; a full state dict at the end."""

from __future__ import annotations

import json
import math

import pytest
import torch
from _harness import EXAMPLE, run_ranks

pytestmark = pytest.mark.distributed


def test_example_trains_hf_llama_with_hsdp_under_openmpi(tmp_path):
    pytest.importorskip("transformers")
    log, saved = tmp_path / "steps.jsonl", tmp_path / "model.pt"
    args = [
        "--hf",
        "llama",
        "--strategy",
        "hsdp_full_shard",
        "--ranks-per-node",
        "1",
        "--layers",
        "2",
        "--hidden",
        "32",
        "--vocab",
        "128",
        "--seq-len",
        "16",
        "--micro-batch",
        "2",
        "--grad-accum",
        "2",
        "--steps",
        "3",
        "--ckpt-freq",
        "1",
        "--json-log",
        str(log),
        "--save",
        str(saved),
        "--monitor-dir",
        str(tmp_path / "monitor"),
    ]
    _, text = run_ranks("openmpi", args, world=2, out=tmp_path, script=EXAMPLE, results=False)
    steps = [json.loads(line) for line in log.read_text().splitlines()]
    assert [s["step"] for s in steps] == [0, 1, 2]
    assert all(math.isfinite(s["loss"]) for s in steps)
    assert "hsdp_full_shard (fsdp2)" in text and "2 x LlamaDecoderLayer" in text
    state = torch.load(saved)
    assert "model.layers.1.self_attn.q_proj.weight" in state
    assert state["model.embed_tokens.weight"].shape == (128, 32)
    for rank in (0, 1):  # StepMonitor wrote per-rank phase timing
        lines = [json.loads(x) for x in (tmp_path / "monitor" / f"rank{rank}.jsonl").read_text().splitlines()]
        assert [x["step"] for x in lines if x["kind"] == "step"] == [0, 1, 2]

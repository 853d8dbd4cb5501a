"""wrap() runs a peft LoRA model for real (one gloo rank, in a subprocess): DDP, FSDP2 and ZeRO-2
step it, the base weights do not change, the optimizer gets only the adapters, DDP's reducer
registers only their gradients, and their count is the plan's (specs/lora.py).
Skipped where peft is not installed."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prism_strategy.specs.lora import LoraSpec, adapter_params, adapter_tensors
from prism_strategy.specs.presets import load_model

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.skipif(importlib.util.find_spec("peft") is None, reason="peft is not installed"),
]

RUN = """
import json, os, sys, torch
from peft import LoraConfig, get_peft_model
from prism_strategy import init_distributed, wrap
from prism_strategy.bench.launch.worker import build_model
from prism_strategy.flags import scenario_from_flags

ctx = init_distributed()
out = {}
for strategy in sys.argv[1:]:
    model = build_model(scenario_from_flags("tiny-llama", platform="cpu", seq_len=32, micro_batch=2))
    frozen = {n: p.detach().clone() for n, p in model.named_parameters()}
    model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    given = []
    job = wrap(model, strategy, ctx=ctx, mixed_precision=None,
               optimizer=lambda ps: given.append(sum(p.numel() for p in ps)) or torch.optim.AdamW(
                   [p for p in model.parameters() if p.requires_grad], lr=1e-2))
    ids = torch.randint(0, 512, (2, 32), generator=torch.Generator().manual_seed(0))
    for _ in range(2):
        loss = job.model(input_ids=ids, labels=ids).loss
        job.backward(loss); job.step(); job.zero_grad()
    base = dict(model.get_base_model().named_parameters())
    unchanged = all(torch.equal(base[n].detach().full_tensor() if hasattr(base[n], "full_tensor") else base[n].detach(), v)
                    for n, v in frozen.items() if n in base)
    out[strategy] = {"optimizer_params": given[0], "base_unchanged": unchanged}
    if strategy == "ddp":  # what DDP's reducer registered: the gradients it all-reduces
        log = job.model._get_ddp_logging_data()
        out[strategy] |= {"reduced_bytes": log["total_parameter_size_bytes"], "reduced_tensors": log["num_parameter_tensors"]}
print("RESULT " + json.dumps(out))
"""


def test_wrap_steps_a_peft_lora_model_and_only_the_adapters_train(tmp_path):
    env = os.environ | {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29763",
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[3] / "src"), *sys.path]),
    }
    p = subprocess.run(
        [sys.executable, "-c", RUN, "ddp", "fsdp_full_shard", "zero2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, p.stderr[-3000:]
    lora = LoraSpec(rank=4, targets=("q_proj", "v_proj"))
    planned = adapter_params(load_model("tiny-llama"), lora)
    results = json.loads(line.removeprefix("RESULT "))
    for strategy, r in results.items():
        assert r["optimizer_params"] == planned, strategy
        assert r["base_unchanged"], strategy
    # DDP reduces the adapters' fp32 gradients only (mixed_precision=None), in their 2 tensors per adapted Linear
    assert results["ddp"]["reduced_bytes"] == 4 * planned
    assert results["ddp"]["reduced_tensors"] == adapter_tensors(load_model("tiny-llama"), lora)

"""The planned LoRA parameter count against peft's own (get_peft_model on the model built on the
meta device from the preset's HF config): names, all-linear, peft's default targets, an MoE model.
Skipped where peft is not installed (`pip install prism-strategy[peft]`: peft and accelerate; it
does not replace torch)."""

import pytest
import torch

from prism_strategy.specs.hf import to_hf_config
from prism_strategy.specs.lora import LoraSpec, adapter_params
from prism_strategy.specs.presets import load_model

peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize(
    ("name", "targets"),
    [
        ("llama-2-7b", ("q_proj", "v_proj")),
        ("qwen3-0.6b", "all-linear"),
        ("mixtral-8x7b", ("q_proj", "k_proj", "v_proj", "o_proj")),
        ("gemma-2-9b", None),  # peft's default for gemma2: q_proj, v_proj
    ],
)
def test_planned_adapter_parameters_are_pefts(name, targets):
    spec = load_model(name)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(to_hf_config(spec))
    lora_targets = list(targets) if isinstance(targets, tuple) else targets
    model = peft.get_peft_model(model, peft.LoraConfig(r=16, target_modules=lora_targets))
    real = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert adapter_params(spec, LoraSpec(rank=16, targets=targets)) == real

"""A peft adapter_config.json (`PeftModel.save_pretrained`, huggingface/peft 5d602fd
src/peft/config.py PeftConfigMixin.save_pretrained; LoraConfig's fields, tuners/lora/config.py):
the LoRA rank and target modules set `lora` (specs/lora.py: the base frozen, r x (in + out)
trainable parameters per adapted Linear). The base model is --model's: the file names it only by
its Hub id."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prism_strategy.inputs.frameworks.base import Collector, ConfigInputs, load
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.lora import lora_from_dict

NAME = "peft"
IGNORED = {
    "lora_alpha": "the adapters' scale: arithmetic, not memory or communication",
    "lora_dropout": "dropout on the adapters' input: not modelled (a mask per adapted Linear input while training)",
    "task_type": "names the head; the plan models a causal LM",
    "inference_mode": "how the adapter was saved; training makes it trainable",
    "base_model_name_or_path": "the base model's Hub id: pass it as --model (a preset or its config.json)",
    "revision": "the base model's revision: not the step's cost",
    "peft_version": "the peft that saved it",
    "auto_mapping": "peft's class mapping: not the step's cost",
    "init_lora_weights": "how the adapters start: not the step's cost",
    "fan_in_fan_out": "the base's weight layout (Conv1D): the same parameter count",
}


def looks_like(syntax: str, data: Any) -> bool:
    return syntax == "json" and isinstance(data, dict) and "peft_type" in data


def read(path: Path) -> ConfigInputs:
    _, data = load(path)
    c = Collector(path=path)
    try:
        spec = lora_from_dict(data, f"--from {path}")
    except SpecError as e:
        raise SpecError(str(e)) from None
    targets = spec.targets if spec.targets is not None else "peft's default for --model's type"
    c.use(
        "peft_type, r, target_modules",
        f"LORA r={spec.rank} {targets}",
        "lora",
        str(path),
        note="the base frozen; r x (in + out) trainable parameters per adapted Linear, with their "
        "gradients and optimizer state",
    )
    for k, v in data.items():
        if k in ("peft_type", "r", "target_modules"):
            continue
        if k == "bias" and v not in (None, "none"):
            c.ignore(k, v, "trainable biases are not modelled: the plan understates trainable state slightly")
        elif k == "bias":
            c.use(k, v, note="no trainable biases, as modelled")
        elif k in ("modules_to_save", "layers_to_transform", "rank_pattern", "alpha_pattern") and v:
            c.ignore(k, v, "not modelled: the plan adapts every block's targets at rank r and trains nothing else")
        elif k == "use_dora" and v:
            c.ignore(k, v, "DoRA's magnitude vectors and its extra activations are not modelled")
        elif k in IGNORED:
            c.ignore(k, v, IGNORED[k])
        elif not v:
            c.use(k, v, note="unset or off: nothing to plan")
        else:
            c.ignore(k, v, "a LoRA setting the plan does not model")
    return c.result(NAME, data)

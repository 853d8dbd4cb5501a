"""A training script's peft LoraConfig(r=..., target_modules=...) (huggingface/peft 5d602fd,
tuners/lora/config.py), read the inputs/script_reads.py way: the plan's `lora` keyword
(specs/lora.py: the base frozen, the adapters train). A rank or targets the script does not fix
(an argparse value, a variable set at run time) is "could not tell", naming the line."""

from __future__ import annotations

from prism_strategy.inputs.py_values import UNKNOWN
from prism_strategy.inputs.script_reads import Found, Reader


def lora(r: Reader) -> list[Found]:
    out = []
    for c in r.calls(lambda c: c.last == "LoraConfig"):
        rank = r.kwarg(c, "r", 8)  # LoraConfig's default r
        targets = r.kwarg(c, "target_modules", None)
        if isinstance(targets, (list, tuple)) and all(isinstance(t, str) for t in targets):
            targets = list(targets)
        readable = rank is not UNKNOWN and (targets is None or isinstance(targets, (list, str)))
        value = (
            {"r": rank, "target_modules": targets, "source": f"{r.s.path.name}:{c.line} LoraConfig"}
            if readable
            else None
        )
        what = "" if readable else "LoraConfig whose r or target_modules the script does not fix"
        if readable and targets is None:
            what = "no target_modules: peft's default for the model type"
        out.append(r.found(c, value, what))
    return out

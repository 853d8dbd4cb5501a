"""LoRA (peft) as a trainable subset: the base model frozen, adapters on the named nn.Linear layers.

peft's LoraConfig (huggingface/peft 5d602fd, src/peft/tuners/lora/config.py): `r` the rank,
`target_modules` a list of module-name suffixes, a regex string (full match on the module's
name), "all-linear" (every nn.Linear but the output head, tuners_utils.py
_maybe_include_all_linear_layers) or None (peft's default for the model type,
utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING). Each adapted Linear(in,
out) gets lora_A Linear(in, r) and lora_B Linear(r, out), without bias (tuners/lora/layer.py
update_layer): r x (in + out) trainable parameters in two tensors. Everything else, the base's
weights included, is frozen (model.requires_grad_(False) in BaseTuner, then the adapters)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.safe_files import load_json

DEFAULT_TARGETS = {
    "llama": ("q_proj", "v_proj"),
    "mistral": ("q_proj", "v_proj"),
    "mixtral": ("q_proj", "v_proj"),
    "qwen2": ("q_proj", "v_proj"),
    "qwen3": ("q_proj", "v_proj"),
    "qwen3_moe": ("q_proj", "v_proj"),
    "gemma": ("q_proj", "v_proj"),
    "gemma2": ("q_proj", "v_proj"),
    "olmo": ("q_proj", "v_proj"),
    "olmo2": ("q_proj", "v_proj"),
    "olmo3": ("q_proj", "v_proj"),
    "mpt": ("Wqkv",),
}
"""peft's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING (utils/constants.py at 5d602fd) for
the families prism-strategy builds (olmo*: their attention is Llama's, named alike)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LoraSpec:
    """A LoRA adapter set: rank and the target modules, as peft's LoraConfig names them."""

    rank: int
    """LoraConfig.r."""
    targets: tuple[str, ...] | str | None = None
    """Module-name suffixes, a regex string, "all-linear", or None (peft's default for the model type)."""
    source: str = ""
    """Where it was read (an adapter_config.json, a script's LoraConfig line)."""

    def __post_init__(self) -> None:
        r = self.rank
        if isinstance(r, bool) or not isinstance(r, int) or r < 1:
            raise SpecError(f"LoRA rank r must be an integer >= 1, got {r!r}{_at(self.source)}; set r (e.g. 8, 16, 64)")
        if isinstance(self.targets, tuple) and not self.targets:
            raise SpecError(f"LoRA target_modules is empty{_at(self.source)}; name the Linear layers to adapt")


def _at(source: str) -> str:
    return f" ({source})" if source else ""


def lora_from_dict(d: Any, source: str) -> LoraSpec:
    """A LoraSpec from an adapter_config.json's / LoraConfig's fields (SpecError naming the field)."""
    if not isinstance(d, dict):
        raise SpecError(f"{source}: a LoRA config must be a JSON object, got {type(d).__name__}")
    kind = str(d.get("peft_type", "LORA")).upper()
    if kind != "LORA":
        raise SpecError(f"{source}: peft_type {kind} is not LoRA; only LoRA adapters are modelled")
    if "r" not in d:
        raise SpecError(f"{source}: no `r` (the LoRA rank); add it")
    targets = d.get("target_modules")
    if isinstance(targets, list):
        if not all(isinstance(t, str) for t in targets):
            raise SpecError(f"{source}: target_modules must be module names, got {targets!r}")
        targets = tuple(targets)
    elif targets is not None and not isinstance(targets, str):
        raise SpecError(f"{source}: target_modules must be a list of names or a string, got {targets!r}")
    return LoraSpec(rank=d["r"], targets=targets, source=source)


def resolve_lora(value: Any) -> LoraSpec | None:
    """plan()'s `lora`: None, a LoraSpec, a dict of LoraConfig fields, or an adapter_config.json path."""
    if value is None or isinstance(value, LoraSpec):
        return value
    if isinstance(value, dict):
        return lora_from_dict({k: v for k, v in value.items() if k != "source"}, str(value.get("source", "lora=")))
    if isinstance(value, (str, Path)):
        path = Path(value)
        if not path.exists():
            raise SpecError(f"LoRA config {path}: no such file; pass the adapter_config.json path")
        data = load_json(path, "LoRA config")  # regular file, size and nesting capped, finite numbers
        return lora_from_dict(data, str(path))
    raise SpecError(f"lora must be an adapter_config.json path or LoraConfig fields, got {type(value).__name__}")


def lora_argument(lora: LoraSpec) -> str | None:
    """The --lora value that loads these adapters again (a printed follow-up command): the
    adapter_config.json they were read from, absolute; None when they came from no such file (a
    script's LoraConfig, TrainingArguments, a dict)."""
    path = Path(lora.source) if lora.source else None
    if path is None or not path.is_file():
        return None
    try:
        return str(path.resolve()) if resolve_lora(path) == replace(lora, source=str(path)) else None
    except SpecError:
        return None


def block_linears(spec: Any, sparse: bool = False) -> dict[str, tuple[int, int]]:
    """One block's nn.Linear layers as transformers names them: name -> (in, out). An MoE
    block's experts are 3-D parameters in transformers 5, not nn.Linear: only attention adapts."""
    h, q, kv = spec.hidden, spec.q_width, spec.kv_width
    out: dict[str, tuple[int, int]] = (
        {"Wqkv": (h, q + 2 * kv)} if spec.fused_qkv else {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv)}
    )
    out["o_proj"] = (q, h)
    if sparse:
        return out
    f = spec.ffn
    if spec.mlp == "gelu":
        return out | {"fc1": (h, f), "fc2": (f, h)}
    if spec.fused_gate_up:
        return out | {"gate_up_proj": (h, 2 * f), "down_proj": (f, h)}
    return out | {"gate_proj": (h, f), "up_proj": (h, f), "down_proj": (f, h)}


def adapted(spec: Any, lora: LoraSpec) -> list[tuple[str, int, int, int]]:
    """(name, in, out, how many) of every adapted Linear; SpecError when a named target is not
    one of the model's Linear layers (peft raises the same: "Target modules ... not found")."""
    targets = lora.targets if lora.targets is not None else DEFAULT_TARGETS.get(spec.hf_model_type)
    if targets is None:
        raise SpecError(
            f"LoRA without target_modules{_at(lora.source)}: peft has no default for {spec.hf_model_type}; "
            "name target_modules"
        )
    groups = [(block_linears(spec, sparse), n) for (_, n), sparse in zip(spec.stack_groups, _sparse(spec))]
    names = sorted({k for lin, _ in groups for k in lin})
    out = []
    for lin, n in groups:
        for name, (i, o) in lin.items():
            if _matches(targets, name):
                out.append((name, i, o, n))
    if isinstance(targets, tuple):
        missing = [t for t in targets if not any(_matches((t,), k) for k in names)]
        if missing:
            raise SpecError(
                f"LoRA target_modules {', '.join(missing)}{_at(lora.source)}: not a Linear layer of "
                f"{spec.name} ({', '.join(names)}); fix target_modules"
            )
    if not out:
        raise SpecError(f"LoRA target_modules {targets!r}{_at(lora.source)} match no Linear layer of {spec.name}")
    return out


def _sparse(spec: Any) -> list[bool]:
    """Whether each of stack_groups is MoE: the dense blocks first, then the MoE ones (specs/model.py)."""
    return [False] * (spec.layers > spec.moe_layers) + [True] * (spec.moe_layers > 0)


def _matches(targets: tuple[str, ...] | str, name: str) -> bool:
    if targets == "all-linear":
        return True  # every Linear of the blocks (the output head is excluded by peft)
    if isinstance(targets, str):
        return re.fullmatch(targets, name) is not None or re.fullmatch(targets, f"layers.0.{name}") is not None
    return name in targets


def adapter_params(spec: Any, lora: LoraSpec) -> int:
    """r x (in + out) per adapted Linear (lora_A and lora_B, no bias)."""
    return sum(lora.rank * (i + o) * n for _, i, o, n in adapted(spec, lora))


def adapter_blocks(spec: Any, lora: LoraSpec) -> tuple[tuple[tuple[tuple[int, int, int], ...], int], ...]:
    """Per group of identical blocks: ((r, in, out) per adapted Linear, how many blocks)."""
    by_count: dict[int, list[tuple[int, int, int]]] = {}
    for _, i, o, n in adapted(spec, lora):
        by_count.setdefault(n, []).append((lora.rank, i, o))
    return tuple((tuple(v), n) for n, v in by_count.items())


BLOCK_INPUT = {
    **dict.fromkeys(("q_proj", "k_proj", "v_proj", "Wqkv"), "attention input"),
    "o_proj": "attention output",
    **dict.fromkeys(("gate_proj", "up_proj", "gate_up_proj", "fc1"), "mlp input"),
    **dict.fromkeys(("down_proj", "fc2"), "mlp inner"),
}
"""What each Linear of a block (block_linears' names) takes in: the attention's normalised input,
the attention's output, the MLP's normalised input, or the MLP's inner activation."""


def saved_inputs(spec: Any, lora: LoraSpec) -> tuple[frozenset[str], float]:
    """(the block inputs the adapters keep for backward, the ranks summed over a block's adapters).
    lora_A keeps its input for its weight gradient, which the frozen Linear beside it does not
    (its input gradient needs only its weight), and lora_B keeps lora_A's r-wide output. Adapters
    of one input share it (one tensor). The ranks are averaged over the blocks (an MoE block
    adapts only its attention); peft's default lora_dropout 0 (nn.Identity): no dropout mask."""
    found = adapted(spec, lora)
    inputs = frozenset(BLOCK_INPUT[name] for name, *_ in found)
    return inputs, sum(lora.rank * n for *_, n in found) / spec.layers


def adapter_tensors(spec: Any, lora: LoraSpec) -> int:
    return sum(2 * n for *_, n in adapted(spec, lora))


def describe(spec: Any, lora: LoraSpec) -> str:
    names = sorted({a[0] for a in adapted(spec, lora)})
    return f"LoRA r={lora.rank} on {', '.join(names)}: {adapter_params(spec, lora) / 1e6:.2f}M trainable"

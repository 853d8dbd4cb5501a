"""Framework configs read by content: torchtitan job TOML, DeepSpeed JSON, Accelerate YAML, HF
TrainingArguments JSON. One module per format with `looks_like(syntax, data)` and
`read(path) -> ConfigInputs`, registered in READERS (as readers/ does for logs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prism_strategy.inputs.frameworks import accelerate, deepspeed, hf_trainer, peft, torchtitan
from prism_strategy.inputs.frameworks.base import ConfigInputs, load
from prism_strategy.specs.errors import SpecError

READERS = (torchtitan, deepspeed, accelerate, hf_trainer, peft)
READS = (
    "a torchtitan job TOML, a DeepSpeed ds_config JSON, an Accelerate config YAML, an HF TrainingArguments JSON "
    "or a peft adapter_config.json"
)
OTHERS: tuple[tuple[str, Any, str], ...] = (
    (
        "json",
        lambda d: "inputs" in d and "options" in d,
        "a `prism-strategy plan --json` file: pass it to `emit --from-plan` instead",
    ),
    (
        "json",
        lambda d: "model_type" in d or "architectures" in d,
        "a Hugging Face model config (config.json), not a training config: pass it as --model",
    ),
    (
        "toml",
        lambda d: "strategy" in d and ("engine" in d or "mixed_precision" in d or "ckpt_freq" in d),
        "prism-strategy's own strategy.toml (emit writes it, wrap_from_file reads it): check it with doctor --launcher",
    ),
    ("toml", lambda d: "devices_per_node" in d, "a prism-strategy platform file: pass it as --platform"),
    (
        "yaml",
        lambda d: "trainer" in d and ("model" in d or "data" in d),
        "a PyTorch Lightning / NeMo config (trainer:, model:): not read; give the equivalent flags",
    ),
    (
        "yaml",
        lambda d: "defaults" in d and isinstance(d.get("defaults"), list),
        "a Hydra config: not read; give the equivalent flags",
    ),
    (
        "json",
        lambda d: "train_batch_size" not in d and "fp16" not in d and "optimizer" in d and "scheduler" in d,
        "a training recipe JSON prism-strategy does not read",
    ),
)


def detect(path: Path) -> tuple[Any, dict[str, Any]]:
    """(the reader module, the parsed file); SpecError naming the framework of a config it does
    not read, or what it reads."""
    syntax, data = load(path)
    if not isinstance(data, dict):
        raise SpecError(f"--from {path}: a {syntax.upper()} {type(data).__name__}, not a config; pass {READS}")
    for reader in READERS:
        if reader.looks_like(syntax, data):
            return reader, data
    for kind, test, what in OTHERS:
        if kind == syntax and test(data):
            raise SpecError(f"--from {path}: {what}")
    keys = ", ".join(list(data)[:4]) or "nothing"
    raise SpecError(
        f"--from {path}: no field says which framework it is for (top-level: {keys}); pass {READS} "
        "(torchtitan: [parallelism]/[model] flavor; DeepSpeed: zero_optimization; Accelerate: distributed_type)"
    )


def read_config(path: str | Path) -> ConfigInputs:
    reader, _ = detect(Path(path))
    return reader.read(Path(path))


__all__ = ["READERS", "ConfigInputs", "detect", "read_config"]

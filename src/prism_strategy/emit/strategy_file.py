"""strategy.toml as emit writes it: `WrapConfig.to_toml` (wrap_config.py, one schema)."""

from __future__ import annotations

from typing import Literal

STRATEGY_FILE = "strategy.toml"
DS_CONFIG_FILE = "ds_config.json"
WRAP_CALL = "wrap_from_file(model, ctx=ctx, optimizer=...)"
"""How the training script reads it (the launchers export PRISM_STRATEGY_FILE)."""


def precision_to_mixed(precision: str) -> Literal["bf16"] | None:
    """--precision bf16-mixed / bf16-pure -> "bf16"; fp32 -> None (fp32 throughout)."""
    return None if precision == "fp32" else "bf16"

"""strategy.toml as emit writes it: `WrapConfig.from_policies(...).to_toml` (wrap_config.py, one schema)."""

from __future__ import annotations

STRATEGY_FILE = "strategy.toml"
DS_CONFIG_FILE = "ds_config.json"
WRAP_CALL = "wrap_from_file(model, ctx=ctx, optimizer=...)"
"""How the training script reads it (the launchers export PRISM_STRATEGY_FILE)."""

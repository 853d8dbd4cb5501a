"""strategy.toml as the runtime reads it: one schema, `WrapConfig` (wrap_config.py)."""

from __future__ import annotations

from pathlib import Path

from prism_strategy.wrap_config import WrapConfig


def read_strategy_file(path: str | Path | None = None) -> WrapConfig:
    """Parse and check a strategy.toml (None: $PRISM_STRATEGY_FILE); ds_config resolved next to it.
    The one reading of the file: wrap_from_file runs it, and its `.policies` are the run's in the
    Scenario's terms (wrap_config.py RunPolicies)."""
    return WrapConfig.from_toml(path)

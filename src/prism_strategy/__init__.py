"""prism-strategy: pick, configure, launch, measure and debug data-parallel training.

Light imports only at package import time: `plan` is pure Python; the runtime pieces
(`init_distributed`, `wrap`, `wrap_from_file`, `StepMonitor`) import torch.distributed when first used.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["plan", "init_distributed", "wrap", "wrap_from_file", "WrapConfig", "read_strategy_file", "StepMonitor"]

_LAZY = {
    "plan": ("prism_strategy.flags", "plan"),
    "init_distributed": ("prism_strategy.runtime.dist", "init_distributed"),
    "wrap": ("prism_strategy.runtime.wrap", "wrap"),
    "wrap_from_file": ("prism_strategy.runtime.wrap", "wrap_from_file"),
    "WrapConfig": ("prism_strategy.wrap_config", "WrapConfig"),
    "read_strategy_file": ("prism_strategy.runtime.strategy_file", "read_strategy_file"),
    "StepMonitor": ("prism_strategy.runtime.monitor", "StepMonitor"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'prism_strategy' has no attribute {name!r}")

"""Optimizer factories by `--optimizer` name, for wrap(optimizer=...): the implementation the
plan was made for is the one that runs (specs/training.py OPTIMIZER_IMPLS)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from prism_strategy.specs.training import parse_optimizer

IMPL_FLAGS: dict[str, dict[str, bool]] = {
    "auto": {},
    "foreach": {"foreach": True},
    "fused": {"fused": True},
    "loop": {"foreach": False},
}
"""torch.optim.AdamW keywords per implementation ("auto" passes neither: torch picks)."""


def optimizer_factory(
    name: str = "adamw", lr: float = 1e-4, **kw: Any
) -> Callable[[Iterable[Any]], torch.optim.Optimizer]:
    """`lambda params: torch.optim.AdamW(params, lr, foreach=...)` for an `--optimizer` name
    ("adamw", "adamw-foreach", "adamw-fused", "adamw-loop", "sgd"); SpecError for another name."""
    algo, impl = parse_optimizer(name)
    if algo == "sgd":
        return lambda params: torch.optim.SGD(params, lr=lr, momentum=kw.pop("momentum", 0.9), **kw)
    flags = IMPL_FLAGS[impl] | kw
    return lambda params: torch.optim.AdamW(params, lr=lr, **flags)

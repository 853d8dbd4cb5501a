"""Collective backends as a registry (as engines/ is for engines): one module and one entry each,
chosen by the platform's `backend` name. A new backend (RCCL) is one module here and one entry in
BACKENDS; nothing outside this package compares backend names (tests/unit/house/test_layers.py)."""

from __future__ import annotations

from prism_strategy.estimate.backends import gloo, nccl, oneccl
from prism_strategy.estimate.backends.base import NO_CALL, Call, CollectiveBackend, Term
from prism_strategy.specs.cluster import PlatformSpec
from prism_strategy.specs.errors import SpecError

BACKENDS: dict[str, CollectiveBackend] = {b.name: b for b in (nccl.BACKEND, oneccl.BACKEND, gloo.BACKEND)}


def backend_of(p: PlatformSpec) -> CollectiveBackend:
    try:
        return BACKENDS[p.backend]
    except KeyError:
        raise SpecError(
            f"platform {p.name!r}: backend {p.backend!r} has no collective model; one of {', '.join(BACKENDS)}"
        ) from None


__all__ = ["BACKENDS", "NO_CALL", "Call", "CollectiveBackend", "Term", "backend_of"]

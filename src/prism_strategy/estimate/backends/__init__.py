"""The collective libraries' cost models as a registry (as engines/ is for engines): one module and
one entry each, keyed by the library's name (specs/libraries.py; a platform's `collective_library`).
A new library is one module here, one entry in BACKENDS and its data/libraries/<name>.toml;
nothing outside this package compares library names (tests/unit/house/test_layers.py)."""

from __future__ import annotations

from prism_strategy.estimate.backends import gloo, nccl, oneccl, rccl
from prism_strategy.estimate.backends.base import NO_CALL, Call, CollectiveBackend, Term
from prism_strategy.specs.cluster import PlatformSpec
from prism_strategy.specs.errors import SpecError

BACKENDS: dict[str, CollectiveBackend] = {b.name: b for b in (nccl.BACKEND, rccl.BACKEND, oneccl.BACKEND, gloo.BACKEND)}


def backend_of(p: PlatformSpec) -> CollectiveBackend:
    try:
        return BACKENDS[p.collective_library]
    except KeyError:
        raise SpecError(
            f"platform {p.name!r}: collective library {p.collective_library!r} has no cost model; "
            f"one of {', '.join(BACKENDS)}"
        ) from None


__all__ = ["BACKENDS", "NO_CALL", "Call", "CollectiveBackend", "Term", "backend_of"]

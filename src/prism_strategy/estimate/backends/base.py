"""The protocol every collective backend implements (estimate/backends/__init__.py registers them).

A backend answers, for one call of an op of `size` bytes (census payload) over a group of `ranks`
spanning `nodes` with `concurrent` such groups per node: the seconds, the algorithm it runs, the
SMs its kernel holds (NCCL channels; 0 elsewhere) and the route / provenance of that price. It also
says which of the platform's terms a collective fit may move, how the job's environment changes
the platform (CCL_* / NCCL_* variables), which readings of its terms the fitted records leave
open, and whether its collectives overlap compute by the engine's schedule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from prism_strategy.specs.cluster import PlatformSpec


class Call(NamedTuple):
    seconds: float
    algorithm: str
    channels: int = 0
    route: str = ""
    """Where the price came from (source file and function), for provenance."""


NO_CALL = Call(0.0, "none")


@dataclass(frozen=True, kw_only=True, slots=True)
class Term:
    """A platform value a collective fit may move (bench/fit/comm_fit.py)."""

    name: str
    kind: str
    """latency or bandwidth"""
    what: str


class CollectiveBackend(Protocol):
    name: str
    """The library it prices (specs/libraries.py): the platform's `collective_library`."""

    def call(self, op: str, size: float, ranks: int, nodes: int, concurrent: int, p: PlatformSpec) -> Call: ...

    def describe(self, p: PlatformSpec) -> str: ...

    def terms(self, p: PlatformSpec) -> tuple[Term, ...]: ...

    def readings(self, p: PlatformSpec) -> dict[str, PlatformSpec]: ...

    def schedules_overlap(self, p: PlatformSpec) -> bool: ...

    def with_env(self, p: PlatformSpec, env: Mapping[str, str]) -> PlatformSpec: ...


class BackendDefaults:
    """What a backend does unless it says otherwise: every fitted term decided (one reading, the
    platform as shipped), collectives that hold the host (no overlap by schedule), and no
    environment variable its model reads. A backend subclasses it and overrides what differs."""

    def readings(self, p: PlatformSpec) -> dict[str, PlatformSpec]:
        return {"shipped": p}

    def schedules_overlap(self, p: PlatformSpec) -> bool:
        return False

    def with_env(self, p: PlatformSpec, env: Mapping[str, str]) -> PlatformSpec:
        return p

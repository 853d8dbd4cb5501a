"""Where the job runs: a platform (one node type, from data/platforms/*.toml) and a layout
(how many nodes, ranks per node). A platform's values live in the groups of specs/platform_groups.py
(`platform.links.intra_bw_gbps`); what it is (name, device, backend, where its numbers came from)
stays on top."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterator, Mapping
from typing import Any, Literal, get_args

import pydantic
import pydantic.dataclasses
from annotated_types import Ge, Gt, Le, Lt

from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.libraries import CollectiveLibrary, LibraryName, library, library_of_backend
from prism_strategy.specs.measured import MeasuredCurve
from prism_strategy.specs.platform_groups import (
    FIELD_GROUP,
    GROUP_CONFIG,
    GROUPS,
    NCCL_SCALES,
    AllocatorSpec,
    CalibrationSpec,
    CollectiveSpec,
    ComputeSpec,
    ComputeTerms,
    HardwareSpec,
    LinkSpec,
    NcclSpec,
    OnecclSpec,
)

__all__ = ["GiB", "NCCL_SCALES", "ComputeTerms", "Layout", "PlatformSpec", "platform_error"]

GiB = 1024**3


@pydantic.dataclasses.dataclass(frozen=True, kw_only=True, slots=True, config=GROUP_CONFIG)
class PlatformSpec:
    """One node type. Every number has an entry in `sources` saying where it came from. Build one
    with `from_flat` (flat field names, as a platform file writes them) and change one with
    `with_values`; both check every group's declared constraints."""

    name: str
    """The preset or file name: what `--platform` and a calibration file call it."""
    description: str = ""
    """One line on the node type."""
    device: Literal["xpu", "cuda", "cpu"]
    """The device type torch sees."""
    collective_library: LibraryName
    """The collective library (specs/libraries.py): its cost model and facts. A platform file's
    older `backend = "<torch name>"` means that name's default library (nccl, oneccl, gloo)."""
    launcher: Literal["pbs", "slurm", "torchrun"] = "torchrun"
    """How jobs start on this platform (emit/launch.py)."""
    env_profile: str = ""
    """The validated environment the platform's numbers were measured under (data/env_profiles)."""
    hardware: HardwareSpec
    """Devices, memory, peaks, the host."""
    compute: ComputeSpec = dataclasses.field(default_factory=ComputeSpec)
    """Achievable fraction and host costs of the step's kernels."""
    links: LinkSpec
    """Bandwidths and latencies inside and between nodes."""
    collectives: CollectiveSpec = dataclasses.field(default_factory=CollectiveSpec)
    """What every collective backend's model reads."""
    nccl: NcclSpec = dataclasses.field(default_factory=NcclSpec)
    """NCCL's factors over its tuning constants."""
    oneccl: OnecclSpec = dataclasses.field(default_factory=OnecclSpec)
    """oneCCL's settings (CCL_* of the env profile)."""
    allocator: AllocatorSpec = dataclasses.field(default_factory=AllocatorSpec)
    """What the caching allocator hands out and keeps."""
    calibration: CalibrationSpec = dataclasses.field(default_factory=CalibrationSpec)
    """Values measured on this cluster."""
    sources: dict[str, str] = dataclasses.field(default_factory=dict)
    """Where each value came from, by flat field name."""
    base: str = ""
    """The preset this platform file inherits from (`base = "dgx-a100-40"`); empty = none."""
    defaulted: tuple[str, ...] = ()
    """Fields the platform file (and its base) left to these defaults: said aloud in provenance."""
    measured_collectives: tuple[MeasuredCurve, ...] = ()
    """Collective curves measured on this platform (commbench, nccl-tests, oneCCL benchmark),
    attached from the results store by `plan --db`; estimate/comm_measured.py prices with them."""

    @classmethod
    def from_flat(cls, values: Mapping[str, Any], where: str = "") -> PlatformSpec:
        """A platform from flat field names (`intra_bw_gbps`, not `links.intra_bw_gbps`)."""
        where = where or f"platform {values.get('name')!r}"
        top, groups = _route(values, where)
        try:
            return cls(**top, **{g: groups.get(g, {}) for g in GROUPS})
        except pydantic.ValidationError as e:
            raise platform_error(e, where) from None

    def with_values(self, **changes: Any) -> PlatformSpec:
        """This platform with fields changed, named flat (`with_values(intra_bw_gbps=300.0)`): each
        goes to its group; an unknown name or a value outside a field's constraint is a SpecError."""
        where = f"platform {self.name!r}"
        top, groups = _route(changes, where)
        try:
            moved = {g: dataclasses.replace(getattr(self, g), **kw) for g, kw in groups.items()}
            return dataclasses.replace(self, **top, **moved)
        except pydantic.ValidationError as e:
            raise platform_error(e, where) from None

    def value(self, name: str) -> Any:
        """A field's value by its flat name (what `sources`, `defaulted` and calibration files say)."""
        if name in FIELD_GROUP:
            return getattr(getattr(self, FIELD_GROUP[name]), name)
        if name in IDENTITY:
            return getattr(self, name)
        raise SpecError(f"platform {self.name!r}: no field {name!r}{_hint(name)}")

    @property
    def library(self) -> CollectiveLibrary:
        return library(self.collective_library)

    @property
    def backend(self) -> str:
        """torch.distributed's backend name, from the library (on ROCm rccl's is "nccl")."""
        return self.library.torch_backend

    @property
    def usable_bytes(self) -> float:
        return self.hardware.memory_gib * self.allocator.usable_fraction * GiB

    def source(self, key: str) -> str:
        return self.sources.get(key, f"platform file {self.name}")


IDENTITY = tuple(f.name for f in dataclasses.fields(PlatformSpec) if f.name not in GROUPS)
"""PlatformSpec's own fields (what the platform is, not a value of its model)."""
FLAT_FIELDS = (*IDENTITY, "backend", *FIELD_GROUP)
"""Every name a platform file, `sources` or with_values may use."""


def _route(values: Mapping[str, Any], where: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Flat names split into PlatformSpec's own fields and each group's."""
    top: dict[str, Any] = {}
    groups: dict[str, dict[str, Any]] = {}
    for k, v in with_library(values, where).items():
        if k in FIELD_GROUP:
            groups.setdefault(FIELD_GROUP[k], {})[k] = v
        elif k in IDENTITY:
            top[k] = v
        else:
            raise SpecError(f"{where}: unknown platform field {k!r}{_hint(k)}")
    return top, groups


def with_library(values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """`backend = "<torch name>"` (platform files before the library registry) read as the
    library it means; beside `collective_library` it must be that library's torch name."""
    out = {k: v for k, v in values.items() if k != "backend"}
    if "backend" not in values:
        return out
    given = values["backend"]
    try:
        lib = library(out["collective_library"]) if "collective_library" in out else library_of_backend(str(given))
    except SpecError as e:
        raise SpecError(f"{where}: {e}") from None
    if given not in (lib.torch_backend, *lib.torch_aliases):
        raise SpecError(
            f"{where}: backend {given!r} is not torch's name for collective_library {lib.name!r} "
            f"({lib.torch_backend!r}); drop `backend`, the library says it"
        )
    out["collective_library"] = lib.name
    return out


def _hint(name: str) -> str:
    close = difflib.get_close_matches(name, FLAT_FIELDS, n=1)
    return (
        f" (did you mean {close[0]!r}? the fields are listed in docs/platform_files.md)"
        if close
        else (" (the fields are listed in docs/platform_files.md)")
    )


_BOUND_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")


def platform_error(e: pydantic.ValidationError, where: str) -> SpecError:
    """ONE line for the first problem: the field by its flat name and, for a bound, the whole range
    the field declares (`usable_fraction must be in (0, 1], got 1.5`)."""
    err = e.errors()[0]
    loc = [str(x) for x in err["loc"]]
    if loc and loc[0] in GROUPS:
        loc = loc[1:]
    name = ".".join(p for p in loc if p != "[key]") or "(platform)"
    got = err.get("input")
    if err["type"] in _BOUND_ERRORS and loc:
        return SpecError(f"{where}: {name} must be {allowed_range(loc)}, got {got!r}")
    if err["type"] == "missing":
        return SpecError(f'{where}: missing {name}; add it to the platform file or inherit it with base = "<preset>"')
    return SpecError(
        f"{where}: field {name}: {err['msg']}, got {got!r}; fix it in the file (each field's type: docs/platform_files.md)"
    )


def allowed_range(loc: list[str]) -> str:
    """The bounds a field declares (Gt/Ge/Lt/Le), as `> 0`, `>= 1` or `in (0, 1]`."""
    owner: Any = GROUPS[FIELD_GROUP[loc[0]]] if loc[0] in FIELD_GROUP else PlatformSpec
    annotation: Any = owner
    for part in loc:
        cls = next((a for a in _walk(annotation) if _is_spec(a) and part in a.__pydantic_fields__), None)
        if cls is None:
            break
        annotation = cls.__pydantic_fields__[part].rebuild_annotation()
    marks = [m for m in _walk(annotation) if isinstance(m, (Gt, Ge, Lt, Le))]
    lo = next((m for m in marks if isinstance(m, (Gt, Ge))), None)
    hi = next((m for m in marks if isinstance(m, (Lt, Le))), None)
    if lo is not None and hi is not None:
        return f"in {'(' if isinstance(lo, Gt) else '['}{_bound(lo)}, {_bound(hi)}{')' if isinstance(hi, Lt) else ']'}"
    if lo is not None:
        return f"{'>' if isinstance(lo, Gt) else '>='} {_bound(lo)}"
    return f"{'<' if isinstance(hi, Lt) else '<='} {_bound(hi)}" if hi is not None else "valid"


def _walk(annotation: Any) -> Iterator[Any]:
    yield annotation
    for meta in getattr(annotation, "__metadata__", ()):
        yield meta
    for arg in get_args(annotation):
        yield from _walk(arg)


def _is_spec(a: Any) -> bool:
    return isinstance(a, type) and hasattr(a, "__pydantic_fields__")


def _bound(mark: Any) -> str:
    v = next(getattr(mark, k) for k in ("gt", "ge", "lt", "le") if hasattr(mark, k))
    return f"{v:g}"


MAX_RANKS = 262_144
"""The largest job a plan is made for (2^18 ranks): above every data-parallel job reported so far
(Aurora's 10,624 nodes x 12 tiles = 127,488; 100,000-200,000 GPU clusters); beyond it the ring and
tree models have never been checked, and a typo (--nodes 1000000) is caught."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Layout:
    """Nodes x ranks per node; -1 ranks_per_node means "all devices of the platform"."""

    nodes: int
    ranks_per_node: int

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise SpecError(f"--nodes must be >= 1, got {self.nodes}")
        if self.ranks_per_node < 1:
            raise SpecError(f"ranks per node must be >= 1, got {self.ranks_per_node}")
        if self.nodes * self.ranks_per_node > MAX_RANKS:
            raise SpecError(
                f"--nodes {self.nodes} x {self.ranks_per_node} ranks per node = {self.nodes * self.ranks_per_node:,} "
                f"ranks, above the {MAX_RANKS:,} a plan is made for (larger than any reported job); give at most "
                f"{MAX_RANKS // self.ranks_per_node} nodes"
            )

    @classmethod
    def for_platform(cls, platform: PlatformSpec, nodes: int) -> "Layout":
        return cls(nodes=nodes, ranks_per_node=platform.hardware.devices_per_node)

    @property
    def world(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    def __str__(self) -> str:
        return f"NODES({self.nodes})-RPN({self.ranks_per_node})"

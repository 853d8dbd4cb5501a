"""Published collective measurements as data (data/measurements/<name>.toml, [[row]] per figure):
loaded, checked, and turned into the points the comm fit takes (bench/fit/comm_fit.py CommPoint).

A row is one measured call: op, payload bytes (census convention), nodes x ranks per node of one
group, groups at once per node, the CCL environment it ran under and, where the ranks were not on
oneCCL's default tiles, its placement. A malformed file raises SpecError (one line: the row, the
field, the fix).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.measured import OPS
from prism_strategy.specs.presets import DATA, read_toml

PLACEMENTS = {"one tile per card": (("mdfi_bw_gbps", 0.0),)}
"""A placement the platform's default does not describe, as the platform values it changes: two
ranks on two cards (one tile each) talk over Xe Link, not the MDFI of a card's two tiles."""
REQUIRED = ("id", "op", "bytes", "nodes", "ranks_per_node", "ms", "source")


@dataclass(frozen=True, kw_only=True, slots=True)
class CollectiveRow:
    id: str
    op: str
    bytes: float
    dtype: str
    nodes: int
    ranks_per_node: int
    concurrent: int
    env: tuple[tuple[str, str], ...]
    placement: str
    ms: float
    ms_range: tuple[float, float] | None
    source: str
    stack: str
    note: str
    stack_values: tuple[tuple[str, Any], ...] = ()
    """The platform values the row's stack takes (the file's [stacks.NAME], e.g. ccl_host_staging)."""
    check: str = ""
    """Why the row is a check, not fitted (the file's `check`); empty: fitted."""

    @property
    def ranks(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def overrides(self) -> tuple[tuple[str, Any], ...]:
        return self.stack_values + PLACEMENTS.get(self.placement, ())

    @property
    def layout(self) -> str:
        return f"{self.nodes}x{self.ranks_per_node}" + (f"x{self.concurrent} groups" if self.concurrent > 1 else "")


STACK_VALUES = ("ccl_host_staging",)
"""The platform values a [stacks.NAME] table may set for its rows."""


def _row(d: dict[str, Any], where: str, stacks: dict[str, Any]) -> CollectiveRow:
    missing = [k for k in REQUIRED if k not in d]
    if missing:
        raise SpecError(f"{where}: row {d.get('id', '?')!r} lacks {', '.join(missing)}; every row needs {REQUIRED}")
    rid = str(d["id"])
    if d["op"] not in OPS:
        raise SpecError(f"{where}: row {rid}: op {d['op']!r} is not one of {', '.join(OPS)}")
    for k in ("bytes", "ms"):
        if not isinstance(d[k], (int, float)) or d[k] <= 0:
            raise SpecError(f"{where}: row {rid}: {k} must be a positive number, got {d[k]!r}")
    for k in ("nodes", "ranks_per_node", "concurrent"):
        if not isinstance(d.get(k, 1), int) or d.get(k, 1) < 1:
            raise SpecError(f"{where}: row {rid}: {k} must be a positive integer, got {d.get(k)!r}")
    rng = d.get("ms_range")
    if rng is not None and (len(rng) != 2 or not 0 < rng[0] <= d["ms"] <= rng[1]):
        raise SpecError(f"{where}: row {rid}: ms_range must be [low, high] around ms, got {rng!r}")
    if d.get("placement", "") and d["placement"] not in PLACEMENTS:
        raise SpecError(f"{where}: row {rid}: placement {d['placement']!r}: one of {', '.join(PLACEMENTS)}")
    stack = str(d.get("stack", ""))
    if stack and stack not in stacks:
        raise SpecError(f"{where}: row {rid}: stack {stack!r} has no [stacks.{stack}] table")
    env = d.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise SpecError(f'{where}: row {rid}: env must be a table of strings (CCL_X = "value")')
    return CollectiveRow(
        id=rid,
        op=d["op"],
        bytes=float(d["bytes"]),
        dtype=str(d.get("dtype", "unrecorded")),
        nodes=d["nodes"],
        ranks_per_node=d["ranks_per_node"],
        concurrent=d.get("concurrent", 1),
        env=tuple(sorted(env.items())),
        placement=d.get("placement", ""),
        ms=float(d["ms"]),
        ms_range=tuple(rng) if rng else None,  # type: ignore[arg-type]
        source=str(d["source"]),
        stack=stack,
        note=str(d.get("note", "")),
        stack_values=tuple((k, v) for k, v in stacks.get(stack, {}).items() if k in STACK_VALUES),
        check=str(d.get("check", "")),
    )


def load_rows(name_or_path: str = "aurora-collectives") -> tuple[dict[str, Any], list[CollectiveRow]]:
    """(the file's header tables, its rows) from data/measurements/NAME.toml or a path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = DATA / "measurements" / f"{name_or_path}.toml"
    if not path.is_file():
        names = sorted(p.stem for p in (DATA / "measurements").glob("*.toml"))
        raise SpecError(
            f"collective measurements {name_or_path!r}: no such file; use one of {', '.join(names)} "
            "or a path to a measurements .toml"
        )
    d = read_toml(path)
    rows = d.get("row")
    if not isinstance(rows, list) or not rows:
        raise SpecError(f"{path.name}: no [[row]] tables; each measured call is one [[row]] (see aurora-collectives)")
    out = [_row(r, path.name, d.get("stacks", {})) for r in rows]
    ids = [r.id for r in out]
    if len(set(ids)) != len(ids):
        raise SpecError(
            f"{path.name}: row ids repeat ({sorted({i for i in ids if ids.count(i) > 1})}); make each unique"
        )
    return {k: v for k, v in d.items() if k != "row"}, out


def row_platform(p: Any, row: CollectiveRow) -> Any:
    """The platform as this row ran: its CCL environment (the backend's with_env), its placement."""

    from prism_strategy.estimate.backends import backend_of

    q = backend_of(p).with_env(p, dict(row.env))
    return q.with_values(**dict(row.overrides)) if row.overrides else q


def row_points(rows: list[CollectiveRow]) -> list[Any]:
    """The rows as the comm fit's points (bench/fit/comm_fit.py CommPoint), curve = the row id."""
    from prism_strategy.bench.fit.comm_fit import CommPoint

    return [
        CommPoint(
            op=r.op,
            ranks=r.ranks,
            nodes=r.nodes,
            concurrent=r.concurrent,
            bytes=r.bytes,
            seconds=r.ms / 1e3,
            curve=r.id,
            env=r.env,
            overrides=r.overrides,
        )
        for r in rows
    ]


def collective_row_files() -> list[str]:
    """Shipped files of collective rows (data/measurements/*.toml holding [[row]] tables)."""
    files = (p for p in (DATA / "measurements").iterdir() if p.name.endswith(".toml"))
    return sorted(p.name[:-5] for p in files if "[[row]]" in p.read_text())

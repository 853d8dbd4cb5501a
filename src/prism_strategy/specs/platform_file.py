"""A platform file as the planner gets it: flat keys or grouped tables ([links], [oneccl], ...: the
groups of specs/platform_groups.py) read as one flat table, inherited from a named preset (`base = "dgx-a100-40"`),
checked for the hardware facts its backend's model reads (data/platform_fields.toml; one error
listing every missing field), the fields that model never reads filled and said so, and every
value the file left to PlatformSpec's default named (PlatformSpec.defaulted)."""

from __future__ import annotations

import dataclasses
import difflib
from functools import cache
from importlib import resources
from typing import Any, Callable

import tomllib

from prism_strategy.specs.cluster import FLAT_FIELDS, PlatformSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.platform_groups import FIELD_GROUP, GROUPS
from prism_strategy.specs.shell_values import check_launch, check_queues

_UNLISTED = ("name", "description", "sources", "measured_collectives", "base", "defaulted")
"""PlatformSpec fields that are not values of the hardware or its model (never listed as defaults)."""


SITE_TABLES = ("launch", "queues")
"""Tables of a platform file that describe the site, not the platform: emit/site.py reads them."""


def flatten(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """The file's keys as flat field names: a grouped table's entries ([links] intra_bw_gbps = ...)
    lifted to the top, the site's tables left to emit/site.py; an unknown key, a key in the wrong
    table or a key given twice is bad input."""
    out: dict[str, Any] = {}
    for k, v in raw.items():
        if k in SITE_TABLES:  # read by emit/site.py; checked here so plan refuses what emit would
            (check_launch if k == "launch" else check_queues)(v, where)
            continue
        if k in GROUPS and isinstance(v, dict):
            for kk, vv in v.items():
                if FIELD_GROUP.get(kk) != k:
                    raise SpecError(f"{where}: [{k}] has no field {kk!r}{_placed(kk)}")
                _put(out, kk, vv, where)
        elif k == "sources" and not isinstance(v, dict):
            raise SpecError(
                f'{where}: sources must be a table of field = "where the value came from", got a '
                f"{type(v).__name__}; write it as [sources] with one line per field"
            )
        elif k in FLAT_FIELDS:
            _put(out, k, v, where)
        else:
            raise SpecError(f"{where}: unknown platform field {k!r}{_placed(k)}")
    return out


def _put(out: dict[str, Any], key: str, value: Any, where: str) -> None:
    if key in out:
        raise SpecError(f"{where}: {key} is given twice (at the top and in [{FIELD_GROUP[key]}]); keep one")
    out[key] = value


def _placed(key: str) -> str:
    """Where a misplaced or mistyped key belongs."""
    if key in FIELD_GROUP:
        return f" (it belongs in [{FIELD_GROUP[key]}] or at the top)"
    close = difflib.get_close_matches(key, [*FLAT_FIELDS, *GROUPS], n=1)
    near = f"did you mean {close[0]!r}? " if close else ""
    return f" ({near}the fields are listed in docs/platform_files.md)"


@cache
def _fields() -> dict[str, Any]:
    return tomllib.loads((resources.files("prism_strategy") / "data" / "platform_fields.toml").read_text())


def required_fields(backend: str) -> list[str]:
    req = _fields()["required"]
    return list(req["all"]) + list(req.get(backend, []))


def with_base(raw: dict[str, Any], where: str, load_raw: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """The file's table over its base preset's (one level or a chain); `sources` merged the same
    way, an inherited value's source saying which base it came from."""
    base = raw.get("base")
    if base is None:
        return raw
    if not isinstance(base, str) or not base:
        raise SpecError(f"{where}: base must be a platform preset name (`prism-strategy platforms`), got {base!r}")
    parent = load_raw(base)
    inherited = {k: v for k, v in parent.items() if k not in ("name", "description", "sources", "base")}
    sources = {k: f"from base {base}: {v}" for k, v in parent.get("sources", {}).items() if k not in raw}
    sources |= {k: f"from base {base}" for k in inherited if k not in raw and k not in sources}
    merged = inherited | {k: v for k, v in raw.items() if k != "base"}
    merged["sources"] = sources | dict(raw.get("sources", {}))
    merged["base"] = base
    return merged


def check_required(raw: dict[str, Any], where: str) -> None:
    """One error naming every hardware fact the file lacks (and what supplies them all at once)."""
    backend = raw.get("collective_library")
    missing = [f for f in required_fields(str(backend)) if f not in raw]
    if "name" not in raw:
        missing.insert(0, "name")
    if missing:
        what = f"the {backend} model reads" if backend else "every platform needs"
        raise SpecError(
            f"{where}: missing {', '.join(missing)} ({what} them); add them, or inherit them from a preset "
            'with base = "<preset>" (`prism-strategy platforms`; e.g. base = "dgx-a100-40")'
        )


def fill_not_read(raw: dict[str, Any]) -> dict[str, Any]:
    """Fields PlatformSpec needs that the backend's model never reads, filled when absent."""
    fill = _fields()["not_read"].get(str(raw.get("collective_library")), {})
    out, sources = dict(raw), dict(raw.get("sources", {}))
    for k, v in fill.items():
        if k not in out:
            out[k] = out[v] if isinstance(v, str) else v
            sources[k] = (
                f"not read by the {raw['collective_library']} model; set to {out[k]!r} (data/platform_fields.toml)"
            )
    out["sources"] = sources
    return out


def defaulted_fields(raw: dict[str, Any]) -> tuple[str, ...]:
    """PlatformSpec fields with a default that the (merged) file does not set, by flat name: its own
    fields first, then each group's in order."""
    own = [f for f in dataclasses.fields(PlatformSpec) if f.name not in (*_UNLISTED, *GROUPS)]
    grouped = [f for group in GROUPS.values() for f in dataclasses.fields(group)]
    return tuple(f.name for f in own + grouped if f.name not in raw and _has_default(f))


def _has_default(f: dataclasses.Field) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def defaults_text(p: PlatformSpec) -> str:
    """Every defaulted value, as provenance says it ("" when none)."""
    if not p.defaulted:
        return ""
    vals = ", ".join(f"{k} {_value(p.value(k))}" for k in p.defaulted)
    return f"platform {p.name}: PlatformSpec defaults (not in the file{_base_text(p)}): {vals}"


def not_modelled(backend: str) -> frozenset[str]:
    """Flat fields the backend's model never reads (data/platform_fields.toml [not_modelled]; a
    group's name stands for its fields)."""
    names = _fields().get("not_modelled", {}).get(backend, [])
    return frozenset(
        f for n in names for f in ([g.name for g in dataclasses.fields(GROUPS[n])] if n in GROUPS else [n])
    )


def _neutral(v: Any) -> bool:
    """A default that leaves its term out of the model (0 = not modelled, none, empty, off)."""
    return v is None or v is False or v == 0 or v == "" or v == {}


@cache
def preset_set(backend: str) -> frozenset[str]:
    """Fields every preset of this backend sets: a default none of them keeps is likely wrong for
    the user's hardware too."""
    from prism_strategy.specs.presets import platform_names, preset_raw

    raws = [r for r in map(preset_raw, platform_names()) if r.get("collective_library") == backend]
    return frozenset.intersection(*(frozenset(r) for r in raws)) if raws else frozenset()


def defaults_note(p: PlatformSpec, shown: int = 8) -> str:
    """The plan's one note on the defaults: only fields this backend's model reads; first the ones
    every preset of the backend sets (assumed values, then terms the default leaves out), the rest
    counted (the full list is provenance.platform_defaults)."""
    read = [k for k in p.defaulted if k not in not_modelled(p.collective_library)]
    firm = [k for k in read if k in preset_set(p.collective_library)]
    assumed = [k for k in firm if not _neutral(p.value(k))]
    off = [k for k in firm if _neutral(p.value(k))]
    parts = [", ".join(f"{k} {_value(p.value(k))}" for k in assumed)] if assumed else []
    if off:
        more = f", +{len(off) - shown}" if len(off) > shown else ""
        parts.append(f"left out of the model (0/none): {', '.join(off[:shown])}{more}")
    rest = len(read) - len(firm)
    lib = p.collective_library
    counted = (f"; {rest} more no {lib} preset sets" if rest else "") + (
        f"; {len(p.defaulted) - len(read)} the {lib} model never reads" if len(p.defaulted) > len(read) else ""
    )
    return (
        f"platform {p.name}: PlatformSpec defaults (not in the file{_base_text(p)}) that the {lib} presets set: "
        f"{'; '.join(parts) or 'none'}{counted} (all {len(p.defaulted)}: --json provenance.platform_defaults)"
    )


def _base_text(p: PlatformSpec) -> str:
    return f" nor its base {p.base}" if p.base else ""


def _value(v: Any) -> str:
    if isinstance(v, dict):
        return "{}" if not v else "{" + ", ".join(f"{k}={x}" for k, x in v.items()) + "}"
    return "none" if v is None or v == "" else f"{v:g}" if isinstance(v, float) else str(v)

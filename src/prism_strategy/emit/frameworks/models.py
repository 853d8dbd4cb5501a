"""A framework's model names and the presets of the same architecture (data/framework_models.toml),
both ways: the readers map torchtitan's name + flavor to a preset, the writers back; and its field
names across versions (data/framework_fields.toml), both ways: the readers read an older file under
today's names, the writers write a round trip back under the file's own."""

from __future__ import annotations

import copy
from functools import cache
from importlib import resources
from typing import Any

import tomllib


@cache
def framework_models() -> dict[str, dict[str, dict[str, str]]]:
    return tomllib.loads((resources.files("prism_strategy") / "data" / "framework_models.toml").read_text())


def preset_for(framework: str, name: str, flavor: str) -> str | None:
    return framework_models().get(framework, {}).get(name, {}).get(flavor)


def model_for(framework: str, preset: str) -> tuple[str, str] | None:
    """(name, flavor) of the framework's model with the preset's architecture, if it has one."""
    for name, flavors in framework_models().get(framework, {}).items():
        for flavor, p in flavors.items():
            if p == preset:
                return name, flavor
    return None


@cache
def framework_fields() -> dict[str, Any]:
    return tomllib.loads((resources.files("prism_strategy") / "data" / "framework_fields.toml").read_text())


def renames(framework: str) -> list[dict[str, Any]]:
    """[[<framework>.renamed]] entries: old, new (dotted paths), since, values (optional)."""
    return list(framework_fields().get(framework, {}).get("renamed", ()))


def current_names(framework: str, data: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """(a copy of `data` with each older field moved to today's name, the (old, new) pairs moved):
    what a writer edits before file_names() puts the file's own names back. The file was read
    first (inputs/frameworks), which refuses both names in one file."""
    out = copy.deepcopy(data)
    moved = []
    for e in renames(framework):
        *old_table, old_key = e["old"].split(".")
        *new_table, new_key = e["new"].split(".")
        src = _table(out, old_table)
        if src is None or old_key not in src:
            continue
        dst = out
        for k in new_table:
            dst = dst.setdefault(k, {})
        value = src.pop(old_key)
        dst[new_key] = e.get("values", {}).get(str(value).lower(), value) if e.get("values") else value
        moved.append((e["old"], e["new"]))
    return out, moved


def file_names(cfg: dict[str, Any], moved: list[tuple[str, str]]) -> dict[str, Any]:
    """`cfg` (today's names) with each (old, new) field the file held under `old` moved back to
    `old`, so a round trip writes the file's own version; tables left empty are dropped."""
    for old, new in moved:
        *new_table, new_key = new.split(".")
        *old_table, old_key = old.split(".")
        src = _table(cfg, new_table)
        if src is None or new_key not in src:
            continue
        dst = cfg
        for k in old_table:
            dst = dst.setdefault(k, {})
        dst[old_key] = src.pop(new_key)
        if not src and new_table:
            _table(cfg, new_table[:-1]).pop(new_table[-1])  # type: ignore[union-attr]
    return cfg


def _table(d: dict[str, Any], path: list[str]) -> dict[str, Any] | None:
    for k in path:
        d = d.get(k)  # type: ignore[assignment]
        if not isinstance(d, dict):
            return None
    return d

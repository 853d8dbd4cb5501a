"""`plan --from FILE`: a framework config's fields as plan()'s flags, merged with the command line.

A value the file states that contradicts a flag given on the command line is an error naming
both; with `--override` the flag wins and the section says so. A value the file leaves to its
framework's default yields to a flag silently (noted). The config's own strategy is marked in the
plan (`inputs.config.strategy`, and how that option fared), not imposed: the plan still evaluates
every strategy, so the same scenario from flags plans the same options.
`configured()` is the one place the file's keywords meet the flags' (flags.py: the CLI's plan and
`plan_for_config` merge them, build the Scenario and plan it; nothing here plans)."""

from __future__ import annotations

import textwrap
from typing import Any

from prism_strategy.inputs.frameworks.base import ConfigInputs
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.policies import BatchPolicy
from prism_strategy.specs.presets import load_platform

FLAG = {"compile": "--compile", "model": "--model"}


def flag(keyword: str, value: Any = None) -> str:
    if keyword == "compile" and value is False:
        return "--no-compile"
    return FLAG.get(keyword, "--" + keyword.replace("_", "-"))


def configured(
    cfg: ConfigInputs, values: dict[str, Any], given_flags: set[str], override: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(plan() keywords: the command line's with the config's merged in, the JSON section)."""
    merged, overridden = dict(values), []
    for keyword, planned in cfg.options.items():
        if keyword not in values:
            raise SpecError(
                f"--from {cfg.path}: {cfg.source_of(keyword).field} sets {keyword}, which this command does not take"
            )
        src = cfg.source_of(keyword)
        if keyword in given_flags and values[keyword] != planned:
            if keyword in cfg.stated and not override:
                raise SpecError(
                    f"--from {cfg.path}: {src.field} = {src.value!r} (planned as {keyword} {planned!r}) contradicts "
                    f"{flag(keyword, values[keyword])} {values[keyword]!r}; drop the flag, change the file, or "
                    "pass --override to let the flag win"
                )
            overridden.append(
                {
                    "field": src.field,
                    "value": src.value,
                    "flag": flag(keyword, values[keyword]),
                    "planned": values[keyword],
                    "default": keyword not in cfg.stated,
                }
            )
            continue
        merged[keyword] = planned
    if "model" not in cfg.options and "model" not in given_flags:
        raise SpecError(
            f"--from {cfg.path}: the {cfg.format} config names no model the plan can build; "
            "pass --model with a preset name (`prism-strategy models`) or a config.json path"
        )
    note = _check_degrees(cfg, merged)
    section = section_of(cfg, overridden) | ({"notes": [note]} if note else {})
    section["assumed"] = [*cfg.assumed, *_assumed(cfg, merged, given_flags)]
    return merged, section


ASSUMED = {"seq_len": "the sequence length is the data's"}
"""Batch policy fields a plan needs that a config may not say, and why the file does not."""


def _assumed(cfg: ConfigInputs, merged: dict[str, Any], given_flags: set[str]) -> list[str]:
    """What the plan had to assume because neither the file nor a flag says it."""
    return [
        f"{k}: not in the file ({why}), assumed {merged.get(k) or getattr(BatchPolicy(), k)} - pass {flag(k)}"
        for k, why in ASSUMED.items()
        if k not in cfg.options and k not in given_flags
    ]


def _check_degrees(cfg: ConfigInputs, merged: dict[str, Any]) -> str | None:
    """The config's replicate x shard degrees against the world the plan gets; a note where its
    HSDP mesh is not the planner's (shard inside a node, replicate across nodes)."""
    if cfg.dp_degrees is None:
        return None
    rep, shard = cfg.dp_degrees
    rpn = merged.get("ranks_per_node") or load_platform(merged["platform"]).hardware.devices_per_node
    world = merged["nodes"] * rpn
    product = rep * shard if shard > 0 else None
    if (product is not None and product != world) or world % rep:
        said = f"{rep} x {shard} = {product}" if product else f"{rep} x (the ranks left)"
        raise SpecError(
            f"--from {cfg.path}: {cfg.dp_fields} {said} "
            f"does not fit --nodes {merged['nodes']} x {rpn} ranks per node = {world} ranks; change the degrees "
            "or --nodes/--ranks-per-node"
        )
    shard_size = shard if shard > 0 else world // rep
    if rep > 1 and shard_size > 1 and shard_size != rpn:
        return (
            f"the config shards over {shard_size} ranks and replicates {rep} times; the plan's HSDP shards "
            f"over the {rpn} ranks of a node and replicates over nodes"
        )
    return None


def section_of(cfg: ConfigInputs, overridden: list[dict[str, Any]]) -> dict[str, Any]:
    """`inputs.config` of plan --json."""
    return {
        "file": str(cfg.path),
        "format": cfg.format,
        "strategy": cfg.strategy,
        "used": [f.to_dict() for f in cfg.used],
        "ignored": [f.to_dict() for f in cfg.ignored],
        "overridden": overridden,
        "content": cfg.content,
    }


def strategy_verdict(p: Any, name: str | None) -> dict[str, Any] | None:
    """How the config's own strategy fared in the plan."""
    if name is None:
        return None
    o = next((o for o in p.options if o.strategy == name), None)
    if o is None:
        return {"strategy": name, "evaluated": False}
    return {
        "strategy": name,
        "evaluated": True,
        "feasible": o.feasible,
        "why_not": o.why_not,
        "recommended": p.recommended == name,
        "samples_per_s": o.samples_per_s if o.feasible else None,
    }


def config_lines(section: dict[str, Any]) -> list[str]:
    """For people: which file, what it runs, how the plan's pick compares, what was left out."""
    v = section.get("strategy_option") or {}
    lines = [
        f"config {section['file']} ({section['format']}):",
        f"  {len(section['used'])} fields used, {len(section['ignored'])} ignored (plan --json: inputs.config)",
    ]
    if v:
        fate = (
            "the plan's pick"
            if v.get("recommended")
            else "feasible, not the pick"
            if v.get("feasible")
            else f"not feasible: {v.get('why_not')}"
        )
        lines.append(f"  the config runs {v['strategy']}: {fate}")
    for a in section.get("assumed", ()):
        lines += textwrap.wrap(f"assumed {a}", 96, initial_indent="  ", subsequent_indent="    ")
    for o in section["overridden"]:
        lines.append(f"  {o['field']} = {o['value']!r}: {o['flag']} {o['planned']!r} wins")
    for f in section["ignored"]:
        if any(w in f.get("note", "") for w in ("not modelled", "ignored", "engine model runs")):
            lines += textwrap.wrap(
                f"ignored {f['field']}: {f['note']}", 96, initial_indent="  ", subsequent_indent="    "
            )
    return lines

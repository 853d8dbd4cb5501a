"""The doctor's vocabulary: a Finding, what is known about the job (Context), and how a
rules.toml rule becomes a finding: its `when` is matched against sets of possible values, and a
rule that needs an unknown fact may still fire when DOCTOR_RULES says it can be assumed, as a
warning that names what was assumed. The checks (launcher_checks, script_checks, live_checks,
config_checks, ...) import this module only; diagnose/doctor.py runs them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from prism_strategy.rules import get_rule
from prism_strategy.specs.cluster import PlatformSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.presets import load_platform, platform_names
from prism_strategy.strategies import StrategySpec, get_strategy

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[str, ...] = ("error", "warning", "info")

DOMAINS: dict[str, tuple[Any, ...]] = {
    "device": ("xpu", "cuda", "cpu"),
    "engine": ("ddp", "fsdp2", "deepspeed"),
    "reshard_or_sharded": (True, False),
    "multi_node": (True, False),
}
"""Context facts the doctor may not know, with every value they can take."""
_GROUP = {"device": "device", "engine": "strategy", "reshard_or_sharded": "strategy", "multi_node": "nodes"}
_ASSUMED_TEXT = {"device": "the job runs on XPU", "strategy": "the job shards parameters (FSDP/HSDP/ZeRO)",
                 "nodes": "the job spans several nodes"}


@dataclass(frozen=True, kw_only=True, slots=True)
class DoctorRule:
    severity: Severity
    """Severity when every fact is known."""
    assumable: frozenset[str] = frozenset()
    """Unknown fact groups (device, strategy, nodes) under which the rule still fires, as a warning."""


DOCTOR_RULES: dict[str, DoctorRule] = {
    "xpu-no-device-id": DoctorRule(severity="error", assumable=frozenset({"device"})),
    "find-unused-vs-static-graph": DoctorRule(severity="error"),
    "find-unused-cost": DoctorRule(severity="info"),
    "xpu-multinode-compile": DoctorRule(severity="warning", assumable=frozenset({"device", "nodes"})),
    "deepspeed-compile": DoctorRule(severity="error"),
    "xpu-empty-cache-fsdp": DoctorRule(severity="error", assumable=frozenset({"device"})),
    "fsdp-root-only-wrap": DoctorRule(severity="warning"),
    "dataloader-workers-after-mesh": DoctorRule(severity="error", assumable=frozenset({"device"})),
    "allreduce-one-element-probe": DoctorRule(severity="warning"),
    "launcher-export-before-module-load": DoctorRule(severity="error"),
    "launcher-no-per-rank-export": DoctorRule(severity="error", assumable=frozenset({"device"})),
    "launcher-ranks-per-node-mismatch": DoctorRule(severity="error"),
    "launcher-device-hierarchy-mismatch": DoctorRule(severity="error"),
    "launcher-rank-straddles-sockets": DoctorRule(severity="warning"),
    "launcher-queue-limits": DoctorRule(severity="error"),
    "launcher-missing-filesystems": DoctorRule(severity="error"),
    "stale-device-processes": DoctorRule(severity="error"),
    "env-differs-from-profile": DoctorRule(severity="warning"),
}
"""How the doctor reports each rules.toml rule: error = the run hangs, crashes or is refused;
warning = slower, fragile or not validated; info = worth knowing. xpu-multinode-compile is a
warning as plan, emit and wrap() give it, and an error only on the stack that deadlocked
(DEADLOCKED_COMPILE_STACK, script_checks._compile)."""

DEADLOCKED_COMPILE_STACK = ("this script is the stack that deadlocked: the model compiled whole (not per block) "
                            "under FSDP1 (FullyShardedDataParallel)")
"""Why the doctor calls multi-node compile on XPU an error for this stack only."""


def as_deadlocked_stack(f: Finding, facts: dict[str, tuple[Any, ...]]) -> Finding:
    """xpu-multinode-compile as an error naming the stack, when no fact had to be assumed."""
    rule = get_rule(f.rule)
    if f.rule != "xpu-multinode-compile" or evaluate(rule.when, facts, DOCTOR_RULES[f.rule].assumable) != set():
        return f
    return replace(f, severity="error", message=f"{f.message}; {DEADLOCKED_COMPILE_STACK}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    severity: Severity
    rule: str
    file: str
    line: int
    """1-based; 0 when the finding is about the environment or a process."""
    message: str
    fix: str
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "rule": self.rule, "file": self.file, "line": self.line,
                "message": self.message, "fix": self.fix, "source": self.source}


@dataclass(frozen=True, kw_only=True, slots=True)
class Context:
    """What is known about the job; None = unknown. Evidence fields narrow unknowns."""

    platform: PlatformSpec | None = None
    strategy: StrategySpec | None = None
    nodes: int | None = None
    devices_seen: frozenset[str] = frozenset()
    """Devices the files point at (a script mentioning xpu, a launcher loading frameworks)."""
    engines_seen: frozenset[str] = frozenset()
    env_profile: str | None = None
    launcher_env: tuple[tuple[str, str, str], ...] = ()
    """(name, value, launcher) the ranks surely run with, from the launchers given: what a
    script's os.environ.get(NAME, default) reads."""

    def facts(self) -> dict[str, tuple[Any, ...]]:
        s = self.strategy
        return {
            "device": (self.platform.device,) if self.platform else tuple(sorted(self.devices_seen)) or DOMAINS["device"],
            "engine": (s.engine,) if s else tuple(sorted(self.engines_seen)) or DOMAINS["engine"],
            "reshard_or_sharded": (s.sharded,) if s else self._sharded_seen(),
            "multi_node": (self.nodes > 1,) if self.nodes else DOMAINS["multi_node"],
        }

    def _sharded_seen(self) -> tuple[bool, ...]:
        """FSDP always shards, DDP never; DeepSpeed depends on the stage."""
        by_engine = {"fsdp2": {True}, "ddp": {False}, "deepspeed": {True, False}}
        seen = set().union(*(by_engine[e] for e in self.engines_seen)) if self.engines_seen else {True, False}
        return tuple(sorted(seen, reverse=True))

    def refined(self, *, platform: str | None = None, strategy: str | None = None, nodes: int | None = None,
                devices: frozenset[str] = frozenset(), engines: frozenset[str] = frozenset(),
                env_profile: str | None = None) -> "Context":
        """Fill only what is still unknown (explicit options win over what files say)."""
        ctx = self
        if platform and ctx.platform is None and platform in platform_names():
            ctx = replace(ctx, platform=load_platform(platform))
        if strategy and ctx.strategy is None:
            try:
                ctx = replace(ctx, strategy=get_strategy(strategy))
            except SpecError:
                pass
        if nodes and ctx.nodes is None:
            ctx = replace(ctx, nodes=nodes)
        if env_profile and ctx.env_profile is None:
            ctx = replace(ctx, env_profile=env_profile)
        return replace(ctx, devices_seen=ctx.devices_seen | devices, engines_seen=ctx.engines_seen | engines)


def evaluate(when: dict[str, Any], facts: dict[str, tuple[Any, ...]], assumable: frozenset[str]) -> set[str] | None:
    """None: the rule does not fire. Else the fact group it had to assume (empty = certain);
    at most one unknown group may be assumed, and only one listed in `assumable`."""
    assumed: set[str] = set()
    for key, want in when.items():
        if key not in facts:
            return None
        wanted = want if isinstance(want, list) else [want]
        options = facts[key]
        hits = [o for o in options if o in wanted]
        if not hits:
            return None
        if len(hits) < len(options):
            assumed.add(_GROUP.get(key, key))
    return assumed if assumed <= assumable and len(assumed) <= 1 else None


def check_rule(rule_id: str, facts: dict[str, tuple[Any, ...]], *, file: str, line: int, detail: str) -> list[Finding]:
    """A finding for a rules.toml rule when its `when` holds for these facts."""
    rule = get_rule(rule_id)
    how = DOCTOR_RULES[rule_id]
    assumed = evaluate(rule.when, facts, how.assumable)
    if assumed is None:
        return []
    return [make_finding(rule_id, how.severity, assumed, file=file, line=line, detail=detail,
                         reason=rule.reason, fix=rule.fix, source=rule.source)]


def make_finding(rule_id: str, severity: Severity, assumed: set[str], *, file: str, line: int, detail: str,
                 reason: str, fix: str, source: str) -> Finding:
    message = f"{detail}: {reason}" if detail else reason
    if assumed:
        severity = "warning" if severity == "error" else severity
        what = " and ".join(_ASSUMED_TEXT[g] for g in sorted(assumed))
        message += f" (applies if {what}; pass --platform/--strategy/--nodes to be sure)"
    return Finding(severity=severity, rule=rule_id, file=file, line=line, message=message, fix=fix, source=source)


def check_observed(observed: dict[str, Any], ctx: Context, *, file: str, line: int, detail: str) -> list[Finding]:
    """Every doctor rule whose `when` names a fact the check observed (not a context fact:
    device, engine, ...), evaluated with the context's facts: rules.toml decides which apply
    (compile=True meets both deepspeed-compile and xpu-multinode-compile)."""
    facts = context_facts(ctx, **observed)
    seen = set(observed) - set(DOMAINS)
    return [f for r in DOCTOR_RULES if set(get_rule(r).when) & seen
            for f in check_rule(r, facts, file=file, line=line, detail=detail)]


def context_facts(ctx: Context, **known: Any) -> dict[str, tuple[Any, ...]]:
    """The context's facts plus facts a check established (each a single known value)."""
    facts = ctx.facts()
    facts.update({k: (v,) for k, v in known.items()})
    return facts


HEADER = re.compile(r"^# prism-strategy emit:(.*)$", re.M)
"""First-lines comment of every emitted file: platform=, strategy=, nodes=, env-profile=."""


def parse_header(text: str) -> dict[str, str]:
    m = HEADER.search("\n".join(text.splitlines()[:10]))
    return dict(kv.split("=", 1) for kv in m.group(1).split() if "=" in kv) if m else {}



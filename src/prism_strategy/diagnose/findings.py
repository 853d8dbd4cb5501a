"""The doctor's vocabulary: a Finding, what is known about the job (Context), and how the
rules.toml rules become findings. A check reports what it observed as rule facts
(`passes_device_id=True`, `ranks_per_node_matches=False`, with file, line and detail) to
`check_observed`, which evaluates every doctor rule (one with a `doctor` table in rules.toml)
whose `when` names one of those facts: its `when` is matched against sets of possible values,
and a rule that needs an unknown fact may still fire when its `doctor.assume` allows, as a
warning that names what was assumed. No check names a rule: a new rule on an existing fact is
data only. The checks (launcher_checks, script_checks, live_checks, config_checks, ...) import
this module only; diagnose/doctor.py runs them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from prism_strategy import rules
from prism_strategy.rules import Rule, Severity
from prism_strategy.specs.cluster import PlatformSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.presets import load_platform, platform_names
from prism_strategy.strategies import StrategySpec, get_strategy

SEVERITIES: tuple[str, ...] = ("error", "warning", "info")

DOMAINS: dict[str, tuple[Any, ...]] = {
    "device": ("xpu", "cuda", "cpu"),
    "engine": ("ddp", "fsdp2", "deepspeed"),
    "reshard_or_sharded": (True, False),
    "multi_node": (True, False),
}
"""Context facts the doctor may not know, with every value they can take."""
_GROUP = {"device": "device", "engine": "strategy", "reshard_or_sharded": "strategy", "multi_node": "nodes"}
_ASSUMED_TEXT = {
    "device": "the job runs on XPU",
    "strategy": "the job shards parameters (FSDP/HSDP/ZeRO)",
    "nodes": "the job spans several nodes",
}


def doctor_rules() -> tuple[Rule, ...]:
    """The rules.toml rules the doctor reports (those with a `doctor` table), in file order."""
    return tuple(r for r in rules.load_rules() if r.doctor is not None)


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
        return {
            "severity": self.severity,
            "rule": self.rule,
            "file": self.file,
            "line": self.line,
            "message": self.message,
            "fix": self.fix,
            "source": self.source,
        }


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
    script_argv: tuple[tuple[str, tuple[str, ...], str, int], ...] = ()
    """(script file name, its arguments, launcher, line) of every launch of a .py in the launchers
    given: what the script's argparse reads (diagnose/launch_flags.py)."""
    pmi_launches: tuple[tuple[str, str, str, int], ...] = ()
    """(script file name, launcher command, launcher file, line) of every srun / mpiexec launch of a
    .py in a launcher that exports none of RANK / WORLD_SIZE / MASTER_ADDR: those launchers set
    only their own variables (SLURM_PROCID, PMI_RANK, ...), which torch's env:// does not read."""

    def facts(self) -> dict[str, tuple[Any, ...]]:
        s = self.strategy
        return {
            "device": (self.platform.device,)
            if self.platform
            else tuple(sorted(self.devices_seen)) or DOMAINS["device"],
            "engine": (s.engine,) if s else tuple(sorted(self.engines_seen)) or DOMAINS["engine"],
            "reshard_or_sharded": (s.sharded,) if s else self._sharded_seen(),
            "multi_node": (self.nodes > 1,) if self.nodes else DOMAINS["multi_node"],
        }

    def _sharded_seen(self) -> tuple[bool, ...]:
        """FSDP always shards, DDP never; DeepSpeed depends on the stage."""
        by_engine = {"fsdp2": {True}, "ddp": {False}, "deepspeed": {True, False}}
        seen = set().union(*(by_engine[e] for e in self.engines_seen)) if self.engines_seen else {True, False}
        return tuple(sorted(seen, reverse=True))

    def refined(
        self,
        *,
        platform: str | None = None,
        strategy: str | None = None,
        nodes: int | None = None,
        devices: frozenset[str] = frozenset(),
        engines: frozenset[str] = frozenset(),
        env_profile: str | None = None,
    ) -> "Context":
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


def make_finding(
    rule_id: str,
    severity: Severity,
    assumed: set[str],
    *,
    file: str,
    line: int,
    detail: str,
    reason: str,
    fix: str,
    source: str,
) -> Finding:
    message = f"{detail}: {reason}" if detail else reason
    if assumed:
        severity = "warning" if severity == "error" else severity
        what = " and ".join(_ASSUMED_TEXT[g] for g in sorted(assumed))
        message += f" (applies if {what}; pass --platform/--strategy/--nodes to be sure)"
    return Finding(severity=severity, rule=rule_id, file=file, line=line, message=message, fix=fix, source=source)


def check_observed(
    observed: dict[str, Any], ctx: Context | None, *, file: str, line: int, detail: str
) -> list[Finding]:
    """The findings for what a check observed (rule facts; context facts such as engine may
    sharpen the context's): every doctor rule whose `when` names an observed fact that is not a
    context fact, evaluated with the context's facts, so rules.toml decides which apply
    (compile=True meets both deepspeed-compile and xpu-multinode-compile). A rule whose `when`
    another firing rule's `when` holds, and more, is left to that one (find-unused-cost gives
    way to find-unused-vs-static-graph)."""
    facts = context_facts(ctx or Context(), **observed)
    seen = set(observed) - set(DOMAINS)
    fired = [
        (r, a)
        for r in doctor_rules()
        if set(r.when) & seen and (a := evaluate(r.when, facts, frozenset(r.doctor.assume))) is not None
    ]
    return [
        make_finding(
            r.id,
            r.doctor.severity,
            assumed,
            file=file,
            line=line,
            detail=detail,
            reason=r.reason,
            fix=r.fix,
            source=r.source,
        )
        for r, assumed in fired
        if not any(_says_more(o.when, r.when) for o, _ in fired)
    ]


def _says_more(specific: dict[str, Any], general: dict[str, Any]) -> bool:
    """`specific` holds every condition of `general`, and more."""
    return len(specific) > len(general) and all(k in specific and specific[k] == v for k, v in general.items())


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

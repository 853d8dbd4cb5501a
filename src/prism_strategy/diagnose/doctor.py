"""The doctor: find the launch mistakes that lose runs, in the live environment, in launchers
and in training scripts. Diagnosis returns dataclasses (Finding); only report/ renders them.

Checks extract facts (`passes_device_id`, `per_rank_exports`, ...) and the rules in
data/rules.toml (or data/env_profiles/_known_bad.toml) decide. What the doctor cannot know
(the device, the strategy, the node count) comes from --platform / --strategy / --nodes, from the
header of an emitted file, or from evidence in the files; a rule that needs an unknown fact may
still fire when this table says it can be assumed, as a warning that names what was assumed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from prism_strategy.rules import get_rule
from prism_strategy.runtime.strategy_file import StrategyFile, read_strategy_file
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
    "xpu-multinode-compile": DoctorRule(severity="error", assumable=frozenset({"device", "nodes"})),
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
warning = slower, fragile or not validated; info = worth knowing."""


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


# --- strategy.toml and ds_config.json: what the launch hands to wrap() / DeepSpeed -----------
def _key_line(text: str, key: str) -> int:
    m = re.search(rf"^\s*\"?{re.escape(key)}\"?\s*[=:]", text, re.M)
    return text.count("\n", 0, m.start()) + 1 if m else 1


@dataclass(frozen=True, kw_only=True, slots=True)
class StrategyTomlFile:
    path: Path
    text: str
    header: dict[str, str]
    settings: "StrategyFile"

    @classmethod
    def read(cls, path: Path, text: str) -> "StrategyTomlFile":
        return cls(path=path, text=text, header=parse_header(text), settings=read_strategy_file(path))

    def refine(self, ctx: Context) -> Context:
        h = self.header
        return ctx.refined(platform=h.get("platform"), strategy=self.settings.strategy,
                           nodes=int(h["nodes"]) if h.get("nodes", "").isdigit() else None)

    def check(self, ctx: Context) -> list[Finding]:
        s, f = self.settings, str(self.path)
        engine = get_strategy(s.strategy).engine
        facts = context_facts(ctx, engine=engine, compile=s.compile, find_unused_parameters=s.find_unused_parameters,
                              static_graph=bool(s.static_graph))
        out = check_rule("find-unused-vs-static-graph", facts, file=f, line=_key_line(self.text, "find_unused_parameters"),
                         detail="find_unused_parameters = true with static_graph = true")
        if not out:
            out = check_rule("find-unused-cost", facts, file=f, line=_key_line(self.text, "find_unused_parameters"),
                             detail="find_unused_parameters = true")
        where = dict(file=f, line=_key_line(self.text, "compile"), detail=f"compile = true with {s.strategy}")
        out += check_rule("deepspeed-compile", facts, **where) + check_rule("xpu-multinode-compile", facts, **where)
        if ctx.platform is not None and s.ranks_per_node is not None:
            want = ctx.platform.devices_per_node
            out += check_rule("launcher-ranks-per-node-mismatch", {"ranks_per_node_matches": (s.ranks_per_node == want,)},
                              file=f, line=_key_line(self.text, "ranks_per_node"),
                              detail=f"ranks_per_node = {s.ranks_per_node}, {ctx.platform.name} has {want} devices per node")
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class DsConfigFile:
    path: Path
    text: str
    config: dict

    @classmethod
    def read(cls, path: Path, text: str) -> "DsConfigFile":
        try:
            cfg = json.loads(text)
        except json.JSONDecodeError as e:
            raise SpecError(f"{path} is not valid JSON (line {e.lineno}: {e.msg})") from None
        if not isinstance(cfg, dict):
            raise SpecError(f"{path} is not a DeepSpeed config (expected a JSON object)")
        return cls(path=path, text=text, config=cfg)

    def refine(self, ctx: Context) -> Context:
        return ctx.refined(engines=frozenset({"deepspeed"}))

    def check(self, ctx: Context) -> list[Finding]:
        section = self.config.get("compile")
        on = bool(section) and (not isinstance(section, dict) or any(v is True for v in section.values()))
        if not on:
            return []
        return check_rule("deepspeed-compile", context_facts(ctx, engine="deepspeed", compile=True), file=str(self.path),
                          line=_key_line(self.text, "compile"), detail="the DeepSpeed config enables compile")


# --- the report ------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True, slots=True)
class DoctorReport:
    findings: list[Finding]
    environment: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return 1 if any(f.severity == "error" for f in self.findings) else 0

    def counts(self) -> dict[str, int]:
        return {s: sum(f.severity == s for f in self.findings) for s in SEVERITIES}

    def to_dict(self) -> dict[str, Any]:
        return {"findings": [f.to_dict() for f in self.findings], "environment": self.environment,
                "summary": self.counts()}


@dataclass(frozen=True, kw_only=True, slots=True)
class DoctorRequest:
    launchers: tuple[Path, ...] = ()
    """Shell launchers, and also strategy.toml / ds_config.json files."""
    scripts: tuple[Path, ...] = ()
    platform: str | None = None
    strategy: str | None = None
    nodes: int | None = None
    env_profile: str | None = None
    live: bool | None = None
    """None: check the live environment only when no file is given."""
    clean: bool = False
    settle_s: float = 10.0
    device_globs: tuple[str, ...] = ()
    """Device files a leftover process holds; () = the default /dev/dri, /dev/nvidia* set."""
    module_show: tuple[Path, ...] = ()
    """`module show` output files: what each module load sets, exactly."""


def diagnose(req: DoctorRequest) -> DoctorReport:
    """Run every check the request asks for; SpecError for bad input (unreadable file, bad name)."""
    from prism_strategy.diagnose import launcher_checks, live_checks, modules, script_checks

    if req.nodes is not None and req.nodes < 1:
        raise SpecError(f"--nodes must be >= 1, got {req.nodes}")
    ctx = Context(platform=load_platform(req.platform) if req.platform else None,
                  strategy=get_strategy(req.strategy) if req.strategy else None, nodes=req.nodes,
                  env_profile=req.env_profile)
    shown = tuple(m for p in req.module_show for m in modules.read_module_show(p))
    launchers = [launcher_checks.read_launcher(p, shown) for p in req.launchers]
    scripts = [script_checks.read_script(p) for p in req.scripts]
    for item in (*launchers, *scripts):
        ctx = item.refine(ctx)
    findings: list[Finding] = []
    for item in (*launchers, *scripts):
        findings += item.check(ctx)
    environment: dict[str, Any] = {}
    if req.live or (req.live is None and not req.launchers and not req.scripts):
        live = live_checks.check_live(ctx, clean=req.clean, settle_s=req.settle_s, device_globs=req.device_globs)
        findings += live.findings
        environment = live.environment
    order = {s: i for i, s in enumerate(SEVERITIES)}
    findings.sort(key=lambda f: (order[f.severity], f.file, f.line, f.rule))
    return DoctorReport(findings=findings, environment=environment)

"""Live checks: this machine's torch, backends and devices, the CCL / FI / NCCL / TORCH variables
set now against the env profile, known-bad values, and leftover processes of this user that
still hold devices (read from /proc; `--clean` ends exactly those, by PID, then waits).
"""

from __future__ import annotations

import fnmatch
import os
import signal
import time
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any, Literal

from prism_strategy.diagnose.findings import (
    Context,
    Finding,
    Severity,
    check_observed,
    context_facts,
    evaluate,
    make_finding,
)
from prism_strategy.emit.env import load_env_profile
from prism_strategy.rules import Rule, get_rule
from prism_strategy.specs.libraries import backend_names, collective_prefixes, runtime_prefixes
from prism_strategy.specs.presets import DATA, build, read_toml

DEVICE_GLOBS: tuple[str, ...] = ("/dev/dri/renderD*", "/dev/dri/card*", "/dev/nvidia[0-9]*", "/dev/accel/accel*")
LAUNCHER_NAMES = frozenset({"torchrun", "mpiexec", "mpirun", "deepspeed", "srun", "aprun"})
ENV_PREFIXES = (*collective_prefixes(), "TORCH_", *runtime_prefixes(), "LD_PRELOAD")
TERM_GRACE_S = 5.0
PROC = Path("/proc")


@dataclass(frozen=True, kw_only=True, slots=True)
class LiveResult:
    findings: list[Finding]
    environment: dict[str, Any] = field(default_factory=dict)


# --- known-bad environment (data/env_profiles/_known_bad.toml) -------------------------------
@dataclass(frozen=True, kw_only=True, slots=True)
class KnownBadVar:
    id: str
    var: str
    test: Literal["gt", "eq", "set", "contains"]
    value: str = ""
    severity: Severity
    rule: str | None = None
    """Take reason, fix, source and `when` from this rules.toml rule."""
    fact: str | None = None
    """The fact of that rule a hit establishes (e.g. preloads_pil4dfs)."""
    when: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    fix: str = ""
    source: str = ""

    def hits(self, value: str) -> bool:
        if self.test == "set":
            return True
        if self.test == "eq":
            return value.strip() == self.value
        if self.test == "contains":
            return self.value in value
        try:
            return int(value.strip()) > int(self.value)
        except ValueError:
            return False

    def resolved(self) -> "KnownBadVar":
        if self.rule is None:
            return self
        r: Rule = get_rule(self.rule)
        return replace(self, when=r.when, reason=r.reason, fix=r.fix, source=r.source)


@dataclass(frozen=True, kw_only=True, slots=True)
class KnownBadModule:
    id: str
    pattern: str
    severity: Severity
    reason: str
    fix: str
    source: str


@dataclass(frozen=True, kw_only=True, slots=True)
class KnownBad:
    tracked_prefixes: tuple[str, ...]
    bad: tuple[KnownBadVar, ...] = ()
    module: tuple[KnownBadModule, ...] = ()

    def is_tracked(self, name: str) -> bool:
        return name.startswith(self.tracked_prefixes)


@cache
def load_known_bad() -> KnownBad:
    kb = build(KnownBad, read_toml(DATA / "env_profiles" / "_known_bad.toml"), "env_profiles/_known_bad.toml")
    return replace(kb, bad=tuple(b.resolved() for b in kb.bad))


def check_env_values(values: dict[str, tuple[str, str, int]], ctx: Context) -> list[Finding]:
    """Known-bad variables among `values` (name -> (value, file, line))."""
    out = []
    for bad in load_known_bad().bad:
        if bad.var not in values or not bad.hits(values[bad.var][0]):
            continue
        value, file, line = values[bad.var]
        facts = context_facts(ctx, **({bad.fact: True} if bad.fact else {}))
        assumed = evaluate(bad.when, facts, frozenset({"device", "strategy"}))
        if assumed is not None:
            out.append(
                make_finding(
                    bad.id,
                    bad.severity,
                    assumed,
                    file=file,
                    line=line,
                    detail=f"{bad.var}={value}",
                    reason=bad.reason,
                    fix=bad.fix,
                    source=bad.source,
                )
            )
    return out


def check_modules(modules: list[tuple[str, str, int]]) -> list[Finding]:
    """Known-bad module versions among (module, file, line)."""
    return [
        make_finding(
            m.id,
            m.severity,
            set(),
            file=file,
            line=line,
            detail=f"module {name}",
            reason=m.reason,
            fix=m.fix,
            source=m.source,
        )
        for m in load_known_bad().module
        for name, file, line in modules
        if m.pattern in name
    ]


def check_live(ctx: Context, *, clean: bool, settle_s: float, device_globs: tuple[str, ...] = ()) -> LiveResult:
    env = dict(os.environ)
    facts = torch_facts()
    if ctx.platform is None and facts["device"]:
        ctx = ctx.refined(devices=frozenset({facts["device"]}))
    values = {k: (v, "<environment>", 0) for k, v in env.items()}
    findings = check_env_values(values, ctx)
    modules = [(m, "<environment>", 0) for m in env.get("LOADEDMODULES", "").split(":") if m]
    findings += check_modules(modules)
    profile_info, profile_findings = compare_profile(env, ctx)
    findings += profile_findings
    stale = find_stale_processes(device_globs or DEVICE_GLOBS)
    findings += _process_findings(stale, clean=clean, settle_s=settle_s)
    environment = {
        **facts,
        "modules": [m for m, _, _ in modules],
        "profile": profile_info,
        "variables": {k: v for k, v in sorted(env.items()) if k.startswith(ENV_PREFIXES)},
        "stale_processes": [p.pid for p in stale],
    }
    return LiveResult(findings=findings, environment=environment)


def torch_facts() -> dict[str, Any]:
    """torch version, distributed backends, device counts, oneCCL / XCCL version where visible."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is a dependency
        return {"torch": None, "backends": [], "device": None, "device_count": 0}
    backends = [
        b
        for b, probe in (
            *((name, f"is_{name}_available") for name in backend_names()),
            ("mpi", "is_mpi_available"),
        )
        if dist.is_available() and getattr(dist, probe, lambda: False)()
    ]
    xpu = torch.xpu.device_count() if hasattr(torch, "xpu") and torch.xpu.is_available() else 0
    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    device = "xpu" if xpu else "cuda" if cuda else None
    out: dict[str, Any] = {
        "torch": torch.__version__,
        "backends": backends,
        "device": device,
        "device_count": xpu or cuda,
        "xpu_runtime": getattr(torch.version, "xpu", None),
        "oneccl_root": os.environ.get("CCL_ROOT"),
    }
    if cuda:
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    return out


def compare_profile(env: dict[str, str], ctx: Context) -> tuple[dict[str, Any], list[Finding]]:
    """The chosen profile's variables: which are set now, missing, or set to another value."""
    name = ctx.env_profile or (ctx.platform.env_profile if ctx.platform else None)
    if not name:
        return {"name": None}, []
    profile = load_env_profile(name)
    want = profile.values_for(ctx.platform.name if ctx.platform else "")
    flagged = {b.var for b in load_known_bad().bad if b.var in env and b.hits(env[b.var])}  # reported already
    differs = {
        k: {"now": env[k], "profile": v} for k, v in want.items() if k in env and env[k] != v and k not in flagged
    }
    info = {
        "name": profile.name,
        "set": sorted(k for k in want if env.get(k) == want[k]),
        "missing": sorted(k for k in want if k not in env),
        "differs": differs,
    }
    findings = [
        f
        for k, d in differs.items()
        for f in check_observed(
            {"differs_from_profile": True},
            ctx,
            file="<environment>",
            line=0,
            detail=f"{k}={d['now']} but profile {profile.name} sets {d['profile']}",
        )
    ]
    return info, findings


# --- leftover processes ----------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True, slots=True)
class StaleProcess:
    pid: int
    start: str
    """Start time from /proc/PID/stat, so a reused PID is never signalled."""
    cmdline: str
    holds: tuple[str, ...]


def _ppid_map() -> dict[int, int]:
    out = {}
    for d in PROC.iterdir():
        if d.name.isdigit():
            try:
                out[int(d.name)] = int(_stat_fields(int(d.name))[1])
            except (OSError, IndexError, ValueError):
                continue
    return out


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat fields after the command name: [state, ppid, ..., starttime at 19]."""
    raw = (PROC / str(pid) / "stat").read_text()
    return raw[raw.rindex(")") + 2 :].split()


def own_tree(ppids: dict[int, int]) -> set[int]:
    """This process, its ancestors and its descendants: never listed, never signalled."""
    me = os.getpid()
    tree, p = {me}, me
    while p in ppids and ppids[p] not in tree and ppids[p] > 0:
        p = ppids[p]
        tree.add(p)
    frontier = [me]
    while frontier:
        parent = frontier.pop()
        kids = [c for c, pp in ppids.items() if pp == parent and c not in tree]
        tree.update(kids)
        frontier += kids
    return tree


def _held_devices(pid: int, globs: tuple[str, ...]) -> tuple[str, ...]:
    held = set()
    fd_dir = PROC / str(pid) / "fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return ()
    for fd in fds:
        try:
            target = os.readlink(fd_dir / fd)
        except OSError:
            continue
        if any(fnmatch.fnmatch(target, g) for g in globs):
            held.add(target)
    return tuple(sorted(held))


def _describe(pid: int) -> tuple[str, str] | None:
    try:
        if (PROC / str(pid)).stat().st_uid != os.getuid():
            return None
        cmd = (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        fields = _stat_fields(pid)
    except (OSError, ValueError):
        return None
    return None if fields[0] == "Z" else (cmd, fields[19])


def find_stale_processes(globs: tuple[str, ...]) -> list[StaleProcess]:
    """This user's processes (outside the doctor's own tree) that hold a device file, plus the
    launcher (torchrun, mpiexec, ...) that started each, when it is still there."""
    ppids = _ppid_map()
    skip = own_tree(ppids)
    found: dict[int, StaleProcess] = {}
    for pid in sorted(ppids):
        if pid in skip or (desc := _describe(pid)) is None:
            continue
        holds = _held_devices(pid, globs)
        if holds:
            found[pid] = StaleProcess(pid=pid, start=desc[1], cmdline=desc[0], holds=holds)
    for p in list(found.values()):
        parent = ppids.get(p.pid, 0)
        desc = _describe(parent) if parent > 1 and parent not in skip else None
        if desc and Path(desc[0].split(" ")[0]).name in LAUNCHER_NAMES:
            found.setdefault(parent, StaleProcess(pid=parent, start=desc[1], cmdline=desc[0], holds=()))
    return [found[k] for k in sorted(found)]


def _alive(p: StaleProcess) -> bool:
    desc = _describe(p.pid)
    return desc is not None and desc[1] == p.start


def end_processes(procs: list[StaleProcess], *, grace_s: float = TERM_GRACE_S) -> list[StaleProcess]:
    """SIGTERM each, SIGKILL what is left after grace_s; returns the ones still alive."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in procs:
            if _alive(p):
                try:
                    os.kill(p.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        deadline = time.monotonic() + grace_s
        while any(_alive(p) for p in procs) and time.monotonic() < deadline:
            time.sleep(0.05)
    return [p for p in procs if _alive(p)]


def _process_findings(stale: list[StaleProcess], *, clean: bool, settle_s: float) -> list[Finding]:
    def one(p: StaleProcess, what: str) -> list[Finding]:
        held = f" holds {', '.join(p.holds)}" if p.holds else " launched a process that holds a device"
        return check_observed(
            {"stale_device_processes": True},
            None,
            file=f"<process {p.pid}>",
            line=0,
            detail=f"PID {p.pid} ({p.cmdline[:120]}){held}{what}",
        )

    if not clean or not stale:
        return [f for p in stale for f in one(p, "")]
    survivors = end_processes(stale)
    if settle_s > 0:
        time.sleep(settle_s)
    ended = [p for p in stale if p not in survivors]
    out = [f for p in survivors for f in one(p, ": still alive after SIGTERM and SIGKILL")]
    out += [
        replace(
            f,
            severity="info",
            fix="relaunch the job",
            source="DOMAIN 4",
            message=f"ended PID {p.pid} ({p.cmdline[:120]}), then waited {settle_s:g} s for device state to settle",
        )
        for p in ended
        for f in one(p, "")
    ]
    return out

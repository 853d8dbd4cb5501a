"""Launcher checks against the site: PBS queue limits and required filesystems (the platform
file's [launch] and [[queues]], as `emit` uses them), the Level Zero device hierarchy against
the ranks per node, and CPU bindings that split a rank over two sockets.

The platform comes from --platform or the emitted header; without it, from the device the
launcher points at (frameworks / CCL -> Aurora, NCCL -> Polaris) or every PBS platform we know,
and a finding fires only when every candidate agrees (a warning that names the assumption).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING

from prism_strategy.diagnose.findings import Context, Finding, check_observed
from prism_strategy.emit.site import SiteSpec
from prism_strategy.emit.site import load_site as _load_site
from prism_strategy.specs.cluster import PlatformSpec
from prism_strategy.specs.presets import load_platform, platform_names

if TYPE_CHECKING:
    from prism_strategy.diagnose.launcher_checks import LauncherFile

_PBS = re.compile(r"^#PBS\s+(.*)$")


@cache
def _preset_site(name: str) -> SiteSpec:
    return _load_site(name)


def load_site(name: str) -> SiteSpec:
    """The platform's site (queues, filesystems, sockets); a preset's is read once per process."""
    return _preset_site(name) if name in platform_names() else _load_site(name)


@dataclass(frozen=True, kw_only=True, slots=True)
class PbsDirectives:
    """What the #PBS lines ask for: value and line of select, walltime, filesystems, queue."""

    values: dict[str, tuple[str, int]]

    @classmethod
    def read(cls, text: str) -> "PbsDirectives":
        out: dict[str, tuple[str, int]] = {}
        for n, line in enumerate(text.splitlines(), start=1):
            m = _PBS.match(line.strip())
            if not m:
                continue
            try:
                words = shlex.split(m.group(1), comments=True)
            except ValueError:
                continue
            for flag, value in zip(words, words[1:]):
                if flag == "-q":
                    out["queue"] = (value, n)
                elif flag == "-l":
                    for item in value.split(","):
                        key, _, val = item.partition("=")
                        if key in ("select", "walltime", "filesystems"):
                            out[key] = (val.split(":", 1)[0] if key == "select" else val, n)
        return cls(values=out)

    @property
    def present(self) -> bool:
        return bool(self.values)

    def get(self, key: str) -> str | None:
        return self.values[key][0] if key in self.values else None

    def line(self, key: str, default: int = 1) -> int:
        return self.values[key][1] if key in self.values else default


def _candidates(lf: "LauncherFile", ctx: Context) -> tuple[list[tuple[PlatformSpec, SiteSpec]], bool]:
    """(platform, site) pairs the launcher may run on, and whether that is certain."""
    if ctx.platform is not None:
        return [(ctx.platform, load_site(ctx.platform.name))], True
    pbs = [load_platform(n) for n in platform_names() if load_platform(n).launcher == "pbs"]
    seen = ctx.devices_seen
    pool = [p for p in pbs if p.device in seen] if seen else pbs
    certain = bool(seen) and len({p.device for p in pool}) == 1
    return [(p, load_site(p.name)) for p in pool if load_site(p.name).queues or load_site(p.name).filesystems], certain


def _finding(
    observed: dict[str, bool], ctx: Context, certain: bool, names: list[str], *, file: str, line: int, detail: str
) -> list[Finding]:
    """Certain: the rule's own severity. Assumed platform: at most a warning, naming the candidates."""
    if certain:
        return check_observed(observed, ctx, file=file, line=line, detail=detail)
    detail = f"{detail} (applies on {', '.join(sorted(set(names)))}; pass --platform to be sure)"
    return [
        replace(f, severity="warning") if f.severity == "error" else f
        for f in check_observed(observed, ctx, file=file, line=line, detail=detail)
    ]


def check_site(lf: "LauncherFile", ctx: Context) -> list[Finding]:
    out = []
    for check in (_queue_limits, _filesystems, _device_hierarchy, _socket_straddle):
        out += check(lf, ctx)
    return out


def _queue_limits(lf: "LauncherFile", ctx: Context) -> list[Finding]:
    pbs = lf.pbs
    queue = pbs.get("queue")
    if queue is None:
        return []
    nodes = lf.nodes()
    cands, certain = _candidates(lf, ctx)
    problems = [
        (p.name, site.problems(queue, nodes, pbs.get("walltime"))) for p, site in cands if queue in site.queue_names()
    ]
    if not problems or not all(found for _, found in problems):
        return []
    detail = "; ".join(dict.fromkeys(x for _, found in problems for x in found))
    return _finding(
        {"queue_fits": False},
        ctx,
        certain,
        [n for n, _ in problems],
        file=str(lf.path),
        line=pbs.line("queue"),
        detail=detail,
    )


def _filesystems(lf: "LauncherFile", ctx: Context) -> list[Finding]:
    pbs = lf.pbs
    if not pbs.present or pbs.get("filesystems"):
        return []
    cands, certain = _candidates(lf, ctx)
    needing = [(p.name, site.filesystems) for p, site in cands if site.filesystems]
    if not needing or len(needing) < len(cands):
        return []
    by_fs: dict[str, list[str]] = {}
    for n, fs in needing:
        by_fs.setdefault(fs, []).append(n)
    want = " or ".join(f"-l filesystems={fs} ({', '.join(ns)})" for fs, ns in by_fs.items())
    return _finding(
        {"names_filesystems": False},
        ctx,
        certain,
        [n for n, _ in needing],
        file=str(lf.path),
        line=min(n for _, n in pbs.values.values()),
        detail=f"no #PBS -l filesystems= line; the job needs e.g. {want}",
    )


HIERARCHY_PLATFORMS = {"FLAT": "aurora", "COMPOSITE": "aurora-composite"}
"""ZE_FLAT_DEVICE_HIERARCHY value -> the platform preset whose devices_per_node it gives."""


def _device_hierarchy(lf: "LauncherFile", ctx: Context) -> list[Finding]:
    env = lf.final_env()
    rpn = lf.ranks_per_node()
    if "ZE_FLAT_DEVICE_HIERARCHY" not in env or rpn is None:
        return []
    if ctx.platform is not None and ctx.platform.hardware.devices_per_node != rpn:
        return []  # launcher-ranks-per-node-mismatch already says it
    value, file, line = env["ZE_FLAT_DEVICE_HIERARCHY"]
    preset = HIERARCHY_PLATFORMS.get(value.strip().strip('"').upper())
    if preset is None:
        return []
    devices = load_platform(preset).hardware.devices_per_node
    return check_observed(
        {"hierarchy_matches_ranks": devices == rpn},
        ctx,
        file=file,
        line=line,
        detail=f"ZE_FLAT_DEVICE_HIERARCHY={value} shows {devices} devices per node, the launch "
        f"runs {rpn} ranks per node",
    )


def _socket_straddle(lf: "LauncherFile", ctx: Context) -> list[Finding]:
    if lf.launch is None:
        return []
    bind = lf.cpu_bind()
    rpn = lf.ranks_per_node()
    if bind is None or rpn is None:
        return []
    cands, certain = (
        _candidates(lf, ctx) if ctx.platform is None else ([(ctx.platform, load_site(ctx.platform.name))], True)
    )
    if not certain or not cands:
        return []
    platform, site = cands[0]
    cores, sockets = platform.hardware.cpu_cores_per_node, site.sockets
    if cores <= 0 or sockets < 2:
        return []
    per_socket = cores // sockets
    for rank, rank_cores in enumerate(rank_core_sets(bind, rpn)):
        used = sorted({(c % cores) // per_socket for c in rank_cores})
        if len(used) > 1:
            first, last = min(rank_cores), max(rank_cores)
            return check_observed(
                {"rank_straddles_sockets": True},
                ctx,
                file=lf.launch.file,
                line=lf.launch.line,
                detail=f"--cpu-bind {re.sub(r'^depth:', 'depth -d ', bind)} at {rpn} ranks per node "
                f"puts local rank {rank} on cores {first}-{last}, across sockets {used[0]} "
                f"and {used[-1]} ({platform.name}: {sockets} x {per_socket} cores)",
            )
    return []


MAX_CORE = 4096
"""Bindings naming cores (or ranks) beyond this are not read: no node has that many."""


def rank_core_sets(bind: str, ranks_per_node: int) -> list[set[int]]:
    """The cores each local rank gets from an mpiexec --cpu-bind value (depth:D or list:...);
    [] when the value does not say (core, numa, none, or something unreadable)."""
    if not 0 < ranks_per_node <= MAX_CORE:
        return []
    spec = re.sub(r"^verbose,", "", bind)
    m = re.fullmatch(r"depth:(\d+)", spec)
    if m:
        d = int(m.group(1))
        return [set(range(r * d, r * d + d)) for r in range(ranks_per_node)] if d * ranks_per_node <= MAX_CORE else []
    if not spec.startswith("list:"):
        return []
    blocks = []
    for block in spec[5:].split(":"):
        cores: set[int] = set()
        for item in block.split(","):
            a, _, b = item.partition("-")
            if not a.isdigit() or (b and not b.isdigit()) or int(b or a) > MAX_CORE:
                return []
            cores |= set(range(int(a), int(b or a) + 1))
        blocks.append(cores)
    return [blocks[r % len(blocks)] for r in range(ranks_per_node)] if blocks else []

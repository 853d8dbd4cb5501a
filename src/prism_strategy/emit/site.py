"""What a site's scheduler and nodes accept, from the `[launch]` table and the `[[queues]]` list of
a platform file (data/platforms/*.toml): queue node and walltime limits, the filesystems every
job must name, the high-speed-network host name suffix, CPU sockets and binding.

`emit` picks the queue from the node count and checks the walltime against it; the doctor checks
a launcher's queue, node count and walltime against the same data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.presets import DATA, build, platform_names, read_toml
from prism_strategy.specs.shell_values import LAUNCH_FIELDS, check_field, check_launch


def walltime_seconds(text: str) -> int | None:
    """HH:MM:SS (also H:MM:SS and MM:SS, as PBS accepts them) -> seconds; None when malformed."""
    parts = text.strip().split(":")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return None
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + int(p)
    return seconds


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueLimit:
    """One queue, or one band of a routing queue (prod routes by node count)."""

    name: str
    min_nodes: int
    max_nodes: int
    max_walltime: str
    min_walltime: str = "00:05:00"
    auto: bool = True
    """emit may pick it from the node count (False: by request or preemptable only)."""
    routes_to: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        check_field("queue", self.name, f"[[queues]] {self.name!r}")
        if not 1 <= self.min_nodes <= self.max_nodes:
            raise SpecError(f"queue {self.name!r}: needs 1 <= min_nodes <= max_nodes")
        for t in (self.max_walltime, self.min_walltime):
            if walltime_seconds(t) is None:
                raise SpecError(f"queue {self.name!r}: walltime {t!r} is not HH:MM:SS")

    def takes(self, nodes: int, walltime_s: int) -> bool:
        return self.min_nodes <= nodes <= self.max_nodes and walltime_seconds(
            self.min_walltime
        ) <= walltime_s <= walltime_seconds(self.max_walltime)

    @property
    def limits(self) -> str:
        band = f" (as {self.routes_to})" if self.routes_to else ""
        return f"{self.min_nodes}-{self.max_nodes} nodes up to {self.max_walltime}{band}"

    def __str__(self) -> str:
        return f"{self.name} {self.limits}"


@dataclass(frozen=True, kw_only=True, slots=True)
class SiteSpec:
    """The `[launch]` table of a platform file plus its `[[queues]]`."""

    platform: str
    filesystems: str = ""
    """`#PBS -l filesystems=` every job must name ("" = the site has no such requirement)."""
    keep_output: str = ""
    """`#PBS -k` value (ALCF enforces doe: stream output back)."""
    master_addr_suffix: str = ""
    """Appended to the first host's short name: its high-speed-network interface name."""
    sockets: int = 1
    cpu_bind: str = ""
    """An explicit --cpu-bind value for one rank per device: mpiexec's list, or srun's
    (`mask_cpu:...`, LUMI) ("" = computed from the cores for mpiexec, none for srun)."""
    cpus_per_task: int = 0
    """srun -c as the site documents it (Frontier: 7 under low-noise mode); 0 = the node's cores
    split over its ranks."""
    srun_options: str = ""
    """srun options the site documents for one rank per device (`--gpus-per-task=1
    --gpu-bind=closest`), added to the srun line as given."""
    queues: tuple[QueueLimit, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_launch({k: getattr(self, k) for k in LAUNCH_FIELDS}, f"platform {self.platform}")

    def queue_names(self) -> list[str]:
        return list(dict.fromkeys(q.name for q in self.queues))

    def source(self, key: str) -> str:
        return self.sources.get(key, f"platform file {self.platform}")

    def pick_queue(self, nodes: int, walltime: str) -> QueueLimit:
        """The first queue (in the file's order) that takes this many nodes for this long."""
        secs = _seconds(walltime)
        for q in self.queues:
            if q.auto and q.takes(nodes, secs):
                return q
        raise SpecError(
            f"no {self.platform} queue takes {nodes} nodes for {walltime}: {self._limits()}; "
            "change --nodes or --walltime"
        )

    def check_queue(self, name: str, nodes: int, walltime: str) -> QueueLimit:
        """The band of queue `name` that takes this job; SpecError naming the limits otherwise."""
        secs = _seconds(walltime)
        bands = [q for q in self.queues if q.name == name]
        if not bands:
            raise SpecError(f"--queue must be one of {', '.join(self.queue_names())} on {self.platform}, got {name!r}")
        for q in bands:
            if q.takes(nodes, secs):
                return q
        limits = "; ".join(q.limits for q in bands)
        if not any(q.min_nodes <= nodes <= q.max_nodes for q in bands):
            raise SpecError(
                f"queue {name} on {self.platform} takes {limits}, not {nodes} nodes; "
                f"drop --queue to pick one from the node count"
            )
        raise SpecError(f"queue {name} on {self.platform} takes {limits}; --walltime {walltime} is outside it")

    def problems(self, name: str, nodes: int | None, walltime: str | None) -> list[str]:
        """What a launcher's queue line gets wrong (the doctor's view: nothing raised)."""
        bands = [q for q in self.queues if q.name == name]
        if not bands:
            return []
        out = []
        if nodes is not None and not any(q.min_nodes <= nodes <= q.max_nodes for q in bands):
            out.append(f"queue {name} takes {'; '.join(q.limits for q in bands)}, not {nodes} nodes")
        secs = walltime_seconds(walltime) if walltime else None
        fitting = [q for q in bands if nodes is None or q.min_nodes <= nodes <= q.max_nodes] or bands
        if secs is not None and not any(
            walltime_seconds(q.min_walltime) <= secs <= walltime_seconds(q.max_walltime) for q in fitting
        ):
            out.append(
                f"walltime {walltime} is outside queue {name}'s {' or '.join(q.max_walltime for q in fitting)} limit"
            )
        return out

    def _limits(self) -> str:
        return "; ".join(str(q) for q in self.queues if q.auto)


def _seconds(walltime: str) -> int:
    secs = walltime_seconds(walltime)
    if secs is None:
        raise SpecError(f"--walltime must be HH:MM:SS, got {walltime!r}")
    return secs


def load_site(platform: str) -> SiteSpec:
    """Site data of a platform preset name or platform .toml path (empty when it has none)."""
    if platform in platform_names():
        path, name = DATA / "platforms" / f"{platform}.toml", platform
    elif Path(platform).suffix == ".toml" and Path(platform).is_file():
        path, name = Path(platform), platform
    else:
        return SiteSpec(platform=platform)
    data = read_toml(path)
    launch = data.get("launch", {})
    queues = data.get("queues", [])
    if not isinstance(launch, dict) or not isinstance(queues, list):
        raise SpecError(f"platform {name}: [launch] must be a table and [[queues]] a list of tables")
    return build(
        SiteSpec,
        {"platform": str(data.get("name", name)), **launch, "queues": queues},
        f"platform {name} [launch]/[[queues]]",
    )

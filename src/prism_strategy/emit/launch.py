"""Launchers a user submits: PBS + mpiexec (Aurora, Polaris), Slurm + srun (CUDA clusters),
and a plain torchrun script for a local single-node run; plus the orchestration that turns an
EmitRequest into the full set of files (env.sh, launcher, strategy.toml, ds_config.json).

The per-rank command is a shell function (`prism_rank`) shipped to every rank with
`bash -lc "$(declare -f prism_rank); ..."`: it loads the modules, then exports the profile again
(a module load resets CCL/FI variables), then sets the rank layout and runs the script. It never
preloads libpil4dfs. Every user value goes through `sh_quote`; directive values (walltime, queue,
account, filesystems) are checked against their grammars (specs/shell_values.py).

torchrun environment contract (what the training script reads, set by every launcher here):
RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and PRISM_STRATEGY_FILE (strategy.toml).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from prism_strategy import rules
from prism_strategy.emit.deepspeed import build_ds_config, dumps
from prism_strategy.emit.env import (
    EnvProfile,
    check_text,
    comment,
    load_env_profile,
    profile_lines,
    profile_names,
    render_env_sh,
    sh_quote,
)
from prism_strategy.emit.files import FileText
from prism_strategy.emit.site import SiteSpec, load_site
from prism_strategy.emit.strategy_file import STRATEGY_FILE, WRAP_CALL
from prism_strategy.engines import engine_of
from prism_strategy.rules import RuleFacts
from prism_strategy.specs.cluster import Layout, PlatformSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.policies import MemoryPolicy
from prism_strategy.specs.presets import load_platform
from prism_strategy.specs.shell_values import SHELLCHECK_LITERAL, check_field
from prism_strategy.specs.training import PRECISIONS, check_options
from prism_strategy.strategies import StrategySpec, get_strategy
from prism_strategy.wrap_config import RunPolicies, WrapConfig

MASTER_PORT = 29500
"""torch.distributed's default rendezvous port."""
HEADER_PREFIX = "# prism-strategy emit:"


@dataclass(frozen=True, kw_only=True, slots=True)
class EmitRequest:
    strategy: str
    platform: str
    nodes: int
    ranks_per_node: int | None = None
    """None: the platform's devices per node."""
    env_profile: str | None = None
    """None: the platform's own profile."""
    precision: str = "bf16-mixed"
    ckpt_freq: int | str = 0
    """k (every k-th block, 0 = none) or "sac"."""
    loss: str = "upcast"
    """The loss kernel wrap() installs (strategy.toml `loss`)."""
    micro_batch: int = 1
    grad_accum: int = 1
    static_graph: bool | None = None
    """DDP only; None means off."""
    compile: bool = False
    bucket_mb: float | None = None
    """DDP bucket_cap_mb / DeepSpeed bucket size; None: the engine's default."""
    reduce_dtype: str | None = None
    """fp32 | bf16: FSDP2 reduce_dtype / DeepSpeed communication_data_type; None: the default."""
    account: str | None = None
    queue: str | None = None
    """PBS: a queue of the platform's [[queues]] (default: picked from nodes and walltime).
    Slurm: the partition (default: none)."""
    walltime: str = "01:00:00"
    filesystems: str | None = None
    """PBS -l filesystems=; None: the platform's [launch] filesystems."""
    job_name: str = "prism"
    model: str | None = None
    """What the commbench job replays: the plan's --model (preset or path); None: set at submit time."""
    bench_candidates: tuple[str, ...] = ()
    """What the bench job times, in order: the plan's top feasible options; () the emitted strategy alone."""
    vision: str | None = None
    mode: str = "e2e"
    seq_len: int | None = None
    script: str = "train.py"
    script_args: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Emitted:
    files: list[FileText]
    platform: PlatformSpec
    strategy: StrategySpec
    profile: EnvProfile
    layout: Layout
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchJob:
    """Everything a renderer needs, validated."""

    req: EmitRequest
    platform: PlatformSpec
    strategy: StrategySpec
    profile: EnvProfile
    layout: Layout
    strategy_file: str
    """Absolute path of strategy.toml once written."""
    site: SiteSpec
    queue: str | None
    """The queue written into the launcher (PBS: checked against the site's limits)."""
    queue_note: str = ""

    @property
    def header(self) -> str:
        vals = dict(
            platform=self.platform.name,
            strategy=self.strategy.name,
            nodes=self.layout.nodes,
            **{"ranks-per-node": self.layout.ranks_per_node, "env-profile": self.profile.name},
        )
        return HEADER_PREFIX + "".join(f" {k}={re.sub(r'[^A-Za-z0-9_.-]', '_', str(v))}" for k, v in vals.items())


def emit_files(req: EmitRequest, out: Path) -> Emitted:
    """Validate the request and render every file; nothing is written here."""
    from prism_strategy.emit.commbench import bench_torchrun_file

    job = _validate(req, out)
    env_sh = FileText(
        name="env.sh",
        text=render_env_sh(job.profile, job.platform.name, job.header),
        description=f"env profile {job.profile.name}: `source env.sh` on a compute node",
    )
    files = [
        *([env_sh] if job.profile.var or job.profile.modules or job.profile.unset or job.profile.prepend else []),
        *_launcher_files(job),
        FileText(
            name="torchrun.sh",
            text=render_torchrun(job),
            executable=True,
            description="local single-node run: `bash torchrun.sh`",
        ),
        bench_torchrun_file(job),
        FileText(
            name=STRATEGY_FILE,
            text=_strategy_file(job).to_toml(job.header),
            description=f"wrap() settings: job = {WRAP_CALL}",
        ),
    ]
    engine = engine_of(job.strategy)
    if engine.config_file is not None:
        cfg = build_ds_config(
            job.strategy,
            micro_batch=req.micro_batch,
            world_size=job.layout.world,
            grad_accum=req.grad_accum,
            precision=req.precision,
        )
        files.append(FileText(name=engine.config_file, text=dumps(cfg), description=f"{engine.name} config"))
    return Emitted(
        files=files,
        platform=job.platform,
        strategy=job.strategy,
        profile=job.profile,
        layout=job.layout,
        notes=_notes(job),
    )


def _validate(req: EmitRequest, out: Path) -> LaunchJob:
    check_options(req.bucket_mb, req.reduce_dtype)
    strategy = get_strategy(req.strategy).with_options(bucket_mb=req.bucket_mb, reduce_dtype=req.reduce_dtype)
    platform = load_platform(req.platform)
    layout = _layout(platform, req)
    profile = _profile(req, platform)
    if req.precision not in PRECISIONS:
        raise SpecError(f"--precision must be one of {', '.join(PRECISIONS)}, got {req.precision!r}")
    _check_counts(req)
    if req.static_graph is not None and not engine_of(strategy).declares_static_graph:
        raise SpecError(f"--static-graph applies to ddp only, not {strategy.name}")
    _check_scheduler_fields(req)
    for label, text in (
        ("--job-name", req.job_name),
        ("--script", req.script),
        *(("script argument", a) for a in req.script_args),
    ):
        check_text(label, text)
    if not req.script:
        raise SpecError("--script must not be empty")
    _refuse_not_viable(strategy, platform, req)
    site = load_site(req.platform)
    queue, note = job_queue(platform, site, req)
    return LaunchJob(
        req=req,
        platform=platform,
        strategy=strategy,
        profile=profile,
        layout=layout,
        strategy_file=str(Path(out).absolute() / STRATEGY_FILE),
        site=site,
        queue=queue,
        queue_note=note,
    )


def _check_scheduler_fields(req: EmitRequest) -> None:
    """Values a #PBS/#SBATCH directive takes: the shell reads those lines as comments, so they are
    checked against the scheduler's grammar rather than quoted (specs/shell_values.py)."""
    check_field("walltime", req.walltime, "--walltime", required=True)
    for flag, field_, value in (
        ("--filesystems", "filesystems", req.filesystems),
        ("--account", "account", req.account),
        ("--queue", "queue", req.queue),
    ):
        if value is not None:
            check_field(field_, value, flag)


def _check_counts(req: EmitRequest) -> None:
    """The one count given out of range, by its flag and value."""
    if req.ckpt_freq != "sac" and req.ckpt_freq < 0:  # type: ignore[operator]
        raise SpecError(f"--ckpt-freq must be >= 0 (0 = no checkpointing) or sac, got {req.ckpt_freq}")
    for flag, value in (("--micro-batch", req.micro_batch), ("--grad-accum", req.grad_accum)):
        if value < 1:
            raise SpecError(f"{flag} must be >= 1, got {value}")


def _profile(req: EmitRequest, platform: PlatformSpec) -> EnvProfile:
    """--env-profile, else the platform's own; a user's platform file that names none gets an empty
    profile (nothing exported), said in the notes; a multi-node job on a file that names no
    launcher is refused (torchrun, the default, starts one node)."""
    if "launcher" in platform.defaulted and req.nodes > 1:
        raise SpecError(
            f'{req.platform} names no launcher for a {req.nodes}-node job: add launcher = "slurm" or '
            'launcher = "pbs" to it (launcher = "torchrun" writes a one-node torchrun.sh)'
        )
    if name := req.env_profile or platform.env_profile:
        return load_env_profile(name)
    return EnvProfile(name="none", version="-", description=f"{platform.name} names no env_profile", source="")


def _layout(platform: PlatformSpec, req: EmitRequest) -> Layout:
    """The job's nodes x ranks per node; more ranks than devices per node cannot be placed."""
    rpn = req.ranks_per_node
    if rpn is None:
        return Layout.for_platform(platform, req.nodes)
    if rpn > platform.hardware.devices_per_node:
        raise SpecError(
            f"--ranks-per-node {rpn} exceeds {platform.name}'s {platform.hardware.devices_per_node} devices per "
            f"node; use 1..{platform.hardware.devices_per_node}"
        )
    return Layout(nodes=req.nodes, ranks_per_node=rpn)


def job_queue(platform: PlatformSpec, site: SiteSpec, req: EmitRequest) -> tuple[str | None, str]:
    """PBS: the queue that takes this many nodes for this long (an explicit --queue is checked)."""
    if platform.launcher != "pbs" or not site.queues:
        return req.queue, ""
    if req.queue:
        q = site.check_queue(req.queue, req.nodes, req.walltime)
        return q.name, f"queue {q} [{q.source}]"
    q = site.pick_queue(req.nodes, req.walltime)
    return q.name, f"queue {q.name} picked for {req.nodes} nodes and {req.walltime}: {q} [{q.source}]"


def _refuse_not_viable(strategy: StrategySpec, platform: PlatformSpec, req: EmitRequest) -> None:
    facts = RuleFacts(
        device=platform.device,
        backend=platform.backend,
        compile=req.compile,
        multi_node=req.nodes > 1,
        find_unused_parameters=False,
        preloads_pil4dfs=False,
        static_graph=bool(req.static_graph),
        **engine_of(strategy).facts(strategy),
    )
    for v in rules.check(facts):
        if v.rule.blocks:
            raise SpecError(f"not viable ({v.rule.id}): {v.message}")


def _strategy_file(job: LaunchJob) -> WrapConfig:
    req, engine = job.req, engine_of(job.strategy)
    policies = RunPolicies(
        precision=req.precision,
        memory=MemoryPolicy(checkpointing=req.ckpt_freq, loss=req.loss, compile=req.compile, bucket_mb=req.bucket_mb),
        micro_batch=req.micro_batch,
        grad_accum=req.grad_accum,
        layout=job.layout,
    )
    return WrapConfig.from_policies(
        job.strategy.name,
        policies,
        static_graph=bool(req.static_graph) if engine.declares_static_graph else None,
        reduce_dtype=req.reduce_dtype,
        find_unused_parameters=False,
        ds_config=engine.config_file,
    )


def _notes(job: LaunchJob) -> list[str]:
    notes = [job.queue_note] if job.queue_note else []
    if job.profile.name == "none" and not job.req.env_profile:
        notes.append(
            f"{job.req.platform} names no env_profile: no env.sh, and the launchers export no profile variables; "
            f'add env_profile = "NAME" to it or pass --env-profile ({", ".join(profile_names())})'
        )
    if "launcher" in job.platform.defaulted:
        notes.append(f"{job.req.platform} names no launcher: torchrun (the default) for this one-node job")
    if job.platform.launcher == "pbs" and not job.site.queues:
        notes.append(
            f"{job.platform.name} has no [[queues]] data: no queue was checked"
            + ("" if job.queue else "; add --queue or let PBS use its default queue")
        )
    if job.platform.launcher in ("pbs", "slurm") and not job.req.account:
        notes.append("no --account given: add your project before submitting")
    notes += engine_of(job.strategy).emit_notes(
        job.strategy, precision=job.req.precision, world=job.layout.world, nodes=job.layout.nodes
    )
    if job.platform.launcher == "torchrun" and job.layout.nodes > 1:
        notes.append(
            f"{job.platform.name} has no scheduler launcher: torchrun.sh runs one node of the {job.layout.nodes}"
        )
    return notes


# --- launchers -------------------------------------------------------------------------------
def _launcher_files(job: LaunchJob) -> list[FileText]:
    from prism_strategy.emit.commbench import commbench_files

    if job.platform.launcher == "pbs":
        return [
            FileText(
                name="launch.pbs",
                text=render_pbs(job),
                executable=True,
                description="PBS job: `qsub launch.pbs` (mpiexec, one rank per device)",
            ),
            *commbench_files(job),
        ]
    if job.platform.launcher == "slurm":
        return [
            FileText(
                name="launch.slurm",
                text=render_slurm(job),
                executable=True,
                description="Slurm job: `sbatch launch.slurm` (srun, one rank per device)",
            ),
            *commbench_files(job),
        ]
    return []


def _run_line(job: LaunchJob) -> str:
    words = [sh_quote(job.req.script), *(sh_quote(a) for a in job.req.script_args)]
    return "exec python3 " + " ".join(words)


def _rank_function(job: LaunchJob, rank: str, local_rank: str, run_line: str | None = None) -> list[str]:
    """The per-rank command: modules, profile, layout, script. $1..$4 = addr, port, world, ranks per node.
    `rank` and `local_rank` are shell expansions that fail loudly when the launcher set neither."""
    i = "    "
    why = (
        (
            "# Runs once per rank, on its node. The profile is exported again after the module loads:",
            "# a module load can set or reset these variables.",
        )
        if job.profile.modules
        else ("# Runs once per rank, on its node: the profile's variables, the rank layout, then the script.",)
    )
    return [
        *why,
        "prism_rank() {",
        *profile_lines(job.profile, job.platform.name, indent=i),
        f"{i}# rank layout, under torchrun's names (a rank without a local rank stops here: it would take device 0)",
        f'{i}export RANK="{rank}" LOCAL_RANK="{local_rank}" WORLD_SIZE="$3" LOCAL_WORLD_SIZE="$4"',
        f'{i}export MASTER_ADDR="$1" MASTER_PORT="$2"',
        f"{i}export PRISM_STRATEGY_FILE={sh_quote(job.strategy_file)}",
        f"{i}{run_line or _run_line(job)}",
        "}",
    ]


PALS_RANK = "${PALS_RANKID:-${PMI_RANK:?mpiexec set no rank (PALS_RANKID or PMI_RANK)}}"
PALS_LOCAL_RANK = (
    "${PALS_LOCAL_RANKID:-${PMI_LOCAL_RANK:?mpiexec set no local rank (PALS_LOCAL_RANKID or "
    "PMI_LOCAL_RANK): every rank would take device 0}}"
)
SLURM_RANK = "${SLURM_PROCID:?srun set no SLURM_PROCID}"
SLURM_LOCAL_RANK = "${SLURM_LOCALID:?srun set no SLURM_LOCALID: every rank would take device 0}"
RANK_LAUNCH = (
    'bash -lc "$(declare -f prism_rank); prism_rank \\"\\$@\\"" prism_rank '
    '"$MASTER_ADDR" "$MASTER_PORT" "$NRANKS" "$RANKS_PER_NODE"'
)
"""Ships prism_rank to each rank's login shell (which defines `module`) with addr, port, world, ranks per node."""


def _pbs_directives(job: LaunchJob) -> list[str]:
    req, site = job.req, job.site
    filesystems = req.filesystems or site.filesystems
    lines = [
        f"#PBS -N {_directive_name(req.job_name)}",
        f"#PBS -l select={job.layout.nodes}",
        f"#PBS -l walltime={req.walltime}",
        *([f"#PBS -l filesystems={filesystems}"] if filesystems else []),
        *([f"#PBS -k {site.keep_output}"] if site.keep_output else []),
        "#PBS -l place=scatter",
        *([f"#PBS -q {job.queue}"] if job.queue else []),
        "#PBS -j oe",
    ]
    if req.account:
        lines.insert(1, f"#PBS -A {req.account}")
    else:
        lines.insert(1, "# #PBS -A YOUR_PROJECT   (pass --account)")
    return lines


def _cpu_bind(job: LaunchJob) -> str:
    # SiteSpec checked cpu_bind and master_addr_suffix against their grammars (no quote, $ or `)
    bind = job.site.cpu_bind or cpu_bind_list(job.platform.hardware.cpu_cores_per_node, job.layout.ranks_per_node)
    return f' --cpu-bind "{bind}"' if bind else " --cpu-bind core"


def _master_addr(job: LaunchJob) -> list[str]:
    suffix = job.site.master_addr_suffix
    lines = [
        f"# rendezvous on the first host of the job: its high-speed-network name ({comment(job.site.source('master_addr_suffix'))})"
        if suffix
        else "# rendezvous on the first host of the job (short host name)",
        'MASTER_ADDR="$(head -n 1 "${PBS_NODEFILE:?not running under PBS}")"',
        f'MASTER_ADDR="${{MASTER_ADDR%%.*}}{suffix}"',
    ]
    return lines


def render_pbs(job: LaunchJob, run_line: str | None = None) -> str:
    lay = job.layout
    lines = [
        "#!/bin/bash -l",
        job.header,
        SHELLCHECK_LITERAL,
        "# Submit: qsub launch.pbs   (from the folder your script paths are relative to)",
        *_pbs_directives(job),
        "set -euo pipefail",
        'cd "${PBS_O_WORKDIR:-.}"',
        f"export PRISM_JOB_NAME={sh_quote(job.req.job_name)}",
        f"NNODES={lay.nodes}",
        f"RANKS_PER_NODE={lay.ranks_per_node}",
        "NRANKS=$((NNODES * RANKS_PER_NODE))",
        *_master_addr(job),
        f"MASTER_PORT={MASTER_PORT}",
        "",
        *_rank_function(job, PALS_RANK, PALS_LOCAL_RANK, run_line),
        "",
        f'mpiexec -n "$NRANKS" -ppn "$RANKS_PER_NODE"{_cpu_bind(job)} \\',
        "    " + RANK_LAUNCH,
    ]
    return "\n".join(lines) + "\n"


def render_slurm(job: LaunchJob, run_line: str | None = None) -> str:
    req, lay = job.req, job.layout
    directives = [
        f"#SBATCH --job-name={_directive_name(req.job_name)}",
        f"#SBATCH --nodes={lay.nodes}",
        f"#SBATCH --ntasks-per-node={lay.ranks_per_node}",
        f"#SBATCH --time={req.walltime}",
    ]
    if job.platform.device != "cpu":
        directives.append(f"#SBATCH --gpus-per-node={lay.ranks_per_node}")
    cpus = _cpus_per_task(job)
    if cpus:
        directives.append(f"#SBATCH --cpus-per-task={cpus}")
    if req.account:
        directives.append(f"#SBATCH --account={req.account}")
    if req.queue:
        directives.append(f"#SBATCH --partition={req.queue}")
    lines = [
        "#!/bin/bash",
        job.header,
        SHELLCHECK_LITERAL,
        "# Submit: sbatch launch.slurm   (from the folder your script paths are relative to)",
        *directives,
        "set -euo pipefail",
        f"export PRISM_JOB_NAME={sh_quote(req.job_name)}",
        f"NNODES={lay.nodes}",
        f"RANKS_PER_NODE={lay.ranks_per_node}",
        "NRANKS=$((NNODES * RANKS_PER_NODE))",
        "# rendezvous on the first host of the job",
        'MASTER_ADDR="$(scontrol show hostnames "${SLURM_JOB_NODELIST:?not running under Slurm}" | head -n 1)"',
        f"MASTER_PORT={MASTER_PORT}",
        "",
        *_rank_function(job, SLURM_RANK, SLURM_LOCAL_RANK, run_line),
        "",
        "# --kill-on-bad-exit: a rank that dies ends the job (srun would wait on a hung one to the walltime)",
        'srun --nodes="$NNODES" --ntasks-per-node="$RANKS_PER_NODE" --kill-on-bad-exit=1'
        + (f" --cpus-per-task={cpus}" if cpus else "")
        + _srun_site_options(job)
        + " \\",
        "    " + RANK_LAUNCH,
    ]
    return "\n".join(lines) + "\n"


def _cpus_per_task(job: LaunchJob) -> int:
    """The site's documented srun -c, else the node's cores split over its ranks (data-loader
    workers and the host's launch threads need them); srun is given it too, since Slurm 22.05 srun
    does not inherit sbatch's --cpus-per-task. 0: the platform does not say how many cores a node has."""
    return job.site.cpus_per_task or job.platform.hardware.cpu_cores_per_node // job.layout.ranks_per_node


def _srun_site_options(job: LaunchJob) -> str:
    """The srun options and CPU binding the site documents (the platform file's [launch] table:
    Frontier's --gpus-per-task=1 --gpu-bind=closest, LUMI's --cpu-bind=mask_cpu:...)."""
    words = shlex.split(job.site.srun_options) + ([f"--cpu-bind={job.site.cpu_bind}"] if job.site.cpu_bind else [])
    return "".join(f" {sh_quote(w)}" for w in words)


MODULE_INIT = [
    "# `module` is a shell function a login shell defines; define it here too (bash torchrun.sh is not one)",
    "if ! type module >/dev/null 2>&1; then",
    '    for init in "${MODULESHOME:-/nonexistent}/init/bash" /etc/profile.d/lmod.sh /etc/profile.d/z00_lmod.sh \\',
    "                /etc/profile.d/modules.sh /usr/share/lmod/lmod/init/bash; do",
    "        # shellcheck source=/dev/null",
    '        if [ -f "$init" ]; then source "$init"; break; fi',
    "    done",
    '    type module >/dev/null 2>&1 || { echo "torchrun.sh: no module command; run it from a login shell: bash -l torchrun.sh" >&2; exit 1; }',
    "fi",
]


def render_torchrun(job: LaunchJob) -> str:
    """One node, torchrun's own rendezvous: the profile as torchrun needs it (no mpiexec/PMIx-only
    settings), written inline rather than sourced from env.sh (which is for mpiexec jobs)."""
    rpn = job.layout.ranks_per_node
    words = [sh_quote(job.req.script), *(sh_quote(a) for a in job.req.script_args)]
    lines = [
        "#!/bin/bash",
        job.header,
        SHELLCHECK_LITERAL,
        f"# Local run on one node ({rpn} ranks): bash torchrun.sh",
        "set -eo pipefail",
        'PRISM_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        *(MODULE_INIT if job.profile.modules or job.profile.module_use else []),
        *profile_lines(job.profile, job.platform.name, launcher="torchrun"),
        f"export PRISM_JOB_NAME={sh_quote(job.req.job_name)}",
        'export PRISM_STRATEGY_FILE="$PRISM_DIR/strategy.toml"',
        f"exec torchrun --standalone --nnodes=1 --nproc-per-node={rpn} " + " ".join(words),
    ]
    return "\n".join(lines) + "\n"


def cpu_bind_list(cores_per_node: int, ranks_per_node: int) -> str | None:
    """mpiexec --cpu-bind list: dual-socket nodes (Aurora 2 x 52 cores), half the ranks on each
    socket, core 0 of each socket left to the OS, equal contiguous blocks (ALCF's Aurora list
    for 12 ranks is 1-8:...:41-48:53-60:...:93-100). None when the cores are unknown or too few."""
    sockets = 2 if ranks_per_node % 2 == 0 else 1
    per_socket, ranks_per_socket = cores_per_node // sockets, ranks_per_node // sockets
    width = (per_socket - 1) // ranks_per_socket if ranks_per_socket else 0
    if cores_per_node <= 0 or width < 1:
        return None
    blocks = []
    for s in range(sockets):
        for r in range(ranks_per_socket):
            first = s * per_socket + 1 + r * width
            blocks.append(f"{first}-{first + width - 1}" if width > 1 else str(first))
    return "list:" + ":".join(blocks)


def _directive_name(name: str) -> str:
    """Scheduler job names allow no spaces or shell characters: keep [A-Za-z0-9_.-] (the full
    name is exported, quoted, as PRISM_JOB_NAME)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:200] or "prism"
    return safe if safe[0].isalnum() else "j" + safe

"""Launcher checks: read a PBS/Slurm/torchrun shell launcher into an ordered list of events
(exports, unsets, module loads, the launch command) for the job script and for the per-rank
command it ships to each rank, then check the order and values against the rules.

The shell is parsed with bash's grammar (diagnose/shell_syntax.py) and read by a small
interpreter (diagnose/shell_eval.py): heredocs are data, `bash -c BODY` is the per-rank script,
branches the script leaves open are reported as such. What it cannot follow, it leaves
unknown rather than guess. A Python launcher (a program that writes the job script) is refused
with the fix: pass the job script it writes.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from prism_strategy.diagnose.ccl_scale_checks import check_ccl_at_scale
from prism_strategy.diagnose.config_checks import DsConfigFile, StrategyTomlFile
from prism_strategy.diagnose.findings import Context, Finding, check_observed, parse_header
from prism_strategy.diagnose.injection_checks import check_injection
from prism_strategy.diagnose.job_checks import check_job_launch
from prism_strategy.diagnose.launch_flags import script_argv
from prism_strategy.diagnose.launch_options import (
    Event,
    directives,
    launch_env_options,
    option_int,
    option_str,
    resolve,
)
from prism_strategy.diagnose.live_checks import check_env_values, check_modules
from prism_strategy.diagnose.module_checks import check_module_order
from prism_strategy.diagnose.modules import ModuleFacts
from prism_strategy.diagnose.rendezvous_checks import check_empty_launcher, check_rendezvous, pmi_launches
from prism_strategy.diagnose.rocm_checks import check_rocm_launch
from prism_strategy.diagnose.shell_eval import MPI_LAUNCHERS, main_launch, read_events
from prism_strategy.diagnose.shell_syntax import Binding
from prism_strategy.diagnose.site_checks import PbsDirectives, check_site
from prism_strategy.diagnose.spawners import Spawn, spawned
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.libraries import device_of_variable

_COMPILE_FLAG = re.compile(r"^--(?:torch[-_])?compile(?:=(?:1|true|True|yes))?$")


# --- what one launcher says --------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True, slots=True)
class LauncherFile:
    path: Path
    header: dict[str, str]
    outer: list[Event]
    per_rank: list[Event] | None
    """None: no MPI launch, or one the doctor cannot follow."""
    launch: Event | None
    directives: dict[str, int]
    """nodes / ranks_per_node read from #PBS / #SBATCH lines."""
    pbs: PbsDirectives
    modules: tuple[ModuleFacts, ...] = ()
    """What --module-show says the modules set."""
    rank_env: dict[str, tuple[Binding, ...]] = field(default_factory=dict)
    """Each rank's variables after its command ran (the job script's, without an MPI launch)."""

    @property
    def timeline(self) -> list[Event]:
        return self.outer + (self.per_rank or [])

    def refine(self, ctx: Context) -> Context:
        devices, engines = set(), set()
        for e in self.timeline:
            if e.kind == "module" and any("frameworks" in a for a in e.args):
                devices.add("xpu")
            if e.kind == "export" and device_of_variable(e.name):
                devices.add(device_of_variable(e.name))
        if self._deepspeed_line():
            engines.add("deepspeed")
        nodes = int(self.header["nodes"]) if self.header.get("nodes", "").isdigit() else self.nodes()
        ctx = ctx.refined(
            platform=self.header.get("platform"),
            strategy=self.header.get("strategy"),
            nodes=nodes,
            devices=frozenset(devices),
            engines=frozenset(engines),
            env_profile=self.header.get("env-profile"),
        )
        known = tuple((n, v, str(self.path)) for n, v in sorted(self.known_env().items()))
        argv = tuple(script_argv(self.timeline))
        return replace(
            ctx,
            launcher_env=ctx.launcher_env + known,
            script_argv=ctx.script_argv + argv,
            pmi_launches=ctx.pmi_launches + tuple(pmi_launches(self.timeline)),
        )

    def nodes(self) -> int | None:
        if "nodes" in self.directives:
            return self.directives["nodes"]
        n = option_int(self.launch, ("--nnodes", "--nodes", "-N"), self.outer) if self.launch else None
        total, rpn = option_int(self.launch, ("-n", "-np"), self.outer) if self.launch else None, self.ranks_per_node()
        return n or (total // rpn if total and rpn and total % rpn == 0 else None)

    def tasks_per_node(self) -> int | None:
        """Processes the launch command itself starts per node (-ppn, --ntasks-per-node, ...)."""
        if self.launch is not None:
            rpn = option_int(
                self.launch,
                ("-ppn", "--ppn", "-npernode", "--ntasks-per-node"),
                self.outer,
            )
            if rpn:
                return rpn
        d = self.directives
        if "ranks_per_node" in d:
            return d["ranks_per_node"]
        return d["tasks"] // d["nodes"] if d.get("tasks") and d.get("nodes") and d["tasks"] % d["nodes"] == 0 else None

    def spawn(self) -> Spawn | None:
        """The launch helper the launch runs (torchrun, accelerate launch, deepspeed), if any."""
        if self.launch is None:
            return None
        nodes = self.directives.get("nodes") or (int(n) if (n := self.header.get("nodes", "")).isdigit() else None)
        return spawned(self.launch, self.outer, nodes)

    def ranks_per_node(self) -> int | None:
        """Training ranks per node: the launch's tasks, times what a launch helper spawns in each
        (diagnose/spawners.py); None when a helper's count is not on the command line, or when
        there is no launch the doctor can follow."""
        if self.launch is None:
            return None
        sp = self.spawn()
        if sp is None:
            return self.tasks_per_node()
        if sp.one_per_device:
            return None
        if self.launch.name not in MPI_LAUNCHERS:
            return sp.per_node
        tasks = (
            self.tasks_per_node()
            if self.launch.name == "srun"
            else option_int(self.launch, ("-ppn", "--ppn", "-npernode"), self.outer)
        )
        return tasks * sp.per_node if tasks and sp.per_node else None

    def devices_allocated(self) -> int | None:
        """Devices per node the Slurm job asks for (--gpus-per-task x tasks, --gpus-per-node,
        --gres=gpu:N); None: the whole node (PBS, or no GPU request)."""
        d = self.directives
        if "devices_per_node" in d:
            return d["devices_per_node"]
        tasks = d.get("ranks_per_node") or (d["tasks"] // d["nodes"] if d.get("tasks") and d.get("nodes") else None)
        return d["devices_per_task"] * tasks if "devices_per_task" in d and tasks else None

    def _deepspeed_line(self) -> int | None:
        for e in self.timeline:
            if e.kind == "launch" and (e.name == "deepspeed" or any(a.startswith("--deepspeed") for a in e.args)):
                return e.line
        return None

    def _compile_line(self) -> int | None:
        return next(
            (e.line for e in self.timeline if e.kind == "launch" and any(_COMPILE_FLAG.match(a) for a in e.args)), None
        )

    def check(self, ctx: Context) -> list[Finding]:
        out = (
            check_module_order(self.rank_timeline(), self.launch, self.per_rank, self.modules, ctx)
            + self._check_ranks_per_node(ctx)
            + self._check_env(ctx)
            + check_site(self, ctx)
            + check_modules([(" ".join(e.args), e.file, e.line) for e in self.timeline if e.kind == "module"])
            + self._check_compile(ctx)
            + check_rendezvous(self, ctx)
            + check_empty_launcher(self, ctx)
            + check_ccl_at_scale(self, ctx)
            + check_rocm_launch(self, ctx)
            + check_injection(self, ctx)
            + check_job_launch(self, ctx)
        )
        return [on_branch(f, self.timeline) for f in out]

    def rank_timeline(self) -> list[Event]:
        """What each rank inherits, in order: the job script up to the launch, the variables the
        launch itself passes (--env / -genv), then the per-rank command."""
        if self.launch is None or self.launch not in self.outer:
            return self.timeline
        before = self.outer[: self.outer.index(self.launch)]
        passed = [
            Event(kind="export", name=n, value=v, file=f, line=ln, branch=self.launch.branch)
            for n, (v, f, ln) in launch_env_options(self.launch).items()
        ]
        return before + passed + (self.per_rank or [])

    def _check_ranks_per_node(self, ctx: Context) -> list[Finding]:
        """One rank per device the job holds; a job that asks Slurm for fewer devices than the
        node has (--gpus-per-task=1), or fits on one node with fewer ranks, is legitimate: info."""
        rpn = self.ranks_per_node()
        if ctx.platform is None or rpn is None:
            return []
        want = ctx.platform.hardware.devices_per_node
        held = self.devices_allocated()
        line = self.launch.line if self.launch else 1
        file = self.launch.file if self.launch else str(self.path)
        detail = f"{rpn} ranks per node, {ctx.platform.name} has {want} devices per node"
        if held is not None and held < want:
            asked = f"{rpn} ranks per node on the {held} devices per node the job asks Slurm for"
            found = check_observed({"ranks_per_node_matches": rpn == held}, ctx, file=file, line=line, detail=asked)
            if rpn != held:
                return found
            found = check_observed({"ranks_per_node_matches": False}, ctx, file=file, line=line, detail=detail)
            return [
                replace(f, severity="info", message=f"{asked} ({ctx.platform.name} has {want}): {ASKS_FEWER}")
                for f in found
            ]
        found = check_observed({"ranks_per_node_matches": rpn == want}, ctx, file=file, line=line, detail=detail)
        if rpn < want and (self.nodes() or ctx.nodes) == 1:
            return [
                replace(
                    f,
                    severity="info",
                    message=f"{detail} on one node: a single-node job using {rpn} of them: {SMALL_RUN}",
                )
                for f in found
            ]
        return found

    def cpu_bind(self) -> str | None:
        """The launch's --cpu-bind as depth:D or list:..., variables resolved; None when absent."""
        if self.launch is None:
            return None
        raw = option_str(self.launch, ("--cpu-bind", "-cpu-bind", "--cpu_bind"))
        if raw is None:
            return None
        raw = resolve(raw, self.outer, self.launch.line)
        mode = re.sub(r"^verbose,", "", raw)
        if mode == "depth":
            depth = option_int(self.launch, ("-d", "--depth", "-depth"), self.outer)
            return f"depth:{depth}" if depth else None
        return mode

    def env_values(self) -> list[tuple[str, str, str, int]]:
        """(name, value, file, line) of every value a rank may run with: each side of a branch
        the script leaves open counts; a value the doctor cannot know is given as written."""
        out = [
            (n, b.value if b.value is not None else b.raw, *b.where)
            for n, bound in self.rank_env.items()
            for b in bound
            if b.exported and not b.unset and b.where is not None and (b.value is not None or b.raw)
        ]
        for e in self.timeline:
            if e.kind == "launch":
                out += [(n, v, f, ln) for n, (v, f, ln) in launch_env_options(e).items()]
        return out

    def final_env(self) -> dict[str, tuple[str, str, int]]:
        return {n: (v, f, ln) for n, v, f, ln in self.env_values()}

    def known_env(self) -> dict[str, str]:
        """Variables each rank surely runs with (one known value): what a script's
        os.environ.get reads."""
        return {
            n: bound[0].value
            for n, bound in self.rank_env.items()
            if len(bound) == 1 and bound[0].exported and bound[0].value is not None and not bound[0].unset
        }

    def _check_env(self, ctx: Context) -> list[Finding]:
        out: list[Finding] = []
        for name, value, file, line in self.env_values():
            out += [f for f in check_env_values({name: (value, file, line)}, ctx) if f not in out]
        return out

    def _check_compile(self, ctx: Context) -> list[Finding]:
        line = self._compile_line()
        if line is None:
            return []
        return check_observed(
            {"compile": True}, ctx, file=str(self.path), line=line, detail="the launch passes a torch.compile flag"
        )


ASKS_FEWER = "the job holds only these devices (the rest go to other jobs): one rank per device it holds"
"""A Slurm job that asks for fewer devices than the node has and runs one rank on each."""

SMALL_RUN = "fine for a deliberate small or single-device run; the other devices sit idle"
"""A single-node job with fewer ranks than devices: what the doctor says instead of the rule's reason."""


def on_branch(f: Finding, timeline: list[Event]) -> Finding:
    """A finding about events the script runs only on an open branch says which branch; when
    that branch does not run by default it is a warning."""
    at = [e for e in timeline if e.file == f.file and e.line == f.line]
    if not at or any(not e.branch for e in at):
        return f
    conds = list(dict.fromkeys(c for c in at[0].branch))
    message = f"{f.message} [{'; '.join(c.describe() for c in conds)}]"
    severity = f.severity if all(e.runs_by_default for e in at) or f.severity != "error" else "warning"
    return replace(f, message=message, severity=severity)


def read_shell_launcher(path: Path, text: str, modules: tuple[ModuleFacts, ...] = ()) -> LauncherFile:
    try:
        interp = read_events(text, str(path), path.parent, modules)
    except RecursionError:
        raise SpecError(
            f"--launcher {str(path)[:120]}: nested too deeply to read (no job script nests hundreds of blocks)"
        ) from None
    main = main_launch(interp)
    mpi = main is not None and main.event.name in MPI_LAUNCHERS
    rank_state = main.rank_state if mpi and main.rank_state is not None else interp.final
    return LauncherFile(
        path=path,
        header=parse_header(text),
        outer=interp.events,
        per_rank=main.per_rank if mpi else None,
        launch=main.event if main else None,
        directives=directives(text),
        pbs=PbsDirectives.read(text),
        modules=modules,
        rank_env=rank_state.env,
    )


PYTHON_SHEBANG = re.compile(r"^#!.*\bpython[\d.]*\b")


def looks_like_python(path: Path, text: str) -> bool:
    """A .py file, a Python shebang, or text that parses as Python with an import, a def or a
    class (a shell script never does; `true` alone parses as both and is read as shell)."""
    if path.suffix == ".py" or PYTHON_SHEBANG.match(text):
        return True
    if re.match(r"^#!.*\b(ba|z|da|k)?sh\b", text):
        return False
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return any(isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)) for n in tree.body)


_JOB_MARKERS = re.compile(r"^\s*(#PBS|#SBATCH|mpiexec|mpirun|srun|torchrun)\b", re.M)


def job_template_line(text: str) -> int | None:
    """Line of the first string literal that reads like a job script (#PBS, mpiexec, ...)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    return next(
        (
            n.lineno
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and _JOB_MARKERS.search(n.value)
        ),
        None,
    )


def read_launcher(
    path: Path, modules: tuple[ModuleFacts, ...] = ()
) -> "LauncherFile | StrategyTomlFile | DsConfigFile":
    """A shell launcher, a strategy.toml or a ds_config.json (by suffix); a Python program is
    refused: the doctor reads the job script it writes, never Python as shell."""
    path = Path(path)
    try:
        if path.is_dir() or not path.exists():
            raise SpecError(f"--launcher {path}: not a file")
        text = path.read_text(errors="replace")
    except OSError as e:  # unreadable, or a name too long
        raise SpecError(f"cannot read --launcher {str(path)[:120]}: {e.strerror}") from None
    if path.suffix == ".toml":
        return StrategyTomlFile.read(path, text)
    if path.suffix == ".json":
        return DsConfigFile.read(path, text)
    if looks_like_python(path, text):
        template = job_template_line(text)
        holds = f" (it holds a job-script template at line {template})" if template else ""
        raise SpecError(
            f"--launcher {str(path)[:120]} is a Python program{holds}, not a job script: pass the job "
            f"script it writes (e.g. its dry-run output) as --launcher, or the training script as --script"
        )
    return read_shell_launcher(path, text, modules)

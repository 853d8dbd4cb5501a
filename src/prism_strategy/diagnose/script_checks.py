"""Script checks: static analysis of a training script with `ast` (nothing is imported or run).

The reader (inputs/script_file.py, inputs/script_reader.py) records every call and assignment; values are followed
through variables, `if` tests and `**kwargs` within a function (inputs/py_values.py), and
`os.environ.get(NAME, default)` reads the exports of the launchers given with the script. Each
check reports what it finds as rule facts and data/rules.toml decides; a finding on code that an
environment variable switches says so, and is a warning when the switch is off by default.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from prism_strategy.diagnose.device_checks import check_device
from prism_strategy.diagnose.findings import Context, Finding, check_observed
from prism_strategy.diagnose.launch_flags import off_by_flag, script_launch_checks
from prism_strategy.diagnose.rocm_checks import check_backend_name
from prism_strategy.inputs.py_values import Alt, Symbol, Values
from prism_strategy.inputs.script_file import DDP_CALLS, FSDP1_CALLS, ScriptFile
from prism_strategy.inputs.script_file import read_script as read_file
from prism_strategy.inputs.script_reader import Call
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.libraries import libraries
from prism_strategy.strategies import FSDP1_SHARDING

_MESH = {"init_device_mesh", "DeviceMesh"}
_CTORS = {"ones", "zeros", "empty", "rand", "randn", "full", "tensor"}
_FP32 = {"float32", "float"}
_ENV_NOTE = re.compile(r" exported by |^\w+ unset: |^the job sets ")
_READ_NOTE = re.compile(r"^\w+ = .*(os\.environ|getenv).* \(line \d+\)$")
"""The assignment that read the variable a test compares: sharding = os.environ.get(...) (line 14)."""
_ROOT_ONLY = {"engine": "fsdp2", "root_only_wrap": True}
"""FSDP (FullyShardedDataParallel) and fully_shard alike: the engine is FSDP, whatever the context says."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ScriptChecks:
    """doctor's view of one script: what it tells the context, and the findings on it."""

    s: ScriptFile

    @property
    def path(self) -> Path:
        return self.s.path

    def refine(self, ctx: Context) -> Context:
        devices = {
            lib.device for lib in libraries() if lib.device != "cpu" and {lib.device, lib.torch_backend} & self.s.words
        }
        return ctx.refined(devices=frozenset(devices), engines=frozenset(self.s.engines()))

    def check(self, ctx: Context) -> list[Finding]:
        try:
            return self._check(ctx)
        except RecursionError:
            raise SpecError(f"--script {self.s.path}: an expression nested too deeply to follow") from None

    def _check(self, ctx: Context) -> list[Finding]:
        vals = self.s.values(ctx.launcher_env)
        out = []
        for check in (
            _device_id,
            _unused_and_static,
            _compile,
            _empty_cache,
            _loader_after_mesh,
            _one_element_probe,
            _root_only_wrap,
            check_backend_name,
            script_launch_checks,
            check_device,
        ):
            for f in check(self.s, ctx):
                switched = self._switched(f, vals, ctx)
                if switched is not None:
                    out.append(switched)
        return out

    def _switched(self, f: Finding, vals: Values, ctx: Context) -> Finding | None:
        """A finding on a call under `if` tests that an environment variable decides: dropped
        when the test fails, noted when it holds, a warning when it holds only if the job sets
        the variable. Tests nothing decides (a parameter, args.x) leave the finding as it was."""
        call = next((c for c in self.s.calls if c.line == f.line and c.conds), None)
        if call is None:
            return f
        gated = off_by_flag(self.s, call, ctx)
        if gated is not None:
            f = replace(
                f, severity="warning" if f.severity == "error" else f.severity, message=f"{f.message} [{gated}]"
            )
        d = vals.conditions(call.conds, call.scope, call.line)
        if d.taken is False:
            return None
        notes = [n for n in d.notes if "cannot decide" not in n]
        if not notes:
            return f
        severity = "warning" if f.severity == "error" and not d.by_default else f.severity
        return replace(f, severity=severity, message=f"{f.message} [{'; '.join(notes)}]")


def read_script(path: Path) -> ScriptChecks:
    return ScriptChecks(s=read_file(path))


def _notes(alt: Alt) -> str:
    return f" ({'; '.join(alt.notes)})" if alt.notes else ""


# --- the checks ------------------------------------------------------------------------------
def _device_id(s: ScriptFile, ctx: Context) -> list[Finding]:
    return [
        f
        for c in s.find("init_process_group")
        if c.kwarg("device_id") is not None
        for f in check_observed({"passes_device_id": True}, ctx, **s.where(c, "init_process_group(..., device_id=...)"))
    ]


def _unused_and_static(s: ScriptFile, ctx: Context) -> list[Finding]:
    """find_unused_parameters=True, written so or through a variable, **kwargs or an
    environment switch (its default, or the launcher's export)."""
    out = []
    set_static = any(c.last == "_set_static_graph" for c in s.calls)
    vals = s.values(ctx.launcher_env)
    for c in s.calls:
        if c.last not in DDP_CALLS and not c.kw_true("find_unused_parameters"):
            continue
        on = next((a for a in s.kwarg_values(c, "find_unused_parameters", vals, absent=False) if a.value is True), None)
        if on is None:
            continue
        static = any(a.value is True for a in s.kwarg_values(c, "static_graph", vals, absent=False)) or set_static
        observed = {
            "find_unused_parameters": True,
            "static_graph": static,
            **({"engine": "ddp"} if c.last in DDP_CALLS else {}),
        }
        detail = "find_unused_parameters=True with static_graph" if static else "find_unused_parameters=True"
        found = check_observed(observed, ctx, **s.where(c, detail + _notes(on)))
        if not on.by_default:
            found = [replace(f, severity="warning") if f.severity == "error" else f for f in found]
        out += found
    return out


def _is_compile(s: ScriptFile, c: Call) -> bool:
    if c.name in ("torch.compile", "torch._dynamo.optimize") or c.kw_true("compile"):
        return True
    base = c.name.rsplit(".", 1)[0] if "." in c.name else ""
    return bool(c.last == "compile" and base and base.split(".")[0] not in s.modules)


def _compile(s: ScriptFile, ctx: Context) -> list[Finding]:
    """The first torch.compile that can run (one under a test the values decide false cannot)."""
    vals = s.values(ctx.launcher_env)
    first = next(
        (c for c in s.calls if _is_compile(s, c) and vals.conditions(c.conds, c.scope, c.line).taken is not False), None
    )
    if first is None:
        return []
    whole_under_fsdp1 = not first.in_loop and any(c.last in FSDP1_CALLS for c in s.calls)  # PRISM's stack
    return check_observed(
        {"compile": True, "compiles_whole_under_fsdp1": whole_under_fsdp1},
        ctx,
        **s.where(first, f"{first.name}(...) compiles the model"),
    )


def _empty_cache(s: ScriptFile, ctx: Context) -> list[Finding]:
    loop_scopes = {c.last for c in s.calls if c.in_loop}
    out = []
    for c in s.find("empty_cache"):
        if c.name.startswith("torch.cuda.") or not (c.in_loop or c.scope in loop_scopes):
            continue
        extra = {"device": "xpu"} if c.name.startswith("torch.xpu.") else {}
        if "fsdp2" in s.engines():  # the loop may run the FSDP model, whatever other engine is also there
            extra["engine"] = "fsdp2"
        out += check_observed(
            {"calls_empty_cache": True, **extra}, ctx, **s.where(c, f"{c.name}() inside the training loop")
        )
    return out


def _worker_loader_lines(s: ScriptFile, scope: str) -> list[int]:
    lines = []
    for c in s.find("DataLoader"):
        workers = c.kwarg("num_workers")
        if c.scope == scope and workers is not None and not (isinstance(workers, ast.Constant) and workers.value == 0):
            lines.append(c.line)
    return lines


def _loader_after_mesh(s: ScriptFile, ctx: Context) -> list[Finding]:
    out = []
    for mesh in s.find(*_MESH):
        late = [n for n in _worker_loader_lines(s, mesh.scope) if n > mesh.line]
        late += [
            c.line
            for c in s.calls
            if c.scope == mesh.scope and c.line > mesh.line and "." not in c.name and _worker_loader_lines(s, c.name)
        ]
        if late:
            first = min(late)
            out += check_observed(
                {"workers_after_mesh": True},
                ctx,
                file=str(s.path),
                line=first,
                detail=f"a DataLoader with workers is created after the device mesh (line {mesh.line})",
            )
            break
    return out


def _one_element(s: ScriptFile, node: ast.expr, scope: str, line: int) -> bool:
    """A 1-element fp32 tensor: torch.ones(1), torch.tensor([1.0]), or a name bound to one."""
    if isinstance(node, ast.Name):
        bound = [a.value for a in s.assigns.get((scope, node.id), []) if a.line <= line]
        return bool(bound) and bound[-1] is not None and _one_element(s, bound[-1], scope, line)
    if not isinstance(node, ast.Call) or not isinstance(node.func, (ast.Attribute, ast.Name)):
        return False
    fn = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
    if fn not in _CTORS or not node.args:
        return False
    dtype = next((k.value for k in node.keywords if k.arg == "dtype"), None)
    first = node.args[0]
    if fn == "tensor":
        items = first.elts if isinstance(first, (ast.List, ast.Tuple)) else [first]
        floaty = any(isinstance(i, ast.Constant) and isinstance(i.value, float) for i in items)
        return len(items) == 1 and (_is_fp32(dtype) if dtype is not None else floaty)
    size = first.elts if isinstance(first, (ast.List, ast.Tuple)) else node.args[: 1 if fn == "full" else None]
    one = len(size) == 1 and isinstance(size[0], ast.Constant) and size[0].value == 1
    return one and (dtype is None or _is_fp32(dtype))


def _is_fp32(dtype: ast.expr) -> bool:
    return isinstance(dtype, ast.Attribute) and dtype.attr in _FP32


def _one_element_probe(s: ScriptFile, ctx: Context) -> list[Finding]:
    out = []
    for c in s.find("all_reduce"):
        if c.node.args and _one_element(s, c.node.args[0], c.scope, c.line):
            out += check_observed(
                {"one_element_fp32_allreduce": True}, ctx, **s.where(c, "all_reduce of a 1-element fp32 tensor")
            )
    return out


def _root_only_wrap(s: ScriptFile, ctx: Context) -> list[Finding]:
    fsdp2 = s.find("fully_shard")
    fsdp1 = [c for c in s.calls if c.last in FSDP1_CALLS]
    out = []
    if len(fsdp2) == 1 and not fsdp2[0].in_loop:
        out += check_observed(
            _ROOT_ONLY, ctx, **s.where(fsdp2[0], "fully_shard() is applied once, to the root module only")
        )
    for call in fsdp1:  # PRISM's distributed.py wraps in two places: FSDP and HSDP
        out += _root_only_fsdp1(s, call, ctx)
    return out


def _on_strategy(paths: list[Alt], ctx: Context) -> list[Alt]:
    """With --strategy, the paths whose sharding_strategy is that strategy (strategies.FSDP1_SHARDING),
    when any is; a call none of whose known paths runs it (an FSDP call under --strategy hsdp_*) has none."""
    if ctx.strategy is None:
        return paths
    named = [(a, FSDP1_SHARDING.get(_sharding_name(a.value.get("sharding_strategy")) or "")) for a in paths]
    mine = [a for a, n in named if n == ctx.strategy.name]
    if mine:
        return mine
    return [a for a, n in named if n is None]


def _sharding_name(v: object) -> str | None:
    return v.name.rsplit(".", 1)[-1] if isinstance(v, Symbol) else None


def _root_only_fsdp1(s: ScriptFile, call: Call, ctx: Context) -> list[Finding]:
    """FSDP(..., auto_wrap_policy=P) with P None or absent on some path, under the job the
    environment defaults give and then under each job an `if` test of the function names
    (ScriptFile.env_scenarios): the first such job, the variable left None and the sharding."""
    for vals in s.env_scenarios(call, s.values(ctx.launcher_env)):
        paths = [
            a
            for a in s.call_kwargs(call, vals)
            if isinstance(a.value, dict)
            and a.value.get("auto_wrap_policy") is None
            and not any(n.startswith("under `except") for n in a.notes)  # a fallback, not the job
        ]
        paths = _on_strategy(paths, ctx)
        if paths:
            return _root_only_finding(s, call, ctx, vals, next((a for a in paths if a.by_default), paths[0]))
    return []


def _root_only_finding(s: ScriptFile, call: Call, ctx: Context, vals: Values, root: Alt) -> list[Finding]:
    job = [n for n in root.notes if n.startswith("the job sets ")]
    when = f" when {job[0]}" if job else ""
    detail = f"{call.last}() at line {call.line} wraps only the root module{when}: {_policy_flow(s, call, vals)}"
    sharding = root.value.get("sharding_strategy")
    if isinstance(sharding, Symbol) and sharding.name.upper().endswith(("SHARD_GRAD_OP", "SHARD_ZERO2")):
        detail += (
            f"; under {sharding.name} the whole model is one FSDP unit: one all-gather of every "
            "parameter, which stay gathered from forward to backward, and whole-model gradients until "
            "the one reduce-scatter (DDP's memory with only the optimizer state sharded; PRISM's 7B "
            "out-of-memory)"
        )
    elif isinstance(sharding, Symbol):
        detail += f"; under {sharding.name} every forward and backward all-gathers the whole model at once"
    found = check_observed(_ROOT_ONLY, ctx, **s.where(call, detail))
    if not root.by_default:
        found = [replace(f, message=f"{f.message} (only on a path the job's environment must select)") for f in found]
    return found


def _policy_flow(s: ScriptFile, call: Call, vals: Values) -> str:
    """How no policy reaches the call: the variable passed as auto_wrap_policy (directly, in a
    dict(...) or a kwargs item), its `= None` that reaches the call, and the reassignments the
    job skips."""
    names = _policy_names(s, call)
    out: list[str] = []
    told: set[int] = set()
    for a in sorted(s.assigns_in(call.scope), key=lambda a: a.line):
        name = next((n for n in names if a in s.assigns.get((call.scope, n), [])), None)
        if name is None or a.line >= call.line or vals.conditions(a.conds, call.scope, a.line).taken is False:
            continue
        if isinstance(a.value, ast.Constant) and a.value.value is None:
            out.append(f"{name} = None (line {a.line}){_under(a.conds[-1:], vals, call, told)}")
    for a in sorted(s.assigns_in(call.scope), key=lambda a: a.line):
        name = next((n for n in names if a in s.assigns.get((call.scope, n), [])), None)
        if name is None or a.line >= call.line or not out or not a.conds:
            continue
        skipped = [c for c in a.conds if vals.conditions((c,), call.scope, a.line).taken is False]
        if skipped and not _is_none(a.value):
            out.append(f"reassigned at line {a.line} only{_under(skipped[:1], vals, call, told)}, which this job skips")
            break
    if not out:
        return "no auto_wrap_policy"
    return "auto_wrap_policy stays None: " + "; ".join(out)


def _policy_names(s: ScriptFile, call: Call) -> set[str]:
    """Variables given as auto_wrap_policy in the call's function: FSDP(auto_wrap_policy=p),
    dict(auto_wrap_policy=p), {"auto_wrap_policy": p} or kw["auto_wrap_policy"] = p."""
    nodes: list[ast.expr] = [call.node, *(a.value for a in s.assigns_in(call.scope) if a.value is not None)]
    out = set()
    for top in nodes:
        for n in ast.walk(top):
            if isinstance(n, ast.Call):
                out |= {k.value.id for k in n.keywords if k.arg == "auto_wrap_policy" and isinstance(k.value, ast.Name)}
            if isinstance(n, ast.Dict):
                out |= {
                    v.id
                    for k, v in zip(n.keys, n.values)
                    if isinstance(k, ast.Constant) and k.value == "auto_wrap_policy" and isinstance(v, ast.Name)
                }
    return out


def _under(conds: Sequence[tuple[ast.expr, bool]], vals: Values, call: Call, told: set[int]) -> str:
    """The test, and (the first time it is named) what decides it for this job: the variable it
    compares, read from the environment."""
    if not conds:
        return ""
    test, side = conds[0]
    if id(test) in told:
        return f" {'under' if side else 'in the else of'} that `if`"
    told.add(id(test))
    notes = dict.fromkeys(n for a in vals.eval(test, call.scope, test.lineno) for n in a.notes)
    why = "; ".join(n for n in notes if _ENV_NOTE.search(n) or _READ_NOTE.search(n))
    why = f" ({why})" if why else ""
    return f" {'under' if side else 'in the else of'} `if {ast.unparse(test)[:70]}` (line {test.lineno}){why}"


def _is_none(v: ast.expr | None) -> bool:
    return isinstance(v, ast.Constant) and v.value is None

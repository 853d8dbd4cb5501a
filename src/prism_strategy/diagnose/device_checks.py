"""Script facts about the device and DeepSpeed batch a script fixes:

- hardcodes_cuda: `init_process_group(backend="nccl")` (written so or through a variable with one
  value) or `torch.cuda.set_device(...)` / `torch.device("cuda...")` / `.cuda()` / `.to("cuda")`
  on no branch of the script (a call under `if`, or inside `a if cond else b`, is a choice the
  script makes, not a fixed device). data/rules.toml's script-hardcodes-cuda makes it an error on XPU.
- ds_batch_holds: a DeepSpeed config dict in the script (`{"train_batch_size": ..., ...}` with
  integer values) against the job's ranks (--nodes x the platform's devices per node):
  DeepSpeed's runtime/config.py _batch_assertion requires train_batch_size =
  train_micro_batch_size_per_gpu x gradient_accumulation_steps x world size, and with one of the
  two missing derives it, which needs train_batch_size divisible by the rest.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from prism_strategy.diagnose.findings import Context, Finding, check_observed
from prism_strategy.specs.libraries import library_of_device

if TYPE_CHECKING:
    from prism_strategy.inputs.script_file import ScriptFile

_CUDA_CALLS = ("torch.cuda.set_device",)
_DS_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


def check_device(s: "ScriptFile", ctx: Context) -> list[Finding]:
    return _hardcoded_cuda(s, ctx) + _ds_batch(s, ctx)


def _branched(s: "ScriptFile") -> set[tuple[int, int]]:
    """(line, column) of every call inside a conditional expression or a boolean choice."""
    try:
        tree = ast.parse(s.path.read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return set()
    return {
        (n.lineno, n.col_offset)
        for e in ast.walk(tree)
        if isinstance(e, (ast.IfExp, ast.BoolOp))
        for n in ast.walk(e)
        if isinstance(n, ast.Call)
    }


def _is_cuda(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.split(":")[0] == "cuda"


def _hardcoded_cuda(s: "ScriptFile", ctx: Context) -> list[Finding]:
    branched = _branched(s)
    vals = s.values(ctx.launcher_env)
    out: list[Finding] = []
    for c in s.calls:
        if c.conds or (c.line, c.node.col_offset) in branched:
            continue
        detail = None
        if c.last == "init_process_group":
            cuda = library_of_device("cuda").torch_backend  # torch's CUDA (and ROCm) backend
            alts = s.kwarg_values(c, "backend", vals, absent=None)
            positional = c.node.args[0] if c.node.args else None
            fixed = (alts and all(a.value == cuda for a in alts)) or (
                isinstance(positional, ast.Constant) and positional.value == cuda
            )
            detail = f"init_process_group(backend={cuda!r})" if fixed else None
        elif c.name in _CUDA_CALLS:
            detail = f"{c.name}(...)"
        elif c.name == "torch.device" and c.node.args and _is_cuda(c.node.args[0]):
            detail = f"torch.device({c.node.args[0].value!r})"
        elif c.last == "cuda" and not c.name.startswith("torch.") and not c.node.args:
            detail = f"{c.name}()"
        elif c.last == "to" and c.node.args and _is_cuda(c.node.args[0]):
            detail = f".to({c.node.args[0].value!r})"
        if detail is not None:
            out += check_observed({"hardcodes_cuda": True}, ctx, **s.where(c, f"{detail} fixes CUDA"))
        if len(out) >= 2:
            break
    return out


def _ds_batch(s: "ScriptFile", ctx: Context) -> list[Finding]:
    ranks = ctx.nodes * ctx.platform.hardware.devices_per_node if ctx.nodes and ctx.platform else None
    if ranks is None:
        return []
    try:
        tree = ast.parse(s.path.read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return []
    for d in ast.walk(tree):
        if not isinstance(d, ast.Dict):
            continue
        keys = {k.value: v.value for k, v in zip(d.keys, d.values, strict=True) if _int_item(k, v)}
        if "train_batch_size" not in keys:
            continue
        total, micro, accum = (keys.get(k) for k in _DS_KEYS)
        per_step = (micro or 1) * (accum or 1) * ranks
        holds = total == per_step if micro and accum else total > 0 and total % per_step == 0
        shown = ", ".join(f"{k}={keys[k]}" for k in _DS_KEYS if k in keys)
        detail = f"DeepSpeed config ({shown}) on {ranks} ranks ({ctx.nodes} x {ctx.platform.name})"
        return check_observed({"ds_batch_holds": holds}, ctx, file=str(s.path), line=d.lineno, detail=detail)
    return []


def _int_item(k: ast.expr | None, v: ast.expr) -> bool:
    return (
        isinstance(k, ast.Constant)
        and k.value in _DS_KEYS
        and isinstance(v, ast.Constant)
        and isinstance(v.value, int)
        and not isinstance(v.value, bool)
    )

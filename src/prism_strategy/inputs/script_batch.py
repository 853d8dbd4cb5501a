"""A training script's batch as its module-level constants say it (nanoGPT's train.py, 3adf61e:
`gradient_accumulation_steps = 5 * 8`, `batch_size = 12`, then under DDP
`gradient_accumulation_steps //= ddp_world_size`): readers for micro_batch, grad_accum and
global_batch, the inputs/script_reads.py way (every candidate, with its line).

A constant the script later divides by the world size is the accumulation of the whole job, not
of a rank: the global batch (batch_size x gradient_accumulation_steps) is what the script fixes,
and the plan derives each rank's accumulation from its own rank count. A script that execs a
configurator (nanoGPT's `exec(open('configurator.py').read())`) may have these overridden from a
config file or `--key=value`: the note says so."""

from __future__ import annotations

import ast

from prism_strategy.inputs.script_reads import Found, Reader

MICRO = ("batch_size", "micro_batch_size")
ACCUM = ("gradient_accumulation_steps", "grad_accum_steps", "grad_accum")
WORLD_WORDS = ("world_size", "world", "ddp_world_size", "num_processes")


def _constants(r: Reader, names: tuple[str, ...]) -> list[tuple[str, int, int]]:
    """(name, value, line) of module-level `name = <int expression>` assignments."""
    out = []
    for node in r.tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in names:
                v = _integer(node.value)
                if v is not None and v > 0:
                    out.append((name, v, node.lineno))
    return out


OPS = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__, ast.FloorDiv: int.__floordiv__}


def _integer(node: ast.expr) -> int | None:
    """An integer literal or arithmetic of them (`5 * 8`); None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in OPS:
        a, b = _integer(node.left), _integer(node.right)
        if a is not None and b is not None and not (isinstance(node.op, ast.FloorDiv) and b == 0):
            return OPS[type(node.op)](a, b)
    return None


def _divided_by_world(r: Reader, name: str) -> int | None:
    """The line of a module-level `name //= <world size>` (under an `if` too), else None."""
    for node in ast.walk(ast.Module(body=r.tree.body, type_ignores=[])):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if (
            isinstance(node, ast.AugAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == name
            and isinstance(node.op, (ast.FloorDiv, ast.Div))
            and any(isinstance(n, ast.Name) and n.id.lower() in WORLD_WORDS for n in ast.walk(node.value))
        ):
            return node.lineno
    return None


def _configurator(r: Reader) -> str:
    execs = [c for c in r.s.calls if c.name == "exec" and c.scope == "<module>"]
    return (
        f"; line {execs[0].line} execs a configurator, which may override it (a config file or --key=value)"
        if execs
        else ""
    )


def _found(r: Reader, line: int, value: object, note: str) -> Found:
    return Found(value=value, line=line, evidence=r.text(line), note=note)


def micro_batch(r: Reader) -> list[Found]:
    return [
        _found(r, line, v, f"module-level {name}: each rank's micro-batch{_configurator(r)}")
        for name, v, line in _constants(r, MICRO)
    ]


def grad_accum(r: Reader) -> list[Found]:
    out = []
    for name, v, line in _constants(r, ACCUM):
        if _divided_by_world(r, name) is None:
            out.append(_found(r, line, v, f"module-level {name}: each rank's accumulation{_configurator(r)}"))
    return out


def global_batch(r: Reader) -> list[Found]:
    """batch_size x the job's accumulation, where the script divides the accumulation by its world size."""
    micro = _constants(r, MICRO)
    out = []
    for name, v, line in _constants(r, ACCUM):
        div = _divided_by_world(r, name)
        if div is not None and len(micro) == 1:
            out.append(
                _found(
                    r,
                    line,
                    micro[0][1] * v,
                    f"{micro[0][0]} {micro[0][1]} (line {micro[0][2]}) x {name} {v}, which line {div} divides "
                    f"by the world size: the job's batch is fixed, each rank accumulates {v} / ranks"
                    f"{_configurator(r)}",
                )
            )
    return out

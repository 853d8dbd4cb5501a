"""Launch helpers that start one process per node and spawn the ranks there: torchrun (and
`python -m torch.distributed.run`), `accelerate launch`, and DeepSpeed's `deepspeed` launcher.
Under `srun` / `mpiexec` each task is such a helper, so a node runs tasks x spawned ranks; alone,
the helper runs on the node it is started on and spans more only when told (--nnodes).

What each helper's options mean, from its own source:
- torchrun: --nproc-per-node (default 1; `gpu` / `xpu` / `auto`: one per visible device), --nnodes
  (torch/distributed/run.py, get_args_parser and determine_local_world_size);
- accelerate launch: --num_processes is the total over --num_machines (default 1)
  (accelerate/commands/launch.py: "The total number of processes to be launched in parallel");
- deepspeed: --num_gpus / --num_accelerators per node (default: all the node shows), --num_nodes
  (deepspeed/launcher/runner.py parse_args).
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass

from prism_strategy.diagnose.launch_options import Event

PER_DEVICE = frozenset({"gpu", "xpu", "cuda", "auto"})
"""torchrun --nproc-per-node values meaning one process per visible device."""
_SLURM_NODES = ("SLURM_NNODES", "SLURM_JOB_NUM_NODES")


@dataclass(frozen=True, kw_only=True, slots=True)
class Spawn:
    """A launch helper in a launch command, and what its options say."""

    program: str
    """torchrun, accelerate launch or deepspeed."""
    per_node: int | None
    """Ranks it starts on its node; None when its options do not say (a config file holds it)."""
    one_per_device: bool
    """It starts one rank per device the node shows (torchrun `gpu`, deepspeed's default)."""
    nnodes: str | None
    """The nodes it spans, as its options give them (None: not given, so one)."""


def spawned(launch: Event, outer: list[Event], nodes: int | None) -> Spawn | None:
    """The launch helper a launch runs (directly or as the srun / mpiexec task), or None."""
    words = expand_words(launch, outer, nodes)
    for k, w in enumerate(words):
        base = w.rsplit("/", 1)[-1]
        if base.startswith("python") and words[k + 1 : k + 2] == ["-m"] and words[k + 2 : k + 3]:
            base = words[k + 2]
            k += 2
        if base == "accelerate":  # only `accelerate launch` starts ranks
            if words[k + 1 : k + 2] != ["launch"]:
                continue
            k += 1
        read = HELPERS.get(base)
        if read is not None:
            return read(words[k + 1 :])
    return None


def _opt(words: list[str], names: tuple[str, ...]) -> str | None:
    for k, w in enumerate(words):
        for n in names:
            if w.startswith(n + "="):
                return w[len(n) + 1 :]
            if w == n and k + 1 < len(words):
                return words[k + 1]
    return None


def _int(raw: str | None) -> int | None:
    return int(raw) if raw is not None and raw.isdigit() else None


def _torchrun(words: list[str]) -> Spawn:
    raw = _opt(words, ("--nproc-per-node", "--nproc_per_node"))
    per_device = raw is not None and raw.strip("'\"") in PER_DEVICE
    return Spawn(
        program="torchrun",
        per_node=1 if raw is None else _int(raw),
        one_per_device=per_device,
        nnodes=_opt(words, ("--nnodes",)),
    )


def _accelerate(words: list[str]) -> Spawn:
    total = _int(_opt(words, ("--num_processes", "--num-processes")))
    machines_raw = _opt(words, ("--num_machines", "--num-machines"))
    machines = _int(machines_raw) if machines_raw is not None else 1
    per_node = total // machines if total and machines and total % machines == 0 else None
    return Spawn(program="accelerate launch", per_node=per_node, one_per_device=False, nnodes=machines_raw)


def _deepspeed(words: list[str]) -> Spawn:
    raw = _opt(words, ("--num_gpus", "--num_accelerators"))
    return Spawn(
        program="deepspeed",
        per_node=_int(raw),
        one_per_device=raw is None,
        nnodes=_opt(words, ("--num_nodes",)) or _opt(words, ("--hostfile", "-H")),
    )


HELPERS = {
    "torchrun": _torchrun,
    "torch.distributed.run": _torchrun,
    "torch.distributed.launch": _torchrun,
    "accelerate": _accelerate,
    "deepspeed": _deepspeed,
}
"""The launch helpers by program (or `python -m` module) name, and the reader of their options."""

_VAR = re.compile(r"\$\{?([A-Za-z_]\w*)\}?")
_ARITH = re.compile(r"\$\(\((.*?)\)\)", re.S)


def expand_words(launch: Event, outer: list[Event], nodes: int | None) -> list[str]:
    """The launch's words after the job script's own variables are put in and split the way the
    shell splits an unquoted expansion (`srun $CMD` with CMD="$LAUNCHER $SCRIPT"); SLURM_NNODES is
    the job's node count where known; what stays unknown stays as written."""
    values = {e.name: e.value for e in outer if e.kind == "export" and e.line <= launch.line}
    if nodes:
        values.update(dict.fromkeys(_SLURM_NODES, str(nodes)))
    text = " ".join(launch.args)
    for _ in range(6):
        new = _ARITH.sub(lambda m: _arith(m.group(1), values), text)
        new = _VAR.sub(lambda m: values.get(m.group(1), m.group(0)), new)
        if new == text:
            break
        text = new
    return [launch.name, *text.replace("\\\n", " ").split()]


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


def _arith(expr: str, values: dict[str, str]) -> str:
    """$(( A * B )) with the job script's values; left as written when a name is unknown."""
    text = _VAR.sub(lambda m: m.group(1), expr)
    text = re.sub(r"[A-Za-z_]\w*", lambda m: values.get(m.group(0), m.group(0)), text).replace("/", "//")
    try:
        value = _eval(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError):
        return f"$(({expr}))"
    return str(value)


def _eval(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.left), _eval(node.right))
    raise ValueError("not arithmetic on known integers")

"""Fault injection for any training loop: the four failure shapes of docs/domain.md section 6.

```python
from faults import FaultInjector, add_fault_args, fault_from_args
add_fault_args(parser)                         # --fault, --fault-step, --fault-rank, --fault-scale
faults = FaultInjector(fault_from_args(args), rank=ctx.rank)
faults.attach(model)                           # the inner nn.Module, before or after wrapping
for step, batch in enumerate(loader):
    faults.set_step(step)
    faults.before_batch()                      # slow-data: the data phase
    seq = faults.seq_len(args.seq_len)         # input skew: a variable sequence length
    ...
```

Kinds (all start at ``--fault-step``; ``--fault-scale`` is the kind's knob):

* ``collapse``: every rank sleeps in backward (a grad hook on the model output), growing by
  ``scale`` seconds per step (capped at 100 x scale): backward of all ranks rises together,
  forward unchanged.
* ``slow-rank``: rank ``--fault-rank`` does ``scale`` seconds of extra matmuls (CPU time on a
  CPU device) before each forward: its compute is slower, the others wait in the gradient
  collective.
* ``slow-wait``: rank ``--fault-rank`` sleeps ``scale`` seconds before each forward: its wall
  time is slower but not its CPU time (as when it waits on storage, a slower device or a core).
* ``slow-data``: rank ``--fault-rank`` sleeps ``scale`` seconds in `before_batch()`, the data
  phase of the loop (a slow data loader).
* ``kill``: at step ``--fault-step`` rank ``--fault-rank`` is killed (SIGKILL) in its forward:
  the run ends abruptly, with no close record and no hang report.
* ``hang``: at step ``--fault-step`` rank ``--fault-rank`` stops before its forward and never
  enters the step's collectives (sleeps ``scale`` seconds, default one hour).
* ``input-skew``: `seq_len(base)` returns a length drawn per (step, rank) from
  [scale x base, base]; step time then follows the batch's length.
* ``collective-collapse``: the collective ``--fault-op`` (all_gather, reduce_scatter, all_reduce)
  takes longer, by ``scale`` seconds per step more each step (capped at 10 x scale), spread over
  its calls of the step (a sleep after each call of the ``torch.distributed`` function the engines
  call: FSDP2's ``all_gather_single`` / ``reduce_scatter_single``, ``all_reduce``), on every rank,
  or with ``--fault-node`` only on the ranks of ``--fault-rank``'s node.
* ``host-stall``: every rank burns host CPU in backward (a grad hook), growing by ``scale`` seconds
  per step (capped at 10 x scale): host time in backward grows, no collective changes (what allocator retries, a busy host
  thread or CPU contention look like from the host).
* ``gc-pause``: every rank runs full garbage collections in backward over a heap of cyclic
  garbage it keeps, for ``scale`` seconds per step more each step (capped at 10 x scale): real
  GC pauses, which
  ``gc.callbacks`` sees.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import signal
import time
from dataclasses import dataclass
from typing import Any, Callable, Literal, get_args

import torch

FaultKind = Literal[
    "none",
    "collapse",
    "slow-rank",
    "slow-wait",
    "slow-data",
    "hang",
    "kill",
    "input-skew",
    "collective-collapse",
    "host-stall",
    "gc-pause",
]
KINDS: tuple[str, ...] = get_args(FaultKind)
FAULT_OPS = {
    "all_gather": ("all_gather_single", "all_gather_into_tensor"),
    "reduce_scatter": ("reduce_scatter_single", "reduce_scatter_tensor"),
    "all_reduce": ("all_reduce",),
}
"""--fault-op -> the torch.distributed functions the engines call for it."""
GROWING = ("collapse", "collective-collapse", "host-stall", "gc-pause")
DEFAULT_SCALE = {
    "none": 0.0,
    "collapse": 0.05,
    "slow-rank": 0.05,
    "slow-wait": 0.05,
    "slow-data": 0.05,
    "hang": 3600.0,
    "kill": 0.0,
    "input-skew": 0.25,
    "collective-collapse": 0.2,
    "host-stall": 0.2,
    "gc-pause": 0.2,
}
CAP = {"collapse": 100, "collective-collapse": 10, "host-stall": 10, "gc-pause": 10}
"""The growth stops at this many x scale (the new kinds: a collapse that then holds, as PRISM's does)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FaultSpec:
    kind: FaultKind = "none"
    step: int = 20
    """First faulty step (0-based)."""
    rank: int = 2
    """The rank that is slow or hangs (slow-rank, hang)."""
    scale: float | None = None
    """collapse: s of added backward sleep per step; slow-rank: s of extra compute per step;
    slow-wait / slow-data: s of sleep per step; hang: s to stay stuck; input-skew: shortest
    length as a fraction of the base. None: default."""
    seed: int = 0
    op: str = "reduce_scatter"
    """collective-collapse: the collective that slows."""
    node: bool = False
    """collective-collapse: only on the ranks of `rank`'s node (else every rank)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault {self.kind!r}; choose one of {', '.join(KINDS)}")
        if self.op not in FAULT_OPS:
            raise ValueError(f"unknown --fault-op {self.op!r}; choose one of {', '.join(FAULT_OPS)}")
        if self.step < 0 or self.rank < 0:
            raise ValueError(f"fault step and rank must be >= 0, got step={self.step} rank={self.rank}")

    @property
    def knob(self) -> float:
        return DEFAULT_SCALE[self.kind] if self.scale is None else float(self.scale)


def add_fault_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("fault injection (examples/faults.py)")
    g.add_argument("--fault", choices=KINDS, default="none", help="inject a failure shape")
    g.add_argument("--fault-step", type=int, default=20, help="first faulty step (0-based)")
    g.add_argument("--fault-rank", type=int, default=2, help="rank for slow-rank / hang")
    g.add_argument(
        "--fault-scale",
        type=float,
        default=None,
        help="collapse: s/step of backward sleep growth; slow-rank: s of extra compute; "
        "slow-wait / slow-data: s of sleep; hang: s stuck; input-skew: shortest length fraction; "
        "collective-collapse, host-stall, gc-pause: s/step of growth",
    )
    g.add_argument("--fault-op", choices=tuple(FAULT_OPS), default="reduce_scatter", help="collective-collapse: the op")
    g.add_argument(
        "--fault-node", action="store_true", help="collective-collapse: only the ranks of --fault-rank's node"
    )


def fault_from_args(ns: argparse.Namespace) -> FaultSpec:
    return FaultSpec(
        kind=ns.fault,
        step=ns.fault_step,
        rank=ns.fault_rank,
        scale=ns.fault_scale,
        op=getattr(ns, "fault_op", "reduce_scatter"),
        node=getattr(ns, "fault_node", False),
    )


def burn(seconds: float, device: torch.device | str = "cpu", n: int = 128) -> int:
    """Real compute (matmuls) for `seconds` of this thread's CPU time on a CPU device, so the
    extra work stays the same on a busy host; of wall time on an accelerator. Returns how many."""
    a = torch.randn(n, n, device=device)
    on_cpu = a.device.type == "cpu"
    clock = time.thread_time if on_cpu else time.perf_counter
    end, done = clock() + seconds, 0
    while clock() < end:
        a = torch.tanh(a @ a)
        if not on_cpu:
            torch.accelerator.synchronize()
        done += 1
    return done


def _grad_tensor(out: Any) -> torch.Tensor | None:
    """The first tensor requiring grad in a module output (tensor, sequence, dict, HF output)."""
    if isinstance(out, torch.Tensor):
        return out if out.requires_grad else None
    if isinstance(out, dict):
        out = list(out.values())
    elif hasattr(out, "loss") or hasattr(out, "logits"):
        out = [getattr(out, "loss", None), getattr(out, "logits", None)]
    if isinstance(out, (list, tuple)):
        for o in out:
            t = _grad_tensor(o)
            if t is not None:
                return t
    return None


class FaultInjector:
    """Applies one `FaultSpec` on one rank through module hooks and `seq_len`.

    `sleep`, `clock` and `burn_fn` are time.sleep, time.monotonic and `burn` unless a test
    injects its own (to see what a fault does without timing a loaded host)."""

    def __init__(
        self,
        spec: FaultSpec,
        rank: int,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        burn_fn: Callable[..., int] = burn,
        ranks_per_node: int | None = None,
        collect: Callable[[], Any] = gc.collect,
    ) -> None:
        self.spec, self.rank, self.step = spec, rank, 0
        self._sleep, self._clock, self._burn, self._collect = sleep, clock, burn_fn, collect
        self.ranks_per_node = ranks_per_node
        self._handles: list[Any] = []
        self._saved: list[tuple[str, Any]] = []
        self._calls = {"step": -1, "now": 0, "prev": 0}
        self._garbage: list[Any] = []

    def active(self, kind: str) -> bool:
        return self.spec.kind == kind and self.step >= self.spec.step

    def set_step(self, step: int) -> None:
        self.step = step

    def attach(self, module: torch.nn.Module) -> FaultInjector:
        if self.spec.kind in ("slow-rank", "slow-wait", "hang", "kill"):
            self._handles.append(module.register_forward_pre_hook(self._pre_forward))
        if self.spec.kind in ("collapse", "host-stall", "gc-pause"):
            self._handles.append(module.register_forward_hook(self._post_forward))
        if self.spec.kind == "collective-collapse":
            self._install_collective()
        return self

    def detach(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        for name, fn in self._saved:
            setattr(torch.distributed, name, fn)
        self._saved.clear()

    def growth_s(self) -> float:
        """The growing kinds' added seconds this step: scale x (steps since the start), capped."""
        if self.spec.kind not in GROWING or not self.active(self.spec.kind):
            return 0.0
        k = self.spec.knob
        return min(k * (self.step - self.spec.step + 1), CAP[self.spec.kind] * k)

    def collapse_sleep_s(self) -> float:
        return self.growth_s() if self.spec.kind == "collapse" else 0.0

    def affected(self) -> bool:
        """collective-collapse: this rank slows (all ranks, or --fault-rank's node's)."""
        if not self.spec.node:
            return True
        rpn = self.ranks_per_node or 1
        return self.rank // rpn == self.spec.rank // rpn

    def _install_collective(self) -> None:
        for name in FAULT_OPS[self.spec.op]:
            fn = getattr(torch.distributed, name, None)
            if fn is not None:
                self._saved.append((name, fn))
                setattr(torch.distributed, name, self._slowed(fn))

    def _slowed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def slowed(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            c = self._calls
            if c["step"] != self.step:  # the added time is spread over the calls of a step
                c["step"], c["prev"], c["now"] = self.step, max(c["now"], 1), 0
            c["now"] += 1
            delay = self.growth_s()
            if delay > 0 and self.affected():
                self._sleep(delay / c["prev"])
            return out

        return slowed

    def _stall_backward(self, delay: float) -> None:
        if self.spec.kind == "collapse":
            self._sleep(delay)
        elif self.spec.kind == "host-stall":
            self._burn(delay)
        else:  # gc-pause: full collections over a kept heap of cyclic garbage, for `delay` seconds
            if not self._garbage:
                self._garbage = [_cycle() for _ in range(200_000)]
            end = self._clock() + delay
            while self._clock() < end:
                self._collect()

    def before_batch(self) -> None:
        """Call where the loop fetches its batch (the data phase): slow-data sleeps here."""
        if self.rank == self.spec.rank and self.active("slow-data"):
            self._sleep(self.spec.knob)

    def seq_len(self, base: int) -> int:
        if not self.active("input-skew"):
            return base
        rng = random.Random(hash((self.spec.seed, self.step, self.rank)))
        return max(1, int(base * rng.uniform(self.spec.knob, 1.0)))

    def _pre_forward(self, module: torch.nn.Module, args: Any) -> None:
        if self.rank != self.spec.rank:
            return
        if self.active("slow-rank"):
            p = next(module.parameters(), None)
            self._burn(self.spec.knob, p.device if p is not None else "cpu")
        elif self.active("slow-wait"):
            self._sleep(self.spec.knob)
        elif self.spec.kind == "kill" and self.step == self.spec.step:
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.spec.kind == "hang" and self.step == self.spec.step:
            end = self._clock() + self.spec.knob
            while self._clock() < end:  # never enters this step's collectives
                self._sleep(min(1.0, end - self._clock()))

    def _post_forward(self, module: torch.nn.Module, args: Any, out: Any) -> None:
        delay, t = self.growth_s(), _grad_tensor(out)
        if delay > 0 and t is not None:

            def hook(grad: torch.Tensor) -> torch.Tensor:
                self._stall_backward(delay)
                return grad

            t.register_hook(hook)


def _cycle() -> list[Any]:
    """A small reference cycle: only the cyclic collector frees it, and every full collection
    traverses it while it is kept."""
    a: list[Any] = []
    a.append(a)
    return a

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
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import time
from dataclasses import dataclass
from typing import Any, Callable, Literal

import torch

FaultKind = Literal["none", "collapse", "slow-rank", "slow-wait", "slow-data", "hang", "kill", "input-skew"]
KINDS: tuple[str, ...] = ("none", "collapse", "slow-rank", "slow-wait", "slow-data", "hang", "kill", "input-skew")
DEFAULT_SCALE = {
    "none": 0.0,
    "collapse": 0.05,
    "slow-rank": 0.05,
    "slow-wait": 0.05,
    "slow-data": 0.05,
    "hang": 3600.0,
    "kill": 0.0,
    "input-skew": 0.25,
}


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

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault {self.kind!r}; choose one of {', '.join(KINDS)}")
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
        "slow-wait / slow-data: s of sleep; hang: s stuck; input-skew: shortest length fraction",
    )


def fault_from_args(ns: argparse.Namespace) -> FaultSpec:
    return FaultSpec(kind=ns.fault, step=ns.fault_step, rank=ns.fault_rank, scale=ns.fault_scale)


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
    ) -> None:
        self.spec, self.rank, self.step = spec, rank, 0
        self._sleep, self._clock, self._burn = sleep, clock, burn_fn
        self._handles: list[Any] = []

    def active(self, kind: str) -> bool:
        return self.spec.kind == kind and self.step >= self.spec.step

    def set_step(self, step: int) -> None:
        self.step = step

    def attach(self, module: torch.nn.Module) -> FaultInjector:
        if self.spec.kind in ("slow-rank", "slow-wait", "hang", "kill"):
            self._handles.append(module.register_forward_pre_hook(self._pre_forward))
        if self.spec.kind == "collapse":
            self._handles.append(module.register_forward_hook(self._post_forward))
        return self

    def detach(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def collapse_sleep_s(self) -> float:
        if not self.active("collapse"):
            return 0.0
        k = self.spec.knob
        return min(k * (self.step - self.spec.step + 1), 100 * k)

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
        delay, t = self.collapse_sleep_s(), _grad_tensor(out)
        if delay > 0 and t is not None:

            def hook(grad: torch.Tensor) -> torch.Tensor:
                self._sleep(delay)
                return grad

            t.register_hook(hook)

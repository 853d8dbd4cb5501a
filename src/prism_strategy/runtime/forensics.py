"""Collapse forensics, inside the ranks: a cheap capture that `StepMonitor` turns on for K steps
twice in a run (the healthy baseline early on, and when it sees the collapse signature), then off.

What one captured step records (one ``forensic`` line per rank and step, flushed at once, so a run
killed mid-capture keeps every step written so far):

* collectives: every call of a collective the engines issue through ``torch.distributed``'s
  module functions, by op (all_gather, reduce_scatter, all_reduce, ...), phase, group (its global
  ranks) and issue order: bytes, calls, host-side enqueue-to-return seconds per call (the n-th
  call of an op in a phase is the n-th unit it serves). Call sites, from the engines' source:
  FSDP2 issues ``dist.all_gather_single`` / ``dist.reduce_scatter_single`` / ``dist.all_reduce``
  (HSDP's replica reduction) from ``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``
  (``DefaultAllGather``, ``DefaultReduceScatter``, ``foreach_reduce``), looked up on the ``dist``
  module at each call, so replacing the module attribute reaches them. DeepSpeed's
  ``deepspeed/comm/torch.py`` ``TorchBackend.all_reduce`` calls ``torch.distributed.all_reduce`` at
  call time, but binds ``all_gather_function`` / ``reduce_scatter_function`` at init
  (``get_all_gather_function``): those two are wrapped on the live backend object (``cdb``) too.
  DDP's reducer calls the process group from C++: its bucket all-reduces are itemised only with
  `register_ddp_hook(ddp)` before the first forward (torch's own ``allreduce_hook``,
  ``ddp_comm_hooks/default_hooks.py``, which calls ``dist.all_reduce(..., async_op=True)``).
  An async call also records ``done_s``: enqueue to the completion of its future (a callback). Device-only branch: on an
  accelerator each call also records two device events on the current stream (``device_s``,
  resolved at the step's end); on CPU/gloo the host time is the whole (synchronous) collective.
* the allocator (device-only branch): allocated, reserved, ``num_alloc_retries``, segments,
  and the largest free cached block (``memory_snapshot``, CUDA); on CPU there is no caching
  allocator and the record says so (with the process RSS instead);
* garbage collection: pause seconds and count per phase (``gc.callbacks``);
* per phase the host wall time, the process CPU time (``time.process_time``, all threads) and,
  on Linux, the training thread's run-queue wait (``/proc/thread-self/schedstat``, field 2: time
  runnable but not running, i.e. waiting for a core on a loaded host);
* once per window: the CCL / NCCL / libfabric / allocator environment variables.

Nothing here synchronises outside a capture window, and nothing is patched outside one.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from prism_strategy.runtime.forensics_probes import RunQueue, allocator_state, comm_env

__all__ = ["ForensicsConfig", "Capture", "OPS", "allocator_state", "comm_env", "register_ddp_hook"]

OPS = {
    "all_gather_single": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "_all_gather_base": "all_gather",
    "all_gather": "all_gather",
    "reduce_scatter_single": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter": "reduce_scatter",
    "all_reduce": "all_reduce",
    "broadcast": "broadcast",
    "all_to_all_single": "all_to_all",
}
"""torch.distributed functions wrapped during a capture -> the op name the records use."""
DS_FUNCTIONS = {"all_gather_function": "all_gather", "reduce_scatter_function": "reduce_scatter"}
SKIP_PHASES = ("monitor_gather",)
"""The monitor's own gather is not the engine's."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ForensicsConfig:
    """When and how long the capture runs."""

    steps: int = 5
    """K: steps captured per window (the baseline, and after the collapse is seen)."""
    baseline_step: int | None = None
    """First step of the healthy baseline window; None: the detector's warm-up skip."""
    max_calls: int = 20_000
    """Collective calls itemised per step and rank (beyond this, counted only)."""
    profile_dir: str | None = None
    """A folder: the collapse window's first step also runs under `torch.profiler` and its trace is
    written there (``profile_rank{R}_step{N}.json``, chrome trace). None: no profiler."""


def _nbytes(x: Any) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(t) for t in x)
    return 0


class Capture:
    """One rank's capture. `StepMonitor` calls `begin_step`, `phase_enter/exit`, `end_step`.

    `write(rec)` appends one JSON record (the monitor's file) and flushes."""

    def __init__(
        self,
        cfg: ForensicsConfig,
        *,
        rank: int,
        device: torch.device,
        progress: Any,
        write: Callable[[dict[str, Any]], None],
    ) -> None:
        self.cfg, self.rank, self.device, self.progress, self._write = cfg, rank, device, progress, write
        self.window: str | None = None
        self.windows: list[tuple[str, int]] = []
        self._left = 0
        self._saved: list[tuple[Any, str, Any]] = []
        self._groups: dict[int, str] = {}
        self._on_device = device.type != "cpu"
        self._pending: tuple[str, int, dict[str, Any]] | None = None
        self._prof: Any = None
        self._gc_t0: float | None = None

    # -- windows ---------------------------------------------------------------------------
    def arm(self, window: str, from_step: int, reason: dict[str, Any] | None = None) -> None:
        """Capture K steps from `from_step` (the next step the monitor begins)."""
        self.windows.append((window, from_step))
        self._pending = (window, from_step, reason or {})

    def begin_step(self, step: int) -> bool:
        """True when this step is captured (the capture then runs until `end_step`)."""
        pend = self._pending
        if self.window is None and pend is not None and step >= pend[1]:
            self._pending = None
            self._open(pend[0], step, pend[2])
        if self.window is None:
            return False
        self._step = step
        self._calls: list[list[Any]] = []
        self._dropped = 0
        self._wall: dict[str, float] = {}
        self._cpu: dict[str, float] = {}
        self._runq: dict[str, float] = {}
        self._gc: dict[str, list[float]] = {}
        self._dev: list[tuple[int, Any, Any]] = []
        self._phase_t: tuple[str, float, float] | None = None
        self._start_profiler()
        return True

    def _open(self, window: str, step: int, reason: dict[str, Any]) -> None:
        self.window, self._left = window, self.cfg.steps
        self._write(
            {
                "kind": "forensic_window",
                "window": window,
                "rank": self.rank,
                "from_step": step,
                "steps": self.cfg.steps,
                "device": str(self.device),
                "env": comm_env(),
                "reason": reason,
                "t": time.time(),
            }
        )
        self._runq_src = RunQueue()
        self._install()

    def _start_profiler(self) -> None:
        """One torch.profiler step in the collapse window's first step (ForensicsConfig.profile_dir)."""
        self._prof = None
        if self.cfg.profile_dir is None or self.window != "collapse" or self._left != self.cfg.steps:
            return
        acts = [torch.profiler.ProfilerActivity.CPU]
        if self._on_device and self.device.type == "cuda":  # device-only branch
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        self._prof = torch.profiler.profile(activities=acts, record_shapes=False)
        self._prof.__enter__()

    def _stop_profiler(self) -> None:
        prof, self._prof = self._prof, None
        if prof is None:
            return
        prof.__exit__(None, None, None)
        out = os.path.join(self.cfg.profile_dir, f"profile_rank{self.rank}_step{self._step}.json")
        os.makedirs(self.cfg.profile_dir, exist_ok=True)
        prof.export_chrome_trace(out)

    def end_step(self) -> None:
        self._stop_profiler()
        self._write(self._record())
        self._left -= 1
        if self._left <= 0:
            self._uninstall()
            self.window = None

    def close(self) -> None:
        if self.window is not None:
            self._uninstall()
            self.window = None

    # -- phases and GC ---------------------------------------------------------------------
    def phase_enter(self, name: str) -> None:
        self._phase_t = (name, time.perf_counter(), time.process_time(), self._runq_src.wait_s())

    def phase_exit(self, name: str) -> None:
        if self._phase_t is None or self._phase_t[0] != name:
            return
        _, t0, c0, q0 = self._phase_t
        self._wall[name] = self._wall.get(name, 0.0) + time.perf_counter() - t0
        self._cpu[name] = self._cpu.get(name, 0.0) + time.process_time() - c0
        q1 = self._runq_src.wait_s()
        if q0 is not None and q1 is not None:
            self._runq[name] = self._runq.get(name, 0.0) + q1 - q0
        self._phase_t = None

    def _gc_cb(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter()
        elif self._gc_t0 is not None:
            slot = self._gc.setdefault(self.progress.phase, [0, 0.0, 0.0])
            dt = time.perf_counter() - self._gc_t0
            slot[0] += 1
            slot[1] += dt
            slot[2] = max(slot[2], dt)
            self._gc_t0 = None

    # -- collectives -----------------------------------------------------------------------
    def _group(self, group: Any) -> str:
        dist = torch.distributed
        key = id(group)
        if key not in self._groups:
            try:
                ranks = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)
                self._groups[key] = ",".join(map(str, ranks))
            except (RuntimeError, ValueError, AttributeError):
                self._groups[key] = "?"
        return self._groups[key]

    def _wrap(self, fn: Callable[..., Any], op: str) -> Callable[..., Any]:
        cap = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            phase = cap.progress.phase
            if cap.window is None or phase in SKIP_PHASES:
                return fn(*args, **kwargs)
            ev0 = cap._device_event()
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            dt = time.perf_counter() - t0
            if len(cap._calls) >= cap.cfg.max_calls:
                cap._dropped += 1
                return out
            group = kwargs.get("group", next((a for a in args if isinstance(a, torch.distributed.ProcessGroup)), None))
            nbytes = max((_nbytes(a) for a in args[:2]), default=0)
            is_async = bool(kwargs.get("async_op", False))
            cap._calls.append([op, phase, cap._group(group), nbytes, dt, is_async, None])
            if is_async and hasattr(out, "get_future"):
                cap._on_done(out, len(cap._calls) - 1, t0)
            if ev0 is not None:
                cap._dev.append((len(cap._calls) - 1, ev0, cap._device_event()))
            return out

        timed.__wrapped__ = fn  # type: ignore[attr-defined]
        return timed

    def _on_done(self, work: Any, i: int, t0: float) -> None:
        calls = self._calls

        def done(_: Any) -> None:
            calls[i][6] = time.perf_counter() - t0

        try:
            work.get_future().add_done_callback(done)
        except (RuntimeError, AttributeError):  # a backend without futures: host time only
            pass

    def _device_event(self) -> Any:
        if not self._on_device:
            return None
        ev = torch.Event(device=self.device.type, enable_timing=True)
        ev.record()
        return ev

    def _install(self) -> None:
        dist = torch.distributed
        for name, op in OPS.items():
            fn = getattr(dist, name, None)
            if fn is not None:
                self._saved.append((dist, name, fn))
                setattr(dist, name, self._wrap(fn, op))
        ds = sys.modules.get("deepspeed.comm.comm")
        cdb = getattr(ds, "cdb", None) if ds is not None else None
        for name, op in DS_FUNCTIONS.items():
            fn = getattr(cdb, name, None) if cdb is not None else None
            if fn is not None:
                self._saved.append((cdb, name, fn))
                setattr(cdb, name, self._wrap(fn, op))
        gc.callbacks.append(self._gc_cb)

    def _uninstall(self) -> None:
        for owner, name, fn in reversed(self._saved):
            if getattr(getattr(owner, name, None), "__wrapped__", None) is fn:
                setattr(owner, name, fn)
        self._saved.clear()
        if self._gc_cb in gc.callbacks:
            gc.callbacks.remove(self._gc_cb)
        self._runq_src.close()

    # -- the record ------------------------------------------------------------------------
    def _collectives(self) -> list[dict[str, Any]]:
        device_s: dict[int, float] = {}
        for i, a, b in self._dev:
            b.synchronize()
            device_s[i] = a.elapsed_time(b) / 1000.0
        rows: dict[tuple[str, str, str], dict[str, Any]] = {}
        for i, (op, phase, group, nbytes, dt, is_async, done_s) in enumerate(self._calls):
            row = rows.setdefault(
                (op, phase, group),
                {"op": op, "phase": phase, "group": group, "first_call": i, "calls": 0, "bytes": 0, "host_s": []},
            )
            row["calls"] += 1
            row["bytes"] += nbytes
            row["host_s"].append(round(dt, 7))
            row["async"] = row.get("async", False) or is_async
            if i in device_s:
                row.setdefault("device_s", []).append(round(device_s[i], 7))
            if done_s is not None:
                row.setdefault("done_s", []).append(round(done_s, 7))
        return list(rows.values())

    def _record(self) -> dict[str, Any]:
        return {
            "kind": "forensic",
            "window": self.window,
            "step": self._step,
            "rank": self.rank,
            "wall": _rounded(self._wall),
            "cpu": _rounded(self._cpu),
            "runq_wait": _rounded(self._runq) if self._runq else None,
            "collectives": self._collectives(),
            "calls_not_itemised": self._dropped,
            "gc": {
                ph: {"count": c, "pause_s": round(s, 7), "max_s": round(m, 7)} for ph, (c, s, m) in self._gc.items()
            },
            "allocator": allocator_state(self.device),
        }


def _rounded(d: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 7) for k, v in d.items()}


def register_ddp_hook(ddp: Any) -> None:
    """Route a DDP module's bucket all-reduces through ``dist.all_reduce`` (torch's default
    ``allreduce_hook``: same arithmetic, sum then divide by the world) so the capture itemises
    them. Call before the first forward (DDP allows one comm hook, registered before training)."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    ddp.register_comm_hook(None, allreduce_hook)

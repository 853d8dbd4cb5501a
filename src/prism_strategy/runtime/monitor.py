"""`StepMonitor`: per-rank step and phase timing, online detection, hang watchdog.

```python
mon = StepMonitor(out_dir, ctx=ctx, hang_timeout_s=300)
for batch in loader:
    with mon.step(samples=b, tokens=b * s):
        with mon.phase("forward"):   loss = job.model(batch).loss
        with mon.phase("backward"):  job.backward(loss)
        with mon.phase("optimizer"): job.step()
mon.close()
```

What it measures, per rank and step: the time of each named phase (repeated phases add up), the
data wait (the gap since the previous step ended, unless the loop times a "data" phase itself),
the iteration time ``step_s`` (data wait + the step body), samples, tokens, peak memory (device
allocator peak on accelerators, process max RSS on CPU).

How, cheaply: on CPU the clock is ``time.perf_counter``. On an accelerator each phase records two
device events and the step is resolved one or two steps later, when its last event has completed,
so the monitor adds no synchronisation of its own except every K steps, where it gathers the
window (below). Measured overhead on CPU: see ``benchmarks/monitor_overhead.py``.

Output, one JSONL file per rank, ``OUT/rank{R}.jsonl``; every line has a ``kind``::

    {"kind":"meta","rank":0,"world_size":4,"pid":..,"host":..,"cpus":2,"device":"cpu","t0":..,...}
    {"kind":"step","step":7,"rank":0,"t":<unix>,"step_s":0.051,
     "phases":{"data":0.001,"forward":0.012,"backward":0.031,"optimizer":0.004},
     "cpu":{"data":0.0005,"forward":0.011,...},   # CPU devices: process CPU time per phase
     "samples":8,"tokens":1024,"peak_mem_bytes":...}
    {"kind":"summary","step":10,"fastest_rank":1,"slowest_rank":2,"straggler_ratio":1.04,...}
    {"kind":"event","event":"collapse","step":23,"ranks":[0,1,2,3],"evidence":{...},...}
    {"kind":"forensic_window","window":"baseline"|"collapse","from_step":3,"steps":5,"env":{..},...}
    {"kind":"forensic","window":"collapse","step":30,"collectives":[...],"gc":{..},"allocator":{..},...}
    {"kind":"close","rank":0,"steps":40}

Every record is written through at once (line-buffered), so a killed run leaves its last steps;
a log without a close record is what `analyze` calls ``incomplete``.

Cross-rank detection: every ``summary_every`` (K) steps, when torch.distributed is initialised,
each rank all-gathers a (K x 7) float tensor of its phase times (`detect.FIELDS`) over the default
group; rank 0 keeps the warm-up baseline and a bounded recent window, writes the summary (fastest
and slowest rank, straggler ratio) and runs the detectors of `prism_strategy.analysis.detect`
(collapse, straggler, input skew; the compute-vs-wait method is documented there). Without a
process group it detects from the local rank only. Ranks must call `step()` the same number of
times (as DDP requires anyway); a rank that does not join a gather is caught by the watchdog.

Collapse forensics (``forensics=ForensicsConfig()``, the default; None turns it off): K steps of
a cheap capture (`prism_strategy.runtime.forensics`: per-collective host time, GC pauses, host
CPU and run-queue wait per phase, the allocator, the CCL/NCCL environment) right after the
warm-up skip (the healthy baseline), and again from the sync step at which the collapse
signature is first seen. Every rank runs the collapse detector on the same gathered rows, so all
ranks open the window at the same step without a message. `analyze` compares the two windows
(docs/collapse.md).

Hang: see `prism_strategy.runtime.watchdog` (`HANG_EXIT_CODE`, ``hang_report.json``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import resource
import socket
import time
from collections import deque
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from prism_strategy.analysis.detect import DetectConfig, Series, detect_all, detect_collapse, summarize
from prism_strategy.readers.steps import FIELDS, Event, step_times
from prism_strategy.runtime.forensics import Capture, ForensicsConfig
from prism_strategy.runtime.monitor_state import StepHistory, rank_cpus, rank_identity, rank_placement
from prism_strategy.runtime.watchdog import HANG_EXIT_CODE, Progress, Watchdog
from prism_strategy.specs.libraries import library_of_backend
from prism_strategy.specs.safe_files import check_writable_folder

__all__ = ["StepMonitor", "HANG_EXIT_CODE", "DetectConfig", "Event", "ForensicsConfig"]

log = logging.getLogger("prism_strategy.monitor")


class _Phase:
    __slots__ = ("mon", "name", "t0", "c0", "ev0")

    def __init__(self, mon: StepMonitor, name: str) -> None:
        self.mon, self.name = mon, name

    def __enter__(self) -> _Phase:
        self.mon.progress.mark(self.name)
        if self.mon._fx_live:
            self.mon._fx.phase_enter(self.name)
        self.ev0 = self.mon._event()
        self.c0 = time.process_time() if self.mon._cpu is not None else 0.0
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        mon = self.mon
        dt = time.perf_counter() - self.t0
        mon._phases[self.name] = mon._phases.get(self.name, 0.0) + dt
        if mon._cpu is not None:
            mon._cpu[self.name] = mon._cpu.get(self.name, 0.0) + time.process_time() - self.c0
        if self.ev0 is not None:
            mon._dev.append((self.name, self.ev0, mon._event()))
        if mon._fx_live:
            mon._fx.phase_exit(self.name)
        mon.progress.mark("step")


class _Step:
    __slots__ = ("mon", "samples", "tokens")

    def __init__(self, mon: StepMonitor, samples: Any, tokens: Any) -> None:
        self.mon, self.samples, self.tokens = mon, samples, tokens

    def __enter__(self) -> _Step:
        self.mon._begin(self.samples, self.tokens)
        return self

    def __exit__(self, exc_type: Any, *exc: object) -> None:
        self.mon._end(exc_type)


class StepMonitor:
    """Times steps and phases per rank, detects collapse/straggler/skew online, watches hangs.

    `out_dir` is shared by all ranks (one file each). `ctx` is anything with ``rank``,
    ``world_size`` and optionally ``device`` (e.g. `init_distributed()`'s result); None reads
    the process group or RANK / WORLD_SIZE. ``hang_timeout_s=None`` disables the watchdog.
    Nothing is opened until `start()` (called by the first `step()`), but a folder that cannot be
    made or written (a file in its path, no write permission) is refused here, not at the first step.

    The watchdog counts from the first `step()` until `close()`, *between* steps too (a stuck
    data loader is a hang): wrap evaluation or checkpointing in ``with mon.paused():`` and call
    `close()` (or use ``with StepMonitor(...) as mon``) when the loop ends. Files are appended
    to, so a restart into the same folder adds a run; `analyze` reads the last one.
    ``forensics``: the collapse capture's window length and baseline step (None: no capture).
    """

    def __init__(
        self,
        out_dir: str | os.PathLike,
        *,
        ctx: Any = None,
        hang_timeout_s: float | None = 300.0,
        summary_every: int = 10,
        detect: DetectConfig | None = None,
        gather: bool = True,
        backstop: bool = True,
        exit_fn: Callable[[int], None] = os._exit,
        event_factory: Callable[[], Any] | None = None,
        forensics: ForensicsConfig | None = ForensicsConfig(),
    ) -> None:
        self.out_dir, self.ctx = Path(out_dir), ctx
        check_writable_folder(self.out_dir, "StepMonitor out_dir")
        self.hang_timeout_s, self.summary_every = hang_timeout_s, max(1, int(summary_every))
        self.detect, self.gather, self.backstop, self.exit_fn = detect or DetectConfig(), gather, backstop, exit_fn
        self.events: list[Event] = []
        self.progress = Progress()
        self._event_factory = event_factory
        self._cpu: dict[str, float] | None = None
        self._started = self._closed = False
        self._fh = None
        self._watchdog: Watchdog | None = None
        self.forensics = forensics
        self._fx: Capture | None = None
        self._fx_live = False

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> StepMonitor:
        if self._started:
            return self
        self.rank, self.world_size, self.device = rank_identity(self.ctx)
        self._dist = (
            self.gather
            and self.world_size > 1
            and torch.distributed.is_available()
            and torch.distributed.is_initialized()
        )
        if self._event_factory is None and self.device.type != "cpu":
            dev = self.device.type
            self._event_factory = lambda: torch.Event(device=dev, enable_timing=True)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        # line-buffered: every record reaches the file as it is written, so a run killed mid-step
        # (SIGKILL, the OOM killer, a lost node) leaves its last steps for `analyze`
        self._fh = open(self.out_dir / f"rank{self.rank}.jsonl", "a", buffering=1)
        self._step_i, self._t_prev_end, self._fired, self._monitor_s = 0, None, set(), 0.0
        self._cpu_on, self._c_prev_end = self.device.type == "cpu", None
        self._rows: list[list[float]] = []
        self._pending: deque = deque()
        cfg = self.detect
        keep_last = max(4 * self.summary_every, cfg.collapse_steps + 2 * self.summary_every, 32)
        self._history = StepHistory(cfg.warmup_skip + cfg.warmup_steps, keep_last)
        self._write(
            {
                "kind": "meta",
                "rank": self.rank,
                "world_size": self.world_size,
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "cpus": rank_cpus(),
                "device": str(self.device),
                "t0": time.time(),
                "hang_timeout_s": self.hang_timeout_s,
                "summary_every": self.summary_every,
                "gather": self._dist,
                "torch": torch.__version__,
                "format": 1,
                **rank_placement(self.ctx),
            }
        )
        self._fh.flush()
        self._start_capture()
        if self.hang_timeout_s:
            self._watchdog = Watchdog(
                self.out_dir,
                self.rank,
                self.world_size,
                self.hang_timeout_s,
                self.progress,
                on_hang=self._on_hang,
                exit_fn=self.exit_fn,
                backstop=self.backstop,
            )
            self._watchdog.start()
        self._started = True
        return self

    def _start_capture(self) -> None:
        """The collapse capture, armed for the healthy baseline right after the warm-up skip."""
        if self.forensics is None:
            return
        self._fx = Capture(
            self.forensics, rank=self.rank, device=self.device, progress=self.progress, write=self._write_flush
        )
        first = self.forensics.baseline_step
        self._fx.arm("baseline", self.detect.warmup_skip if first is None else first, {"why": "healthy baseline"})

    def close(self) -> None:
        if not self._started or self._closed:
            return
        self._closed = True
        if self._fx is not None:
            self._fx.close()
        self._drain(block=True)
        self.progress.active = False
        if self._watchdog is not None:
            self._watchdog.stop()
        self._write({"kind": "close", "rank": self.rank, "steps": self._step_i, "t": time.time()})
        self._fh.close()

    def __enter__(self) -> StepMonitor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def path(self) -> Path:
        rank = self.rank if self._started else rank_identity(self.ctx)[0]
        return self.out_dir / f"rank{rank}.jsonl"

    @property
    def capture_window(self) -> str | None:
        """The forensic window open now ("baseline", "collapse") or None."""
        return self._fx.window if self._fx is not None else None

    # -- the loop API ----------------------------------------------------------------------
    def step(self, *, samples: int | None = None, tokens: int | None = None) -> _Step:
        return _Step(self, samples, tokens)

    def phase(self, name: str) -> _Phase:
        return _Phase(self, name)

    @contextmanager
    def paused(self):
        """Eval, checkpointing: the watchdog does not count this time."""
        self.progress.paused = True
        try:
            yield
        finally:
            self.progress.paused = False
            self.progress.mark(self.progress.phase)

    # -- internals -------------------------------------------------------------------------
    def _event(self) -> Any:
        if self._event_factory is None:
            return None
        ev = self._event_factory()
        ev.record()
        return ev

    def _begin(self, samples: Any, tokens: Any) -> None:
        if not self._started:
            self.start()
        now = time.perf_counter()
        self._gap = now - self._t_prev_end if self._t_prev_end is not None else math.nan
        self._mon_s, self._monitor_s = self._monitor_s, 0.0
        self._t0, self._ev_step0 = now, self._event()
        self._samples, self._tokens = samples, tokens
        self._phases: dict[str, float] = {}
        if self._cpu_on:
            c = time.process_time()
            self._cpu = {} if self._c_prev_end is None else {"data": c - self._c_prev_end}
        self._dev: list[tuple[str, Any, Any]] = []
        self._fx_live = self._fx is not None and self._fx.begin_step(self._step_i)
        self.progress.active = True
        self.progress.mark("step", self._step_i)

    def _end(self, exc_type: Any) -> None:
        t1 = time.perf_counter()
        rec: dict[str, Any] = {
            "kind": "step",
            "step": self._step_i,
            "rank": self.rank,
            "t": time.time(),
            "step_s": t1 - self._t0,
            "phases": self._phases,
            "samples": self._samples,
            "tokens": self._tokens,
            "peak_mem_bytes": self._peak_mem(),
        }
        if self._cpu is not None:
            rec["cpu"] = self._cpu
            self._c_prev_end = time.process_time()
        if self._mon_s:
            rec["monitor_s"] = self._mon_s
        if exc_type is not None:
            rec["error"] = getattr(exc_type, "__name__", str(exc_type))
        self._t_prev_end = t1
        if self._fx_live:
            self._fx_live = False
            self._fx.end_step()
            self._monitor_s += time.perf_counter() - t1
            self._t_prev_end = t1 + self._monitor_s
        self._step_i += 1
        self.progress.mark("data", self._step_i)
        self._pending.append((rec, self._gap, self._ev_step0, self._event(), self._dev))
        self._drain(block=False)
        if exc_type is None and self._step_i % self.summary_every == 0:
            self._sync_window()
            self._monitor_s = time.perf_counter() - t1
            self._t_prev_end = t1 + self._monitor_s
            if self._cpu_on:
                self._c_prev_end = time.process_time()

    def _peak_mem(self) -> int:
        if self.device.type == "cpu":
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        mod = getattr(torch, self.device.type, None)
        fn = getattr(mod, "max_memory_allocated", None) or torch.accelerator.max_memory_allocated
        return int(fn(self.device))

    def _drain(self, block: bool) -> None:
        """Finish step records whose device events are complete (all of them when block)."""
        while self._pending:
            rec, gap, ev0, ev1, dev = self._pending[0]
            if ev1 is not None and not block and len(self._pending) <= 2 and not ev1.query():
                return
            self._pending.popleft()
            if ev1 is not None:
                ev1.synchronize()
                rec["step_s"] = ev0.elapsed_time(ev1) / 1000.0
                rec["phases"] = {}
                for name, a, b in dev:
                    rec["phases"][name] = rec["phases"].get(name, 0.0) + a.elapsed_time(b) / 1000.0
            self._finish(rec, gap)

    def _finish(self, rec: dict[str, Any], gap: float) -> None:
        ph = rec["phases"]
        if "data" not in ph and not math.isnan(gap):
            ph["data"] = gap
        rec["step_s"] += (0.0 if math.isnan(gap) else gap) + rec.get("monitor_s", 0.0)
        self._write(rec)
        self._rows.append(step_times(rec, self.rank).row())

    def _write(self, rec: dict[str, Any]) -> None:
        self._fh.write(json.dumps(rec, separators=(",", ":"), default=str) + "\n")

    def _write_flush(self, rec: dict[str, Any]) -> None:
        self._write(rec)
        self._fh.flush()

    def _sync_window(self) -> None:
        """Every K steps: gather the window, summarise and detect on rank 0, flush."""
        self._drain(block=True)
        k = self.summary_every
        block = np.full((k, len(FIELDS)), np.nan)
        rows = self._rows[-k:]
        if rows:
            block[-len(rows) :] = rows
        self._rows.clear()
        if self._dist:
            self.progress.mark("monitor_gather")
            gathered, ranks = self._all_gather(block), tuple(range(self.world_size))
            self.progress.mark("data")
        else:
            gathered, ranks = block[None], (self.rank,)
        self._history.add(gathered)
        if self.rank == 0 or not self._dist:
            self._analyse(gathered, ranks)
        self._maybe_trigger(ranks)
        self._fh.flush()

    def _maybe_trigger(self, ranks: tuple[int, ...]) -> None:
        """Every rank sees the same gathered rows, so every rank decides alike, with no message."""
        fx = self._fx
        if fx is None or any(w == "collapse" for w, _ in fx.windows) or fx.window is not None:
            return
        ev = detect_collapse(self._history.series(ranks), self.detect)
        if ev is not None:
            reason = {"why": "collapse signature", "collapse_from_step": ev.step, "detected_at_step": self._step_i}
            fx.arm("collapse", self._step_i, reason)

    def _all_gather(self, block: np.ndarray) -> np.ndarray:
        dist = torch.distributed
        dev = torch.device("cpu") if library_of_backend(dist.get_backend()).device == "cpu" else self.device
        t = torch.from_numpy(block).to(device=dev, dtype=torch.float32)
        out = [torch.empty_like(t) for _ in range(self.world_size)]
        dist.all_gather(out, t)
        return torch.stack(out).cpu().double().numpy()

    def _analyse(self, gathered: np.ndarray, ranks: tuple[int, ...]) -> None:
        window = Series.from_block(ranks, gathered)
        if window.steps.size:
            summ = summarize(window)
            self._write({"kind": "summary", "step": self._step_i, **summ})
            if "straggler_ratio" in summ:
                log.info(
                    "step %d: step %.4fs; fastest rank %s (%.4fs local), slowest rank %s (%.4fs), straggler ratio %.2f",
                    self._step_i,
                    summ["step_s"] or 0,
                    summ["fastest_rank"],
                    summ["fastest_local_s"] or 0,
                    summ["slowest_rank"],
                    summ["slowest_local_s"] or 0,
                    summ["straggler_ratio"] or 0,
                )
        for ev in detect_all(self._history.series(ranks), self.detect):
            if ev.kind not in self._fired:
                self._fired.add(ev.kind)
                self._record(Event(ev.kind, ev.step, ev.ranks, ev.evidence, ev.message, "online"))

    def _record(self, ev: Event) -> None:
        self.events.append(ev)
        self._write({"kind": "event", **ev.to_dict(), "detected_at_step": self._step_i})
        self._fh.flush()
        log.warning("%s (detected at step %d)", ev.message, self._step_i)

    def _on_hang(self, own: dict) -> None:
        """Watchdog thread, just before exit: put the hang event in this rank's JSONL."""
        self._write(
            {
                "kind": "event",
                "event": "hang",
                "step": own["step"],
                "ranks": [self.rank],
                "evidence": own,
                "message": f"hang in phase {own['phase']!r}",
                "source": "online",
            }
        )
        self._fh.flush()

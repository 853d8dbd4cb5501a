"""Hang watchdog: a daemon thread per rank that notices when no phase finishes in time.

Each rank watches itself, so every rank of a hung job reports and exits; the launcher (torchrun,
mpiexec) then ends. On timeout a rank:

1. dumps the Python stack of all its threads (faulthandler) to ``stacks/rank{R}.txt``;
2. dumps PyTorch's flight recorder where the build has one (``_dump_nccl_trace`` /
   ``_dump_fr_trace``; only filled when ``TORCH_FR_BUFFER_SIZE`` > 0) to
   ``flight_recorder/fr_trace_rank_{R}`` (read with ``torchfrtrace DIR -p fr_trace_rank_``),
   in a helper thread that may not block the exit; absence is recorded, never an error;
3. writes ``hang/rank{R}.json`` and waits a short grace for the other ranks' stack dumps;
4. writes ``hang_report.json``: the phase the job is stuck in (the furthest phase any rank
   reached), the step, which ranks reached it and where the others are, from every rank's
   heartbeat file (``heartbeat/rank{R}.json``, rewritten by this thread at most every few
   seconds, off the training thread);
5. calls ``os._exit(HANG_EXIT_CODE)``. It never signals or kills another process.

A second, C-level backstop (``faulthandler.dump_traceback_later``, re-armed by this thread every
tick) dumps the stacks and exits the process if this thread itself cannot run (the GIL held by a
stuck C call) for ``timeout + grace + 30`` s; that exit code is 1 (faulthandler's).
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import socket
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

HANG_EXIT_CODE = 87
"""Exit code of a rank whose watchdog saw no progress within the timeout."""

log = logging.getLogger("prism_strategy.monitor")


@dataclass(slots=True)
class Progress:
    """Where a rank is; written by the training thread, read by the watchdog thread."""

    step: int = -1
    phase: str = "start"
    seq: int = 0
    """Increments at every phase boundary: (step, seq) orders how far ranks got."""
    phase_since: float = field(default_factory=time.time)
    last_progress: float = field(default_factory=time.time)
    last_mono: float = field(default_factory=time.monotonic)
    active: bool = False
    paused: bool = False

    def mark(self, phase: str, step: int | None = None) -> None:
        now = time.time()
        if step is not None:
            self.step = step
        self.phase, self.seq, self.phase_since = phase, self.seq + 1, now
        self.last_progress, self.last_mono = now, time.monotonic()


def _clamp(x: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, x))


def _write_json(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=1, default=str))
    os.replace(tmp, path)


def _run_bounded(fn: Callable[[], object], seconds: float) -> object:
    """Run fn in a daemon thread; give up (return a note) if it does not finish in time."""
    box: list[object] = [f"timed out after {seconds:.0f}s"]

    def target():
        try:
            box[0] = fn()
        except Exception as e:  # noqa: BLE001 - a diagnostic must never raise
            box[0] = f"failed: {e!r}"

    t = threading.Thread(target=target, daemon=True, name="prism-hang-dump")
    t.start()
    t.join(seconds)
    return box[0]


def dump_flight_recorder(path: Path) -> str:
    """Write the flight recorder trace if this build has one; say what happened."""
    try:
        import torch._C._distributed_c10d as c10d
    except Exception as e:  # noqa: BLE001
        return f"not available: {e!r}"
    for name in ("_dump_nccl_trace", "_dump_fr_trace"):
        fn = getattr(c10d, name, None)
        if fn is None:
            continue
        data = fn()
        if not data:
            return f"{name} returned nothing (set TORCH_FR_BUFFER_SIZE before init)"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else str(data).encode())
        return f"written by {name}: {path}"
    return "not available in this build"


def dump_stacks(path: Path) -> None:
    """faulthandler dump of all threads, then the same stacks with source lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        f.write(f"# pid {os.getpid()} on {socket.gethostname()} at {time.time():.3f}\n")
        f.flush()
        faulthandler.dump_traceback(file=f, all_threads=True)
        f.write("\n# Python stacks with source lines\n")
        names = {t.ident: t.name for t in threading.enumerate()}
        for ident, frame in sys._current_frames().items():
            f.write(f"\nThread {ident} ({names.get(ident, '?')}):\n")
            f.write("".join(traceback.format_stack(frame)))


def merge_reports(out_dir: Path, world_size: int) -> dict:
    """hang_report.json content from every rank's heartbeat: stuck phase, who reached it."""
    states = {}
    for r in range(world_size):
        p = out_dir / "heartbeat" / f"rank{r}.json"
        try:
            states[r] = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
    if not states:
        return {"event": "hang", "per_rank": {}}
    far = max(states.values(), key=lambda s: (s["step"], s["seq"]))
    reached = sorted(r for r, s in states.items() if (s["step"], s["phase"]) == (far["step"], far["phase"]))
    behind = {str(r): {"step": s["step"], "phase": s["phase"]} for r, s in states.items() if r not in reached}
    return {
        "event": "hang",
        "step": far["step"],
        "phase": far["phase"],
        "ranks_reached": reached,
        "ranks_not_reached": behind,
        "ranks_unknown": sorted(set(range(world_size)) - set(states)),
        "per_rank": {str(r): s for r, s in states.items()},
        "stacks": {
            str(r): f"stacks/rank{r}.txt" for r in range(world_size) if (out_dir / "stacks" / f"rank{r}.txt").exists()
        },
    }


class Watchdog:
    """Started by `StepMonitor`; `fire()` is what happens on timeout (callable in tests)."""

    def __init__(
        self,
        out_dir: Path,
        rank: int,
        world_size: int,
        timeout_s: float,
        progress: Progress,
        *,
        on_hang: Callable[[dict], None] | None = None,
        exit_fn: Callable[[int], None] = os._exit,
        backstop: bool = True,
    ) -> None:
        self.out_dir, self.rank, self.world_size = Path(out_dir), rank, world_size
        self.timeout_s, self.progress = float(timeout_s), progress
        self.tick_s = _clamp(self.timeout_s / 20, 0.05, 1.0)
        self.heartbeat_s = _clamp(self.timeout_s / 20, 0.1, 5.0)
        self.grace_s = _clamp(self.timeout_s / 10, 2.0, 10.0)
        self.on_hang, self.exit_fn, self.backstop = on_hang, exit_fn, backstop
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._backstop_file = None
        self._last_hb: tuple | None = None
        self._last_hb_t = 0.0

    def start(self) -> None:
        for sub in ("heartbeat", "stacks"):
            (self.out_dir / sub).mkdir(parents=True, exist_ok=True)
        if self.backstop:
            self._backstop_file = open(self.out_dir / "stacks" / f"rank{self.rank}.gil_stall.txt", "w")
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"prism-watchdog-{self.rank}")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._drop_backstop()
        self._heartbeat(force=True)

    def _drop_backstop(self) -> None:
        if self._backstop_file is None:
            return
        faulthandler.cancel_dump_traceback_later()
        self._backstop_file.close()
        p = Path(self._backstop_file.name)
        if p.exists() and p.stat().st_size == 0:
            p.unlink()
        self._backstop_file = None

    def _loop(self) -> None:
        while not self._stop.wait(self.tick_s):
            if self._backstop_file is not None:
                faulthandler.dump_traceback_later(
                    self.timeout_s + self.grace_s + 30, repeat=False, file=self._backstop_file, exit=True
                )
            self._heartbeat()
            if self.hung(time.monotonic()):
                try:
                    self.fire()
                except Exception:  # noqa: BLE001 - a failed report must not leave the job hung
                    log.exception("hang report failed; exiting with %d anyway", HANG_EXIT_CODE)
                    self._drop_backstop()
                    self.exit_fn(HANG_EXIT_CODE)
                return

    def hung(self, now: float) -> bool:
        """No progress for longer than the timeout at monotonic time `now` (paused time does not count:
        leaving `StepMonitor.paused()` marks progress)."""
        p = self.progress
        return p.active and not p.paused and now - p.last_mono > self.timeout_s

    def _heartbeat(self, force: bool = False) -> None:
        p = self.progress
        key = (p.step, p.seq, p.paused, p.active)
        now = time.monotonic()
        if not force and (key == self._last_hb or now - self._last_hb_t < self.heartbeat_s):
            return
        state = {k: v for k, v in asdict(p).items() if k != "last_mono"}
        state.update(rank=self.rank, pid=os.getpid(), host=socket.gethostname(), written=time.time())
        try:
            _write_json(self.out_dir / "heartbeat" / f"rank{self.rank}.json", state)
            self._last_hb, self._last_hb_t = key, now
        except OSError as e:
            log.debug("heartbeat write failed: %s", e)

    def _wait_for_peers(self) -> None:
        deadline = time.monotonic() + self.grace_s
        stacks = self.out_dir / "stacks"
        while time.monotonic() < deadline:
            if all((stacks / f"rank{r}.txt").exists() for r in range(self.world_size)):
                return
            time.sleep(0.05)

    def fire(self) -> dict:
        """Dump, report and exit with HANG_EXIT_CODE (exit_fn may be replaced in tests)."""
        p = self.progress
        self._heartbeat(force=True)
        dump_stacks(self.out_dir / "stacks" / f"rank{self.rank}.txt")
        fr = _run_bounded(
            lambda: dump_flight_recorder(self.out_dir / "flight_recorder" / f"fr_trace_rank_{self.rank}"), 5.0
        )
        own = {
            "event": "hang",
            "rank": self.rank,
            "step": p.step,
            "phase": p.phase,
            "stuck_for_s": round(time.monotonic() - p.last_mono, 3),
            "timeout_s": self.timeout_s,
            "last_progress": p.last_progress,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "flight_recorder": fr,
            "exit_code": HANG_EXIT_CODE,
        }
        (self.out_dir / "hang").mkdir(exist_ok=True)
        _write_json(self.out_dir / "hang" / f"rank{self.rank}.json", own)
        self._wait_for_peers()
        report = merge_reports(self.out_dir, self.world_size)
        report.update(
            timeout_s=self.timeout_s,
            detected_by_rank=self.rank,
            written=time.time(),
            exit_code=HANG_EXIT_CODE,
            flight_recorder=fr,
        )
        _write_json(self.out_dir / "hang_report.json", report)
        log.critical(
            "hang: rank %d saw no progress for %.0fs in phase %r of step %d; job stuck in %r "
            "(reached by ranks %s, not by %s); stacks in %s; exiting with %d",
            self.rank,
            self.timeout_s,
            p.phase,
            p.step,
            report.get("phase"),
            report.get("ranks_reached"),
            report.get("ranks_not_reached"),
            self.out_dir / "stacks",
            HANG_EXIT_CODE,
        )
        if self.on_hang is not None:
            _run_bounded(lambda: self.on_hang(own), 5.0)
        self._drop_backstop()
        self.exit_fn(HANG_EXIT_CODE)
        return report

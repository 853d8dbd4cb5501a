"""PRISM training logs (AI-ModCon/PRISM, native trainer `src/training/trainer_native.py`).

Formats as PRISM writes them (read from its source, commit d1fd3d3):

* Every ``LOG_EVERY_N_STEPS`` steps rank 0 logs, in this order::

      Step 20: Loss 2.1234 (rank_mean=..., rank0=..., tokens=...)
        [TIMING] Data: 0.014s | Fwd: 0.850s | Bwd: 1.310s | Opt: 0.001s
        [THROUGHPUT] 177.3 samples/sec (effective batch: 384)
        [MEMORY] Peak: 29.01GB, Current: 12.40GB (of 64GB HBM)

  The times are *running means* since the accumulators were last reset, which happens after
  every 50th step; ``[MEMORY] Peak`` is ``max_memory_allocated`` in units of 1e9 bytes. We undo
  the running mean: with n_i steps since the reset, the i-th interval's mean is
  ``(mean_i n_i - mean_{i-1} n_{i-1}) / (n_i - n_{i-1})``.
* Every 50th step::

      [TIMING Step 50] Total: 2.50s | Data: 0.01s (0.4%) | Fwd: 0.54s (21.6%) | ... | Throughput: 19.2 samp/s
             [MEMORY] Allocated: 13600MB | Reserved: 34500MB | XCCL probe ...

  (means over the 50-step window; MB here is 2**20 bytes, *current* allocated and reserved;
  PRISM never empties the cache, so current reserved is the peak reserved so far). These
  windows are used when the per-log lines are absent.
* ``perf.jsonl`` in the output dir mirrors both: ``site: trainer_native_per_50`` records
  (``total_step_s, data_s, fwd_s, bwd_s, opt_s, mem_alloc_mb, mem_reserved_mb``) and
  ``site: trainer_native_per_log`` records (``samples_per_sec`` running mean, ``peak_gb``), both with
  ``world_size, batch_size, grad_accum, dist_strategy``; ``event`` records are skipped.

Step time = Data + Fwd + Bwd + Opt (PRISM's own total; gradient clipping is not in it).
Scenario lines: ``[Native DDP] World size: W``, ``[Native DDP] Training: S steps, grad_accum=G``,
the mode line (``Projector-Only`` / ``Encoder+Projector`` / ``E2E mode``), the wrapper line
(``[DDP] Wrapped model``, ``[FSDP] Model wrapped with strategy=X``, ``[HSDP] Model wrapped: X``,
``[HSDP] Topology: N nodes x R ranks/node``) and ``[DDP] find_unused_parameters=.., static_graph=..``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from prism_strategy.readers.training_log import ParsedLog, Window, bad_line, json_lines, number
from prism_strategy.readers.collective_log import text_lines
from prism_strategy.specs.errors import SpecError

GB, MiB = 1e9, 2.0**20
RESET_EVERY = 50
_F = r"([0-9]*\.?[0-9]+)"
STEP = re.compile(r"\bStep (\d+): Loss ")
TIMING = re.compile(rf"\[TIMING\] Data: {_F}s \| Fwd: {_F}s \| Bwd: {_F}s \| Opt: {_F}s\s*$")
TIMING50 = re.compile(rf"\[TIMING Step (\d+)\] Total: {_F}s \| Data: {_F}s \({_F}%\) \| Fwd: {_F}s \({_F}%\) \| "
                      rf"Bwd: {_F}s \({_F}%\) \| Opt: {_F}s \({_F}%\) \| Throughput: {_F} samp/s\s*$")
THROUGHPUT = re.compile(rf"\[THROUGHPUT\] {_F} samples/sec \(effective batch: (\d+)\)\s*$")
MEM_PEAK = re.compile(rf"\[MEMORY\] Peak: {_F}GB, Current: {_F}GB")
MEM50 = re.compile(r"\[MEMORY\] Allocated: (\d+)MB \| Reserved: (\d+)MB")
WORLD = re.compile(r"\[Native DDP\] World size: (\d+)")
ACCUM = re.compile(r"\[Native DDP\] Training: \d+ steps, grad_accum=(\d+)")
MODES = (("Projector-Only mode", "projector"), ("Encoder+Projector mode", "encoder-projector"),
         ("E2E mode with", "e2e"))
FSDP = re.compile(r"\[FSDP\] Model wrapped with strategy=(\w+)")
HSDP = re.compile(r"\[HSDP\] Model wrapped: (\S+)")
TOPO = re.compile(r"\[HSDP\] Topology: (\d+) nodes x (\d+) ranks/node")
DDP_FLAGS = re.compile(r"\[DDP\] find_unused_parameters=(True|False), static_graph=(True|False)")
DDP_BUCKET = re.compile(r"\[DDP\] Wrapped model with bucket_cap_mb=(\d+)")
FSDP_NAMES = {"full_shard": "fsdp_full_shard", "shard_grad_op": "fsdp_shard_grad_op"}
HSDP_NAMES = {"_HYBRID_SHARD_ZERO2": "hsdp_shard_grad_op", "HYBRID_SHARD": "hsdp_full_shard"}

# tag in the line -> (pattern it must match, what PRISM prints)
CHECKED = (("[TIMING Step", TIMING50, "'[TIMING Step N] Total: Xs | Data: Xs (P%) | ... | Throughput: X samp/s'"),
           ("[TIMING]", TIMING, "'[TIMING] Data: Xs | Fwd: Xs | Bwd: Xs | Opt: Xs'"),
           ("[THROUGHPUT]", THROUGHPUT, "'[THROUGHPUT] X samples/sec (effective batch: N)'"),
           ("[MEMORY] Peak", MEM_PEAK, "'[MEMORY] Peak: XGB, Current: XGB'"),
           ("[MEMORY] Allocated", MEM50, "'[MEMORY] Allocated: NMB | Reserved: NMB'"))


def looks_like(path: Path) -> bool:
    with open(path, errors="replace") as f:
        head = f.read(4 << 20)
    return "[TIMING]" in head or "[TIMING Step" in head


def window_start(step: int) -> int:
    """PRISM resets its timing accumulators after every 50th step."""
    return (step - 1) // RESET_EVERY * RESET_EVERY


def unrun_means(points: list[tuple[int, str, list[float]]]) -> list[Window]:
    """Running means (step, where, [phase means...]) -> one Window per interval between them."""
    out: list[Window] = []
    prev_step, prev_vals = None, None
    for step, where, vals in points:
        start = window_start(step)
        n = step - start
        if prev_step is not None and window_start(prev_step) == start and prev_step < step:
            m = prev_step - start
            vals_i = [max(0.0, (v * n - p * m) / (n - m)) for v, p in zip(vals, prev_vals)]
            out.append(Window(last_step=step, steps=n - m, where=where, step_s=sum(vals_i),
                              phases=dict(zip(("data", "forward", "backward", "optimizer"), vals_i))))
        else:
            out.append(Window(last_step=step, steps=n, where=where, step_s=sum(vals),
                              phases=dict(zip(("data", "forward", "backward", "optimizer"), vals))))
        prev_step, prev_vals = step, vals
    return out


TIMING_MODES = ("auto", "running", "interval")
ROUNDING_S = 0.0005
"""PRISM prints [TIMING] seconds to 3 decimals: each value is known to +-0.5 ms."""


def first_impossible_interval(points: list[tuple[int, str, list[float]]]) -> str | None:
    """Where undoing running means gives a negative interval time beyond the print rounding: such
    values cannot be running means (a running mean's n-step sum never falls). None: all consistent."""
    prev: tuple[int, list[float]] | None = None
    for step, where, vals in points:
        start = window_start(step)
        if prev is not None and window_start(prev[0]) == start and prev[0] < step:
            n, m = step - start, prev[0] - start
            if any(v * n - p * m < -ROUNDING_S * (n + m) for v, p in zip(vals, prev[1])):
                return where
        prev = (step, vals)
    return None


def interval_windows(points: list[tuple[int, str, list[float]]]) -> list[Window]:
    """Per-interval means (each [TIMING] line the mean over the steps since the previous one)."""
    out, prev_step = [], None
    for step, where, vals in points:
        steps = step - prev_step if prev_step is not None and prev_step < step else max(1, step - window_start(step))
        out.append(Window(last_step=step, steps=steps, where=where, step_s=sum(vals),
                          phases=dict(zip(("data", "forward", "backward", "optimizer"), vals))))
        prev_step = step
    return out


def timing_windows(points: list[tuple[int, str, list[float]]], mode: str, log: ParsedLog) -> list[Window]:
    """[TIMING] lines as windows: running means (PRISM's native trainer) or per-interval means;
    `auto` reads them as running means unless that is impossible (a negative interval)."""
    if mode not in TIMING_MODES:
        raise SpecError(f"--timing must be one of {', '.join(TIMING_MODES)}, got {mode!r}")
    if mode == "auto":
        bad = first_impossible_interval(points)
        mode = "interval" if bad else "running"
        log.notes.append(f"[TIMING] read as per-interval means: as running means they give a negative time at {bad}"
                         if bad else "[TIMING] read as running means since the last 50-step reset (PRISM's native "
                                     "trainer); pass --timing interval if your trainer logs per-interval means")
    return unrun_means(points) if mode == "running" else interval_windows(points)


def _scenario_line(line: str, where: str, log: ParsedLog) -> None:
    if m := WORLD.search(line):
        log.state("world_size", int(m.group(1)), where)
    if m := ACCUM.search(line):
        log.state("grad_accum", int(m.group(1)), where)
    for text, mode in MODES:
        if text in line:
            log.state("mode", mode, where)
    if "[DDP] Wrapped model" in line:
        log.state("strategy", "ddp", where)
    if m := DDP_BUCKET.search(line):
        log.state("bucket_cap_mb", int(m.group(1)), where)
    if m := DDP_FLAGS.search(line):
        log.state("find_unused_parameters", m.group(1) == "True", where)
        log.state("static_graph", m.group(2) == "True", where)
    if m := FSDP.search(line):
        if m.group(1) not in FSDP_NAMES:
            raise SpecError(f"{where}: FSDP sharding {m.group(1)!r} has no strategy here; "
                            f"known: {', '.join(FSDP_NAMES)}")
        log.state("strategy", FSDP_NAMES[m.group(1)], where)
    if m := HSDP.search(line):
        log.state("strategy", HSDP_NAMES.get(m.group(1).rstrip(","), "hsdp_full_shard"), where)
    if m := TOPO.search(line):
        log.state("nodes", int(m.group(1)), where)
        log.state("ranks_per_node", int(m.group(2)), where)


def read_text(path: Path, timing: str = "auto") -> ParsedLog:
    log = ParsedLog(format="prism-log", files=[path])
    per_log: list[tuple[int, str, list[float]]] = []
    per_50: list[tuple[int, str, list[float]]] = []
    pending_step: int | None = None
    for i, line, ended in text_lines(path):
        where = f"{path}:{i}"
        for tag, pattern, expected in CHECKED:
            if tag in line and not pattern.search(line):
                raise bad_line(path, i, ended, f"PRISM {tag} line", expected)
        _scenario_line(line, where, log)
        if m := STEP.search(line):
            pending_step = int(m.group(1))
        elif m := TIMING.search(line):
            if pending_step is None:
                raise SpecError(f"{where}: [TIMING] line with no 'Step N: Loss' line before it; PRISM logs both, "
                                "and the step count is needed to undo its running means: pass the whole log")
            per_log.append((pending_step, where, [float(m.group(k)) for k in (1, 2, 3, 4)]))
            pending_step = None
        elif m := TIMING50.search(line):
            per_50.append((int(m.group(1)), where, [float(m.group(k)) for k in (3, 5, 7, 9)]))
        elif m := THROUGHPUT.search(line):
            log.state("samples_per_step", int(m.group(2)), where)
        elif m := MEM_PEAK.search(line):
            log.peak("peak_allocated_bytes", float(m.group(1)) * GB)
        elif m := MEM50.search(line):
            log.peak("peak_reserved_bytes", float(m.group(2)) * MiB)
    log.windows = timing_windows(per_log, timing, log) if per_log else [
        Window(last_step=s, steps=s - window_start(s), where=w, step_s=sum(v), phases=dict(zip(
            ("data", "forward", "backward", "optimizer"), v))) for s, w, v in per_50]
    if not per_log and per_50:
        log.notes.append("timing from the [TIMING Step N] 50-step windows (no per-log [TIMING] lines)")
    return log


def _perf_scenario(obj: dict[str, Any], where: str, log: ParsedLog) -> None:
    for key, name in (("world_size", "world_size"), ("batch_size", "micro_batch"), ("grad_accum", "grad_accum")):
        if obj.get(key) is not None:
            log.state(name, int(number(obj, key, where)), where)
    ds = obj.get("dist_strategy")
    if ds == "ddp":
        log.state("strategy", "ddp", where)
    elif ds is not None:
        log.state("dist_strategy", str(ds), where)


def read_perf(path: Path) -> ParsedLog:
    log = ParsedLog(format="prism-perf.jsonl", files=[path])
    per_50: list[Window] = []
    running: list[tuple[int, str, float, float]] = []
    for i, obj in json_lines(path):
        where = f"{path}:{i}"
        site = obj.get("site")
        if "event" in obj or site not in ("trainer_native_per_50", "trainer_native_per_log"):
            continue
        _perf_scenario(obj, where, log)
        step = int(number(obj, "step", where))
        if site == "trainer_native_per_50":
            ph = {p: number(obj, k, where) for p, k in (("data", "data_s"), ("forward", "fwd_s"),
                                                        ("backward", "bwd_s"), ("optimizer", "opt_s"))}
            per_50.append(Window(last_step=step, steps=step - window_start(step), where=where,
                                 step_s=number(obj, "total_step_s", where), phases=ph))
            log.peak("peak_reserved_bytes", (number(obj, "mem_reserved_mb", where, required=False) or 0) * MiB or None)
        else:
            running.append((step, where, number(obj, "samples_per_sec", where),
                            number(obj, "samples_per_step", where)))
            log.peak("peak_allocated_bytes", (number(obj, "peak_gb", where, required=False) or 0) * GB or None)
    if per_50:
        log.windows = per_50
    else:  # per-log records only: total time since the reset = samples_per_step * n / running samples/s
        log.windows = [Window(last_step=w.last_step, steps=w.steps, where=w.where, step_s=w.step_s)
                       for w in unrun_means([(s, w, [sps_step / sps]) for s, w, sps, sps_step in running if sps > 0])]
        if running:
            log.notes.append("timing from per-log running samples/s (no trainer_native_per_50 records)")
    return log

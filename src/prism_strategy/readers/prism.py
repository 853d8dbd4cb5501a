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

The [TIMING] grammar (the one place it lives; `analyze` and `results import` both read it)
-----------------------------------------------------------------------------------------
A ``[TIMING]`` tag (any case) then fields ``NAME [:=] VALUE [s|ms]`` in any order and with any
separators: Data, Fwd/Forward, Bwd/Backward, Opt/Optim/Optimizer, Total/Step time/Iter time
(seconds unless ``ms``); ``step N`` / ``iter N`` the step; ``tokens N`` / ``seq N`` the tokens. So
PRISM's own line above and per-rank lines read alike, e.g. (the shape `analyze` assumed,
tests/fixtures/logs; not read from a trainer's source)::

    [rank3]: [TIMING] step 21 | Data 10.2ms | Fwd 0.312s | Bwd 11.9s | Opt 0.095s | Total 12.3s

What real logs need, kept: the rank from torchrun's ``[rankN]:`` / ``[defaultN]:`` prefix (else
``rank N`` on the line, else ``rank3`` in the path, else 0), lines of several ranks interleaved
(each line says its rank; a line holding two ranks' writes is split at each tag), colour codes,
Windows line ends, and a last line cut mid-write (left out and named: `ParsedLog.cut`). What is
refused (exit 2, file:line): a line that gives a time and names a phase as a field without one
(``Bwd: ?1.88s``; a phase word in prose, ``data loader``, is not a field), a running-mean line
missing one of PRISM's four phases, and PRISM's running-mean line with no ``Step N: Loss`` line
before it (its steps cannot be known). A ``[TIMING]`` line with no
time at all (``[TIMING] DATA_READ done``) is not a step record and is passed over.

A line's step: its own ``step N``, else (PRISM's native trainer) the ``Step N: Loss`` line before
it, its value a running mean; else lines are counted per rank (one line, one step). Windows (what
import stores): the running means undone, else the 50-step windows, else one window per step
(`training_log.step_windows`). Records (what analyze reads): one per line with a step of its own
or counted, else one per window.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from prism_strategy.readers.steps import PHASES, StepTimes
from prism_strategy.readers.training_log import (
    MAX_INDEX,
    TEXT_SUFFIXES,
    ParsedLog,
    Window,
    bad_line,
    file_contains,
    log_lines,
    rank_from_path,
    seconds,
    step_windows,
    window_records,
)
from prism_strategy.specs.errors import SpecError
from prism_strategy.strategies import FSDP1_SHARDING

FORMAT = "prism-log"
SUFFIXES = TEXT_SUFFIXES
OPTIONS = ("timing",)
GB, MiB = 1e9, 2.0**20
RESET_EVERY = 50
_F = r"([0-9]*\.?[0-9]+)"
STEP = re.compile(r"\bStep (\d+): Loss ")
TAG = re.compile(r"\[TIMING(?:\s+Step\s+(\d+))?\]", re.IGNORECASE)
SEGMENT = re.compile(r"(?:\[(?:rank|default)\d+\]:?\s*)?\[TIMING", re.IGNORECASE)
_KEYS = r"(data|fwd|forward|bwd|backward|opt|optim|optimizer|total|step[ _]time|iter[ _]time)"
FIELD = re.compile(rf"\b{_KEYS}\s*[:=]?\s*([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)\s*(ms|s)?\b", re.IGNORECASE)
NAMED = re.compile(rf"\b{_KEYS}\b(?=\s*[:=]|\s*[?.\d])", re.IGNORECASE)
"""A phase named as a field (a separator or a number-like token after it), not in prose ("data loader")."""
INDEX = re.compile(r"\b(?:step|iter|iteration)\s*[:=#]?\s*(\d+)\b(?!\s*(?:ms|s)\b|\.\d)", re.IGNORECASE)
RANK = re.compile(r"\[(?:rank|default)(\d+)\]|\brank\s*[:=]?\s*(\d+)|^\s*(\d+):\s", re.IGNORECASE)
"""[rankN] (torchrun), rank N, or the `N: ` label `srun --label` and Aurora's `mpiexec --label` put
before each line of task N (Slurm srun(1) -l; PALS mpiexec --label)."""
TOKENS = re.compile(r"\b(tokens|tok|seq_len|seq)\s*[:=]?\s*(\d+)\b", re.IGNORECASE)
NATIVE = re.compile(rf"\[TIMING\] Data: {_F}s \| Fwd: {_F}s \| Bwd: {_F}s \| Opt: {_F}s\s*$")
PHASE_OF = {
    "data": "data",
    "fwd": "forward",
    "forward": "forward",
    "bwd": "backward",
    "backward": "backward",
    "opt": "optimizer",
    "optim": "optimizer",
    "optimizer": "optimizer",
}
THROUGHPUT = re.compile(rf"\[THROUGHPUT\] {_F} samples/sec \(effective batch: (\d+)\)\s*$")
MEM_PEAK = re.compile(rf"\[MEMORY\] Peak: {_F}GB, Current: {_F}GB")
MEM50 = re.compile(r"\[MEMORY\] Allocated: (\d+)MB \| Reserved: (\d+)MB")
WORLD = re.compile(r"\[Native DDP\] World size: (\d+)")
ACCUM = re.compile(r"\[Native DDP\] Training: \d+ steps, grad_accum=(\d+)")
MODES = (
    ("Projector-Only mode", "projector"),
    ("Encoder+Projector mode", "encoder-projector"),
    ("E2E mode with", "e2e"),
)
FSDP = re.compile(r"\[FSDP\] Model wrapped with strategy=(\w+)")
HSDP = re.compile(r"\[HSDP\] Model wrapped: (\S+)")
TOPO = re.compile(r"\[HSDP\] Topology: (\d+) nodes x (\d+) ranks/node")
DDP_FLAGS = re.compile(r"\[DDP\] find_unused_parameters=(True|False), static_graph=(True|False)")
DDP_BUCKET = re.compile(r"\[DDP\] Wrapped model with bucket_cap_mb=(\d+)")
FSDP_NAMES = {"full_shard": "fsdp_full_shard", "shard_grad_op": "fsdp_shard_grad_op"}
HSDP_NAMES = {k: v for k, v in FSDP1_SHARDING.items() if k.endswith("HYBRID_SHARD") or k.endswith("ZERO2")}
"""[HSDP] lines name FSDP1's hybrid members (strategies.FSDP1_SHARDING)."""
WORDS = ("[timing", "[throughput]", "[memory]", "[native ddp]", "[ddp]", "[fsdp]", "[hsdp]", "step ", " mode")
"""Every line a pattern here reads has one of these, lower-cased (the rest of a long log is passed
over without a regex)."""
EXPECTED = "'[TIMING] [step N] Data: Xs | Fwd: Xs | Bwd: Xs | Opt: Xs [| Total: Xs]' (s or ms)"

# tag in the line -> (pattern it must match, what PRISM prints)
CHECKED = (
    ("[THROUGHPUT]", THROUGHPUT, "'[THROUGHPUT] X samples/sec (effective batch: N)'"),
    ("[MEMORY] Peak", MEM_PEAK, "'[MEMORY] Peak: XGB, Current: XGB'"),
    ("[MEMORY] Allocated", MEM50, "'[MEMORY] Allocated: NMB | Reserved: NMB'"),
)


def looks_like(path: Path) -> bool:
    return file_contains(path, "[timing")


@dataclass(frozen=True, slots=True)
class Timing:
    """One [TIMING] line: its own step (None when it has none), the 50-step window it closes
    (``[TIMING Step N]``), its rank (None when it does not say), times in seconds, tokens."""

    step: int | None
    window: int | None
    rank: int | None
    times: dict[str, float]
    tokens: float

    @property
    def step_s(self) -> float:
        return self.times.get("step_s", sum(v for p, v in self.times.items() if p in PHASES and math.isfinite(v)))

    def phases(self) -> list[float]:
        return [self.times.get(p, math.nan) for p in PHASES]


def parse_timing(line: str, path: Path, i: int) -> Timing | None:
    """One [TIMING] line (None: no tag, or no time on it); SpecError when it names a phase
    without a time."""
    tag = TAG.search(line)
    if tag is None:
        return None
    body = line[tag.end() :]
    fields = list(FIELD.finditer(body))
    if not fields:
        return None
    starts = {m.start() for m in fields}
    if any(m.start() not in starts for m in NAMED.finditer(body)):
        raise bad_line(path, i, "[TIMING] line (a phase named without a time)", EXPECTED)
    times = {}
    for m in fields:
        v = float(m.group(2)) * (1e-3 if (m.group(3) or "").lower() == "ms" else 1.0)
        times[PHASE_OF.get(m.group(1).lower(), "step_s")] = seconds(v)
    rm, im, tm = RANK.search(line), INDEX.search(body), TOKENS.search(body)
    rank = rank_number(rm)
    step = int(im.group(1)) if im else None
    if (rank or 0) >= MAX_INDEX or (step or 0) >= MAX_INDEX:
        return None
    return Timing(
        step, int(tag.group(1)) if tag.group(1) else None, rank, times, float(tm.group(2)) if tm else math.nan
    )


def parse_timing_line(line: str, counters: dict[int, int], default_rank: int = 0) -> StepTimes | None:
    """One [TIMING] line as one step record (steps counted per rank when the line has none)."""
    t = parse_timing(line, Path("<line>"), 0)
    if t is None or not any(math.isfinite(v) for v in t.phases()):
        return None
    return _counted(t, counters, default_rank)


def _counted(t: Timing, counters: dict[int, int], default_rank: int) -> StepTimes:
    rank = default_rank if t.rank is None else t.rank
    step = counters.get(rank, 0) if t.step is None else t.step
    counters[rank] = step + 1
    return StepTimes(step, rank, t.step_s, *t.phases(), t.tokens)


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
            out.append(
                Window(last_step=step, steps=n - m, where=where, step_s=sum(vals_i), phases=dict(zip(PHASES, vals_i)))
            )
        else:
            out.append(Window(last_step=step, steps=n, where=where, step_s=sum(vals), phases=dict(zip(PHASES, vals))))
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
        out.append(Window(last_step=step, steps=steps, where=where, step_s=sum(vals), phases=dict(zip(PHASES, vals))))
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
        log.notes.append(
            f"[TIMING] read as per-interval means: as running means they give a negative time at {bad}"
            if bad
            else "[TIMING] read as running means since the last 50-step reset (PRISM's native "
            "trainer); pass --timing interval if your trainer logs per-interval means"
        )
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
            raise SpecError(
                f"{where}: FSDP sharding {m.group(1)!r} has no strategy here; known: {', '.join(FSDP_NAMES)}"
            )
        log.state("strategy", FSDP_NAMES[m.group(1)], where)
    if m := HSDP.search(line):
        log.state("strategy", HSDP_NAMES.get(m.group(1).rstrip(","), "hsdp_full_shard"), where)
    if m := TOPO.search(line):
        log.state("nodes", int(m.group(1)), where)
        log.state("ranks_per_node", int(m.group(2)), where)


def segments(line: str) -> list[str]:
    """A line as written by one rank each: two ranks' unbuffered writes can share a line."""
    starts = [m.start() for m in SEGMENT.finditer(line)]
    if len(starts) <= 1:
        return [line]
    return [line[a:b] for a, b in zip([0] + starts[1:], starts[1:] + [len(line)])]


def _recognised(line: str) -> bool:
    return bool(TAG.search(line)) or any(tag in line for tag, _, _ in CHECKED)


@dataclass
class _Points:
    """What the [TIMING] lines of one file gave, by kind."""

    running: dict[int, list[tuple[int, str, list[float]]]]
    """Running-mean points per rank (PRISM logs them on rank 0; a per-rank log on every rank)."""
    per_50: list[tuple[int, str, list[float]]]
    counted: bool = False
    rank: int | None = None


def _timing_line(
    t: Timing,
    seg: str,
    where: str,
    pending: int | None,
    pts: _Points,
    counters: dict[int, int],
    default_rank: int,
    log: ParsedLog,
) -> int | None:
    """File one [TIMING] line; returns the pending 'Step N: Loss' step left (None once used)."""
    pts.rank = pts.rank if t.rank is None else t.rank
    if t.window is not None:
        pts.per_50.append((t.window, where, _four(t, where)))
    elif t.step is None and pending is not None:
        rank = default_rank if t.rank is None else t.rank
        pts.running.setdefault(rank, []).append((pending, where, _four(t, where)))
        return None
    elif t.step is None and NATIVE.search(seg):
        raise SpecError(
            f"{where}: [TIMING] line with no 'Step N: Loss' line before it; PRISM logs both, "
            "and the step count is needed to undo its running means: pass the whole log"
        )
    else:
        pts.counted |= t.step is None
        log.record(_counted(t, counters, default_rank), where)
    return pending


def _four(t: Timing, where: str) -> list[float]:
    vals = t.phases()
    if not all(math.isfinite(v) for v in vals):
        raise SpecError(
            f"{where}: a PRISM running-mean [TIMING] line needs Data, Fwd, Bwd and Opt times; expected {EXPECTED}"
        )
    return vals


def _checked(seg: str, path: Path, i: int) -> None:
    for tag, pattern, expected in CHECKED:
        if tag in seg and not pattern.search(seg):
            raise bad_line(path, i, f"PRISM {tag} line", expected)


def _other_line(seg: str, where: str, log: ParsedLog) -> None:
    if m := THROUGHPUT.search(seg):
        log.state("samples_per_step", int(m.group(2)), where)
    elif m := MEM_PEAK.search(seg):
        log.peak("peak_allocated_bytes", float(m.group(1)) * GB)
    elif m := MEM50.search(seg):
        log.peak("peak_reserved_bytes", float(m.group(2)) * MiB)


def read(path: Path, timing: str = "auto") -> ParsedLog:
    """A text log with [TIMING] lines (PRISM's, or per-rank ones); `timing`: how PRISM's per-log
    lines average (auto, running, interval: `timing_windows`)."""
    log = ParsedLog(format=FORMAT, files=[path])
    pts = _Points({}, [])
    counters: dict[int, int] = {}
    default_rank = rank_from_path(path) or 0
    pending: dict[int, int] = {}  # per rank: the 'Step N: Loss' step its next [TIMING] line belongs to
    last_step: dict[int, int] = {}
    repeats = 0  # 'Step N: Loss' lines that repeat their rank's last N: unlabelled ranks
    for i, line, ended in log_lines(path):
        if not ended:
            if _recognised(line):
                log.cut_off(path, i, "PRISM log line")
            break
        low = line.lower()
        if not any(w in low for w in WORDS):
            continue
        where = f"{path}:{i}"
        for seg in segments(line):
            _checked(seg, path, i)
            _scenario_line(seg, where, log)
            if m := STEP.search(seg):
                r = _rank_of(seg, default_rank)
                repeats += last_step.get(r) == int(m.group(1))
                pending[r] = last_step[r] = int(m.group(1))
            elif (t := parse_timing(seg, path, i)) is not None and any(math.isfinite(v) for v in t.phases()):
                rank = default_rank if t.rank is None else t.rank
                left = _timing_line(t, seg, where, pending.pop(rank, None), pts, counters, default_rank, log)
                if left is not None:
                    pending[rank] = left
            else:
                _other_line(seg, where, log)
    _windows(log, pts, timing, default_rank)
    if repeats:
        log.skipped.append(
            f"{path}: {repeats} 'Step N: Loss' lines repeat the step before them with no rank label: several "
            "ranks print here unlabelled and their [TIMING] lines were read as one rank's (a straggler "
            "cannot show); run with `mpiexec --label` / `srun --label` (or torchrun's [rankN]: prefix)"
        )
    return log


def _rank_of(seg: str, default_rank: int) -> int:
    r = rank_number(RANK.search(seg))
    return r if r is not None and r < MAX_INDEX else default_rank


def rank_number(m: re.Match[str] | None) -> int | None:
    """The rank a RANK match names (whichever of its forms matched)."""
    return int(next(g for g in m.groups() if g)) if m else None


def _windows(log: ParsedLog, pts: _Points, timing_mode: str, default_rank: int) -> None:
    if pts.running:
        per_rank = {r: timing_windows(points, timing_mode, log) for r, points in sorted(pts.running.items())}
        log.notes[:] = list(dict.fromkeys(log.notes))  # one note for all ranks
        first = min(per_rank)
        log.windows = per_rank[first]
        if len(per_rank) > 1:  # every rank logged its own: records from each, windows (import) from one
            log.notes.append(f"running-mean [TIMING] lines from {len(per_rank)} ranks; windows from rank {first}")
            for r, windows in per_rank.items():
                for w in windows:
                    phases = (w.phases.get(p, math.nan) for p in PHASES)
                    log.record(StepTimes(w.last_step, r, w.step_s, *phases), w.where)
            return
    elif pts.per_50:
        log.windows = [
            Window(last_step=s, steps=s - window_start(s), where=w, step_s=sum(v), phases=dict(zip(PHASES, v)))
            for s, w, v in pts.per_50
        ]
        log.notes.append("timing from the [TIMING Step N] 50-step windows (no per-log [TIMING] lines)")
    if log.windows and not log.records:
        window_records(log, default_rank if pts.rank is None else pts.rank)
    elif log.records and not log.windows:
        log.windows = step_windows(log)
        if pts.counted:
            log.notes.append("steps counted per rank: the [TIMING] lines carry no step number")

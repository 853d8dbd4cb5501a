"""Read step logs into `StepTimes` records: ours and PRISM-style ones.

Accepted inputs (a run directory is searched recursively; files may be given directly):

* ours: ``rank{R}.jsonl`` from `StepMonitor` (lines with a ``kind``: meta / step / summary /
  event / close), plus ``hang_report.json`` from the watchdog.
* PRISM ``perf.jsonl`` (assumed format, one JSON object per line, one line per step per rank;
  keys are matched by alias, seconds unless the key ends in ``_ms``)::

      {"step": 12, "rank": 0, "step_time": 1.43, "data_time": 0.01, "fwd_time": 0.31,
       "bwd_time": 1.02, "opt_time": 0.09, "tokens": 4096, "seq_len": 512}

  A missing rank is taken from the path (``rank3`` / ``rank_3`` in a file or folder name), else 0.
* PRISM ``[TIMING]`` lines in any text log (``*.log``, ``*.out``, ``*.err``, ``*.txt``), e.g.::

      [rank3]: [TIMING] step 21 | Data 0.010s | Fwd 0.312s | Bwd 11.9s | Opt 0.095s | Total 12.3s | seq 512

  ``Data|Fwd|Bwd|Opt|Total`` are times (``s`` or ``ms``, ``:`` or ``=`` optional, any case,
  also Forward/Backward/Optim/Optimizer/Step time); ``step N`` / ``iter N`` is the step
  (else lines are counted per rank); the rank comes from a ``[rankN]:`` / ``[defaultN]:``
  prefix (torchrun) or ``rank N``; ``tokens N`` / ``seq N`` are optional.

A malformed JSON line is bad input (`SpecError` naming file and line); only an unterminated last
line (a run killed mid-write) is skipped.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from prism_strategy.runtime.detect import Event, StepTimes, step_times
from prism_strategy.specs.errors import SpecError

TEXT_SUFFIXES = (".log", ".out", ".err", ".txt")
TIME_FIELDS = ("step_s", "data", "forward", "backward", "optimizer", "cpu_forward", "cpu_local")
MAX_FILES = 20_000
"""A folder with more files than this is not a run directory (`analyze /` stops here)."""
SKIP_DIRS = {"stacks", "heartbeat", "flight_recorder", "hang"}

ALIASES: dict[str, tuple[str, ...]] = {
    "step": ("step", "iter", "iteration", "global_step"),
    "rank": ("rank", "global_rank"),
    "step_s": ("step_time", "step_s", "total_step_s", "iter_time", "total_time", "time", "dt"),  # total_step_s: PRISM perf.jsonl
    "data": ("data_time", "data", "data_s", "t_data", "dataload_time"),
    "forward": ("fwd_time", "fwd", "forward", "forward_time", "t_fwd", "fwd_s"),
    "backward": ("bwd_time", "bwd", "backward", "backward_time", "t_bwd", "bwd_s"),
    "optimizer": ("opt_time", "opt", "optim", "optimizer", "optimizer_time", "optim_time", "t_opt", "opt_s"),
    "tokens": ("tokens", "num_tokens", "ntokens", "n_tokens"),
    "seq_len": ("seq_len", "seq", "seqlen", "sequence_length"),
}


@dataclass
class RunLog:
    """Everything read from a run: step records, recorded events, hang reports."""

    records: list[StepTimes] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    hang_reports: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[int, dict[str, Any]] = field(default_factory=dict)
    closed: dict[int, int] = field(default_factory=dict)
    """Ranks whose (last) run wrote a close record, with its step count."""
    sources: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def _rank_from_path(path: Path) -> int | None:
    m = re.search(r"(?<![a-z])rank[_-]?(\d{1,9})(?!\d)", str(path), re.IGNORECASE)
    return int(m.group(1)) if m else None


def _json_lines(path: Path, log: RunLog) -> Iterable[tuple[int, dict[str, Any]]]:
    text = path.read_text(errors="replace")
    lines = text.split("\n")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            if i == len(lines) and not text.endswith("\n"):
                log.skipped.append(f"{path}:{i}: unterminated last line skipped")
                return
            raise SpecError(f"{path}:{i}: malformed JSON line ({e.msg}); fix or remove it") from None
        if not isinstance(obj, dict):
            raise SpecError(f"{path}:{i}: expected a JSON object per line, got {type(obj).__name__}")
        yield i, obj


MAX_INDEX = 2**31
"""Largest step or rank index taken as real (larger ones are a mangled log)."""
MAX_SECONDS = 1e7
"""Largest phase time taken as real; a negative, infinite or larger time reads as unknown."""


def _num(obj: dict[str, Any], name: str) -> float:
    for key in ALIASES[name]:
        for k, scale in ((key, 1.0), (key + "_ms", 1e-3)):
            v = obj.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return float(v) * scale
    return math.nan


def _time(v: float) -> float:
    return v if 0.0 <= v <= MAX_SECONDS else math.nan


def _index(v: Any, where: str, name: str) -> int:
    """A step or rank index: an integer in [0, 2**31) (SpecError naming the file and line)."""
    n = _int(v, where, name)
    if not 0 <= n < MAX_INDEX or n != v:
        raise SpecError(f"{where}: {name} must be an integer in [0, {MAX_INDEX}), got {v!r}")
    return n


def _ours(obj: dict[str, Any], path: Path, where: str, log: RunLog) -> None:
    kind = obj.get("kind")
    if kind == "meta":  # a restart appending to the same file: only its last run counts
        if log.records or log.events:
            log.skipped.append(f"{where}: {len(log.records)} earlier step records (an earlier run) left out")
            log.records.clear()
            log.events.clear()
        log.closed.clear()
        log.meta[_index(obj.get("rank", 0), where, "rank")] = obj
    elif kind == "step":
        try:
            rec = step_times(obj, _index(obj["rank"], where, "rank"))
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
            raise SpecError(f"{where}: step record lacks or mangles {e}") from None
        _index(rec.step, where, "step")
        log.records.append(rec._replace(**{f: _time(getattr(rec, f)) for f in TIME_FIELDS}))
    elif kind == "close":
        rank = obj.get("rank", next(iter(log.meta), _rank_from_path(path) or 0))
        log.closed[_index(rank, where, "rank")] = _int(obj.get("steps", -1), where, "steps")
    elif kind == "event":
        log.events.append(_event(obj, where))


def _int(v: Any, where: str, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise SpecError(f"{where}: {name} must be a number, got {v!r}")
    return int(v)


def _event(obj: dict[str, Any], where: str) -> Event:
    ranks, evidence = obj.get("ranks", ()), obj.get("evidence", {})
    if not isinstance(obj.get("event"), str) or not isinstance(ranks, list) or not isinstance(evidence, dict):
        raise SpecError(f"{where}: event record needs an 'event' name, a 'ranks' list and an 'evidence' object")
    return Event(obj["event"], _int(obj.get("step", -1), where, "step"),
                 tuple(_index(r, where, "rank") for r in ranks), evidence, str(obj.get("message", "")), "online")


def _perf(obj: dict[str, Any], where: str, path: Path, index: int, log: RunLog) -> None:
    rank = _num(obj, "rank")
    rank = _index(rank, where, "rank") if math.isfinite(rank) else (_rank_from_path(path) or 0)
    step = _num(obj, "step")
    step = _index(step, where, "step") if math.isfinite(step) else index
    phases = [_time(_num(obj, p)) for p in ("data", "forward", "backward", "optimizer")]
    step_s = _time(_num(obj, "step_s"))
    if math.isnan(step_s):
        step_s = sum(p for p in phases if math.isfinite(p))
    tokens = _num(obj, "tokens")
    if math.isnan(tokens):
        tokens = _num(obj, "seq_len")
    log.records.append(StepTimes(step, rank, step_s, *phases, tokens))


def read_jsonl(path: Path, log: RunLog) -> None:
    own = RunLog()
    perf_index = 0
    for i, obj in _json_lines(path, own):
        if "kind" in obj:
            _ours(obj, path, f"{path}:{i}", own)
        else:
            _perf(obj, f"{path}:{i}", path, perf_index, own)
            perf_index += 1
    log.records += own.records
    log.events += own.events
    log.meta.update(own.meta)
    log.closed.update(own.closed)
    log.skipped += own.skipped
    if own.records or own.events or own.meta:
        log.sources.append(str(path))


_TIME = re.compile(r"\b(data|fwd|forward|bwd|backward|opt|optim|optimizer|total|step[ _]time|iter[ _]time)"
                   r"\s*[:=]?\s*([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)\s*(ms|s)?\b", re.IGNORECASE)
_INDEX = re.compile(r"\b(?:step|iter|iteration)\s*[:=#]?\s*(\d+)\b(?!\s*(?:ms|s)\b|\.\d)", re.IGNORECASE)
_RANK = re.compile(r"\[(?:rank|default)(\d+)\]|\brank\s*[:=]?\s*(\d+)", re.IGNORECASE)
_TOK = re.compile(r"\b(tokens|tok|seq_len|seq)\s*[:=]?\s*(\d+)\b", re.IGNORECASE)
_KEY = {"data": "data", "fwd": "forward", "forward": "forward", "bwd": "backward", "backward": "backward",
        "opt": "optimizer", "optim": "optimizer", "optimizer": "optimizer"}


def parse_timing_line(line: str, counters: dict[int, int], default_rank: int = 0) -> StepTimes | None:
    """One ``[TIMING]`` line -> StepTimes (None if the line has no phase time)."""
    tag = line.upper().find("[TIMING]")
    if tag < 0:
        return None
    body = line[tag + 8:]
    times: dict[str, float] = {}
    for m in _TIME.finditer(body):
        v = float(m.group(2)) * (1e-3 if (m.group(3) or "").lower() == "ms" else 1.0)
        times[_KEY.get(m.group(1).lower(), "step_s")] = _time(v)
    if not any(math.isfinite(times.get(k, math.nan)) for k in ("data", "forward", "backward", "optimizer")):
        return None
    rm = _RANK.search(line)
    rank = int(rm.group(1) or rm.group(2)) if rm else default_rank
    im = _INDEX.search(body)
    step = int(im.group(1)) if im else counters.get(rank, 0)
    if rank >= MAX_INDEX or step >= MAX_INDEX:
        return None
    counters[rank] = step + 1
    tm = _TOK.search(body)
    step_s = times.get("step_s", sum(times[p] for p in ("data", "forward", "backward", "optimizer")
                                     if math.isfinite(times.get(p, math.nan))))
    return StepTimes(step, rank, step_s, *(times.get(p, math.nan) for p in ("data", "forward", "backward", "optimizer")),
                     float(tm.group(2)) if tm else math.nan)


def read_text_log(path: Path, log: RunLog) -> None:
    counters: dict[int, int] = {}
    default_rank = _rank_from_path(path) or 0
    found = 0
    with open(path, errors="replace") as f:
        for line in f:
            rec = parse_timing_line(line, counters, default_rank)
            if rec is not None:
                log.records.append(rec)
                found += 1
    if found:
        log.sources.append(str(path))


def read_hang_report(path: Path, log: RunLog) -> None:
    try:
        rep = json.loads(path.read_text(errors="replace"))
    except ValueError as e:
        raise SpecError(f"{path}: malformed hang report ({e})") from None
    if not isinstance(rep, dict):
        raise SpecError(f"{path}: a hang report is a JSON object, got {type(rep).__name__}")
    _check_hang_report(rep, str(path))
    rep["_path"] = str(path)
    log.hang_reports.append(rep)
    log.sources.append(str(path))


def _check_hang_report(rep: dict[str, Any], where: str) -> None:
    """The fields `analyze` reads, with the types the watchdog writes them in."""
    for key in ("step", "timeout_s", "written"):
        if key in rep and (isinstance(rep[key], bool) or not isinstance(rep[key], (int, float))):
            raise SpecError(f"{where}: hang report field {key!r} must be a number, got {rep[key]!r}")
    behind = rep.get("ranks_not_reached", {})
    if not isinstance(behind, dict) or not all(isinstance(v, dict) for v in behind.values()):
        raise SpecError(f"{where}: hang report field 'ranks_not_reached' must map ranks to {{step, phase}}")
    for r in list(behind) + list(rep.get("ranks_reached") or []):
        if not str(r).isdigit():
            raise SpecError(f"{where}: hang report names a rank {r!r}; ranks are integers")
    if not isinstance(rep.get("ranks_reached", []), list):
        raise SpecError(f"{where}: hang report field 'ranks_reached' must be a list of ranks")


def _drop_stale_hang_reports(log: RunLog) -> None:
    """A hang report written before the (last) run started belongs to an earlier run."""
    start = max((m.get("t0", 0.0) for m in log.meta.values()), default=0.0)
    stale = [r for r in log.hang_reports if r.get("written", float("inf")) < start]
    for r in stale:
        log.skipped.append(f"{r['_path']}: written before the run started; left out")
        log.hang_reports.remove(r)


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    out = []
    try:
        for p in path.rglob("*"):
            if len(out) >= MAX_FILES:
                raise SpecError(f"{path}: more than {MAX_FILES} files under it; pass the run directory "
                                "or the log files")
            if p.is_file() and not SKIP_DIRS & set(p.relative_to(path).parts[:-1]):
                out.append(p)
    except OSError as e:
        raise SpecError(f"{path}: cannot read the folder ({e.strerror or e})") from None
    return sorted(out)


def _read(f: Path, top: Path, log: RunLog) -> None:
    try:
        if f.name == "hang_report.json":
            read_hang_report(f, log)
        elif f.suffix == ".jsonl":
            read_jsonl(f, log)
        elif f.suffix in TEXT_SUFFIXES or top.is_file():
            read_text_log(f, log)
    except OSError as e:
        raise SpecError(f"{f}: cannot read it ({e.strerror or e})") from None


def load_run(paths: Iterable[str | Path]) -> RunLog:
    """Read every recognised file under the given paths; SpecError when nothing usable is found."""
    log = RunLog()
    paths = [Path(p) for p in paths]
    if not paths:
        raise SpecError("no path given: pass a run directory or log files")
    for path in paths:
        try:
            exists = path.exists()
        except OSError as e:  # e.g. a file name too long
            raise SpecError(f"{str(path)[:80]}...: not a usable path ({e.strerror})") from None
        if not exists:
            raise SpecError(f"{path}: no such file or directory")
        for f in _files(path):
            _read(f, path, log)
    _drop_stale_hang_reports(log)
    if not log.records and not log.hang_reports and not log.meta:
        where = ", ".join(map(str, paths))
        raise SpecError(f"{where}: no step records found (expected rank*.jsonl, perf.jsonl or [TIMING] lines)")
    return log

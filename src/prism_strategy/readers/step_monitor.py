"""StepMonitor logs (this project's `prism_strategy.runtime.monitor`): one ``rank{R}.jsonl`` per rank.

Lines with ``kind``: ``meta`` (rank, world_size, host, device, torch, t0, cpus), ``step`` (step,
step_s, phases, cpu, samples, tokens, peak_mem_bytes), ``event`` (a finding made online), ``close``
(steps), ``summary`` (not needed), and the collapse forensics' ``forensic_window`` / ``forensic``
records (`read_forensics`; analysed by `prism_strategy.analysis.forensics`). A file that restarts (a second meta line) keeps only its
last run. ``peak_mem_bytes`` is the allocator's ``max_memory_allocated`` on an accelerator (peak
allocated) and the process max RSS on CPU. One file is one rank (`read`); a run is its folder
(`read_folder`), whose windows are the steps every rank logged (`training_log.step_windows`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from prism_strategy.readers.steps import Event, step_times
from prism_strategy.readers.training_log import (
    ParsedLog,
    first_json,
    index,
    integer,
    json_lines,
    number,
    rank_from_path,
    seconds,
    step_windows,
)
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.safe_files import require_regular

FORMAT = "stepmonitor"
SUFFIXES = (".jsonl",)
RANK_FILE = re.compile(r"rank(\d+)\.jsonl$")
TIME_FIELDS = ("step_s", "data", "forward", "backward", "optimizer", "cpu_forward", "cpu_local")


def looks_like(path: Path) -> bool:
    return path.suffix == ".jsonl" and bool(re.match(r'\s*\{.*"kind"\s*:', first_json(path)))


def rank_files(folder: Path) -> list[Path]:
    files = sorted((p for p in folder.iterdir() if RANK_FILE.fullmatch(p.name)), key=lambda p: int(p.name[4:-6]))
    for p in files:
        require_regular(p)  # a FIFO named rank0.jsonl would block the read
    return files


def _event(obj: dict[str, Any], where: str) -> Event:
    ranks, evidence = obj.get("ranks", ()), obj.get("evidence", {})
    if not isinstance(obj.get("event"), str) or not isinstance(ranks, list) or not isinstance(evidence, dict):
        raise SpecError(f"{where}: event record needs an 'event' name, a 'ranks' list and an 'evidence' object")
    return Event(
        obj["event"],
        integer(obj.get("step", -1), where, "step"),
        tuple(index(r, where, "rank") for r in ranks),
        evidence,
        str(obj.get("message", "")),
        "online",
    )


def _restart(log: ParsedLog, where: str, extras: list[Any]) -> None:
    if log.records or log.events:
        log.skipped.append(f"{where}: {len(log.records)} earlier step records (an earlier run) left out")
    log.records.clear()
    log.events.clear()
    log.closed.clear()
    extras.clear()


def _step(obj: dict[str, Any], where: str, log: ParsedLog, extras: list[Any], rank: int | None) -> None:
    """rank: the file's (its meta line's, else its name's) for a step line that names none."""
    try:
        rec = step_times(obj, index(obj["rank"] if "rank" in obj or rank is None else rank, where, "rank"))
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
        raise SpecError(f"{where}: step record lacks or mangles {e}") from None
    index(rec.step, where, "step")
    log.record(rec._replace(**{f: seconds(getattr(rec, f)) for f in TIME_FIELDS}), where)
    extras.append(
        (
            where,
            number(obj, "samples", where, required=False),
            number(obj, "tokens", where, required=False),
            number(obj, "peak_mem_bytes", where, required=False),
        )
    )


def read(path: Path) -> ParsedLog:
    """One rank's file."""
    log = ParsedLog(format=FORMAT, files=[path])
    extras: list[Any] = []
    meta: dict[str, Any] = {}
    for i, obj in json_lines(path, log):
        where, kind = f"{path}:{i}", obj.get("kind")
        if kind == "meta":  # a restart appending to the same file: only its last run counts
            _restart(log, where, extras)
            meta = obj | {"_where": where}
            log.meta[index(obj.get("rank", 0), where, "rank")] = obj
        elif kind == "step":
            _step(obj, where, log, extras, meta.get("rank", rank_from_path(path)))
        elif kind == "close":
            rank = obj.get("rank", next(iter(log.meta), rank_from_path(path) or 0))
            log.closed[index(rank, where, "rank")] = integer(obj.get("steps", -1), where, "steps")
        elif kind == "event":
            log.events.append(_event(obj, where))
    _scenario(log, meta, extras)
    return log


def _scenario(log: ParsedLog, meta: dict[str, Any], extras: list[Any]) -> None:
    if "world_size" in meta:
        log.state("world_size", integer(meta["world_size"], meta["_where"], "world_size"), meta["_where"])
    if meta:
        log.host, log.torch = str(meta.get("host", "")), str(meta.get("torch", ""))
    on_cpu = str(meta.get("device", "cpu")).startswith("cpu")
    for _, _, _, peak in extras:
        log.peak("peak_rss_bytes" if on_cpu else "peak_allocated_bytes", peak)
    if extras and _count(extras[0][1]):  # NaN, inf or 10**400 samples say nothing (the fuzz found int(nan))
        where, samples, tokens, _ = extras[0]
        log.state("samples_per_rank_step", int(samples), where)
        if _count(tokens):
            log.state("seq_len", int(tokens // samples), where)


def _count(v: float | None) -> bool:
    return v is not None and 1 <= v < 2**53


def read_forensics(path: Path) -> list[dict[str, Any]]:
    """The ``forensic`` step records of the file's last run (a cut last line left out)."""
    scratch = ParsedLog(format=FORMAT, files=[path])
    out: list[dict[str, Any]] = []
    for i, obj in json_lines(path, scratch):
        kind, where = obj.get("kind"), f"{path}:{i}"
        if kind == "meta":
            out.clear()
        elif kind == "forensic":
            if not isinstance(obj.get("window"), str) or not isinstance(obj.get("collectives", []), list):
                raise SpecError(f"{where}: forensic record needs a 'window' name and a 'collectives' list")
            index(obj.get("step"), where, "step")
            index(obj.get("rank"), where, "rank")
            out.append(obj)
    return out


def read_folder(folder: Path) -> ParsedLog:
    """Every rank of one run; its windows are the steps every rank logged."""
    files = rank_files(folder)
    logs = [read(f) for f in files]
    for f, one in zip(files, logs):
        if not one.meta:
            raise SpecError(f"{f}: no meta line; not a StepMonitor rank file")
    log = logs[0]
    for other in logs[1:]:
        log.merge(other)
    world = log.scenario.get("world_size", len(files))
    if len(files) != world:
        log.notes.append(f"{len(files)} rank files for world size {world}; timing from the ranks present")
    log.windows = step_windows(log)
    return log

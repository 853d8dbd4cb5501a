"""Import runs measured elsewhere into the results store (``prism-strategy results import PATH``).

Formats: every training-log reader in `readers.READERS` (detected, or named by --format); each
returns a `ParsedLog` whose windows are stored; the scenario comes from flags and the log
(`scenario`), steady state from `steady`; the result is stored with provenance
``imported`` and its source path. Parsing and checking finish before anything is written, and
the write is one transaction, so a bad or partial log stores nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prism_strategy.bench.importers.scenario import check_flags, resolve
from prism_strategy.bench.importers.steady import Steady, steady_state
from prism_strategy.bench.results.predict import predict
from prism_strategy.bench.results.store import Result, Store
from prism_strategy.inputs.stored import row_values
from prism_strategy.readers import named, read_run, torchtitan
from prism_strategy.readers.steps import PHASES
from prism_strategy.readers.training_log import ParsedLog
from prism_strategy.specs.errors import SpecError


@dataclass
class Imported:
    """One imported run: the stored result, its steady-state split and the notes for the report."""

    result: Result
    steady: Steady
    origin: dict[str, str]
    format: str
    notes: list[str] = field(default_factory=list)
    action: str = ""
    files: list[Path] = field(default_factory=list)


def read_log(path: Path, timing: str = "auto", fmt: str | None = None) -> ParsedLog:
    """One run from a file or folder (`readers.read_run`: the named format, else detected).
    timing: how PRISM [TIMING] lines average (auto, running, interval: readers/prism.py)."""
    return read_run(path, fmt, timing=timing)


def _measured(config: dict[str, Any], log: ParsedLog, steady: Steady) -> dict[str, Any]:
    step, v = steady.mean(lambda w: w.step_s), row_values(config)
    samples = v["micro_batch"] * v["grad_accum"] * v["nproc"]
    m: dict[str, Any] = {
        "step_time_s": step,
        "samples_per_s": samples / step,
        "tokens_per_s": samples * v["seq_len"] / step,
    }
    for p in PHASES:
        v = steady.mean(lambda w, p=p: w.phases.get(p))
        if v is not None:
            m[f"{p}_s"] = v
    for k in ("tflops", "mfu_pct"):
        v = steady.mean(lambda w, k=k: w.extra.get(k))
        if v is not None:
            m[f"{k}_per_device" if k == "tflops" else k] = v
    m["peak_memory_bytes"] = log.peak_allocated_bytes or log.peak_rss_bytes
    if log.peak_rss_bytes:
        m["peak_memory_kind"] = "process max RSS (CPU)"
    m["steady"] = steady.as_dict()
    return m


def _dedup_key(files: list[Path]) -> str:
    """The run is its log's content: importing it again (even with corrected flags) updates the row."""
    h = hashlib.sha256()
    for f in files:
        with open(f, "rb") as fh:  # in blocks: a log may be larger than memory
            while block := fh.read(1 << 20):
                h.update(block)
    return "imported:" + h.hexdigest()[:32]


def import_fingerprint(log: ParsedLog, plat: Any) -> dict[str, Any]:
    """What the calibration cache matches (platform, backend, torch), as for a bench run: the
    platform's backend, and the log's torch, else this machine's (said in `torch_from`)."""
    from importlib import metadata

    torch, source = log.torch, "the log"
    if not torch:
        try:
            torch, source = metadata.version("torch"), "the importing machine (the log does not say)"
        except metadata.PackageNotFoundError:
            torch, source = None, "unknown"
    return {
        "host": log.host,
        "platform": plat.name,
        "backend": plat.backend,
        "torch": torch,
        "torch_from": source,
        "format": log.format,
    }


def build_import(path: str | Path, flags: dict[str, Any]) -> Imported:
    """Read, resolve and check one run; nothing is written."""
    path, flags = Path(path), dict(flags)
    timing, fmt = flags.pop("timing", None) or "auto", flags.pop("format", None)
    if fmt is not None:
        named(fmt)
    check_flags(flags, str(path))  # before the log is read: a long parse does not precede a flag error
    log = read_log(path, timing, fmt)
    config, plat, origin = resolve(flags, log, str(path))
    if log.format == torchtitan.FORMAT:
        v = row_values(config)
        torchtitan.set_step_times(log, v["micro_batch"] * v["grad_accum"] * v["seq_len"])
    steady = steady_state(log.windows, str(path))
    try:
        predicted = predict(config, plat)
    except SpecError as e:
        raise SpecError(f"{path}: the scenario cannot be modelled: {e}") from None
    result = Result(
        kind="bench",
        status="ok",
        strategy=config["strategy"],
        platform=plat.name,
        config=config,
        measured=_measured(config, log, steady),
        predicted=predicted,
        fingerprint=import_fingerprint(log, plat),
        provenance="imported",
        source=", ".join(str(f.resolve()) for f in log.files),
        peak_allocated_bytes=log.peak_allocated_bytes,
        peak_reserved_bytes=log.peak_reserved_bytes,
        dedup_key=_dedup_key(log.files),
    )
    return Imported(
        result=result,
        steady=steady,
        origin=origin,
        format=log.format,
        notes=log.notes + log.skipped,
        files=list(log.files),
    )


def import_run(path: str | Path, flags: dict[str, Any], store: Store) -> Imported:
    """Import one run; importing the same log again adds nothing (updates it when the flags changed)."""
    imp = build_import(path, flags)
    [(rid, action)] = store.add_many([imp.result])
    imp.result = dataclasses.replace(imp.result, id=rid)
    imp.action = action
    return imp

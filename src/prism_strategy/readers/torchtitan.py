"""torchtitan training logs (`torchtitan/components/metrics.py`, ``MetricsProcessor.log``).

Every ``metrics.log_freq`` steps (and at step 1) rank 0 logs, colour codes optional::

    [titan] 2026-03-01 12:00:00,000 - root - INFO - step: 20  loss:  7.1234  grad_norm:  1.2345
        memory: 44.12GiB(69.04%)  tps: 3,456  tflops: 82.00  mfu: 27.52%

(one line; ``grad_norm`` is absent in older versions). ``tps`` is tokens per second per device
over the steps since the previous line; ``memory`` is the peak *reserved* device memory over
those steps (``max_reserved_gib``, peaks reset after each line); ``tflops`` and ``mfu`` are per
device. A window's step time is therefore ``local batch x grad accum x seq len / tps``, which
needs the batch and sequence from the log's start line or from flags. Older torchtitan prints
``Training starts at step 1, with local batch size B, global batch size G, [gradient
accumulation steps A,] sequence length S, ...``; newer ones print only the step. No phase
times: `analyze` judges the windows of rank 0 (diagnose/window_verdict.py), and how the log
ends: torchtitan's Trainer.train logs ``Training completed`` after the last step
(torchtitan/trainer.py@b5bcd76); a log without it ended early: at a ``^C`` / KeyboardInterrupt /
Traceback / scheduler signal line when it has one, else killed or still running (an `incomplete`
event here, for analyze; `results import` stores the windows either way).
"""

from __future__ import annotations

import re
from pathlib import Path

from prism_strategy.readers.log_end import LogEnd
from prism_strategy.readers.training_log import TEXT_SUFFIXES, ParsedLog, Window, bad_line, head_text, log_lines
from prism_strategy.specs.errors import SpecError

FORMAT = "torchtitan-log"
NO_STEP_RECORDS = (
    "rank 0's tokens/s per logging window, no per-rank phase times (data, forward, backward, optimizer), "
    "which `analyze` needs to tell a collapse, a straggler or a hang apart; store its windows with "
    "`prism-strategy results import`, or time the run with StepMonitor (docs/collapse.md)"
)
"""Why `analyze` cannot judge a torchtitan log (what it says instead of 'no step records')."""
SUFFIXES = TEXT_SUFFIXES
GiB = 2.0**30
_N = r"(-?[0-9][0-9,]*\.?[0-9]*(?:[eE][-+]?\d+)?|nan|inf)"
METRICS = re.compile(
    rf"(?<!validate )\bstep:\s*(\d+)\s+loss:\s*{_N}\s+(?:grad_norm:\s*{_N}\s+)?"
    rf"memory:\s*([0-9.]+)\s*GiB\(\s*([0-9.]+)%\)\s+tps:\s*([0-9,]+)"
    rf"(?:\s+tflops:\s*([0-9,.]+))?(?:\s+mfu:\s*([0-9.]+)%)?\s*$"
)
START = re.compile(
    r"Training starts at step (\d+), with local batch size (\d+), global batch size (\d+)"
    r"(?:, gradient accumulation steps (\d+))?, sequence length (\d+)"
)
COMPLETED = "Training completed"
SIZE = re.compile(r"size: ([\d,]+) total parameters")
"""torchtitan/trainer.py: `Model NAME FLAVOR size: N total parameters` (every parameter, counted once)."""
INIT = re.compile(r"Trainer is initialized with .*gradient accumulation steps (\d+), maximum context length (\d+)")
"""Newer torchtitan's start line (trainer.py@b5bcd76): the accumulation and sequence length as printed."""
EXPECTED = "'step: N  loss: X  [grad_norm: X]  memory: XGiB(P%)  tps: N  tflops: X  mfu: P%'"


def looks_like(path: Path) -> bool:
    return bool(re.search(r"\bstep:\s*\d+\s+loss:.*\btps:", head_text(path)))


def _num(text: str | None) -> float | None:
    return None if text is None else float(text.replace(",", ""))


def read(path: Path) -> ParsedLog:
    log = ParsedLog(format=FORMAT, files=[path])
    prev_step: int | None = None
    end = LogEnd(completed_by=COMPLETED, program="torchtitan")
    for i, line, ended in log_lines(path):
        where = f"{path}:{i}"
        end.see(line, where)
        if m := SIZE.search(line):
            log.state("model_params", int(m.group(1).replace(",", "")), where)
        if m := INIT.search(line):
            log.state("grad_accum", int(m.group(1)), where)
            log.state("seq_len", int(m.group(2)), where)
            continue
        if m := START.search(line):
            local, glob, accum, seq = int(m.group(2)), int(m.group(3)), int(m.group(4) or 1), int(m.group(5))
            log.state("micro_batch", local, where)
            log.state("grad_accum", accum, where)
            log.state("seq_len", seq, where)
            if min(local, glob, accum, seq) < 1:
                raise SpecError(
                    f"{where}: batch sizes, accumulation and sequence length must be >= 1; import an unedited log"
                )
            if glob % (local * accum):
                raise SpecError(f"{where}: global batch {glob} is not local batch x accumulation x ranks")
            log.state("world_size", glob // (local * accum), where)
            prev_step = int(m.group(1)) - 1
            continue
        if "validate step:" in line or not re.search(r"\bstep:\s*\d+\s+loss:", line):
            continue
        if not ended:  # a metrics line without its newline was cut mid-write
            log.cut_off(path, i, "torchtitan metrics line")
            break
        m = METRICS.search(line)
        if not m:
            raise bad_line(path, i, "torchtitan metrics line", EXPECTED)
        step = int(m.group(1))
        steps = step - prev_step if prev_step is not None and step > prev_step else (1 if step == 1 else None)
        if steps is None:
            raise SpecError(f"{where}: step {step} follows step {prev_step}; import one run (one log) at a time")
        tps = _num(m.group(6))
        if not tps:
            raise SpecError(f"{where}: tps is 0; a window with no tokens has no step time")
        extra = {k: v for k, v in (("tflops", _num(m.group(7))), ("mfu_pct", _num(m.group(8)))) if v is not None}
        log.windows.append(Window(last_step=step, steps=steps, where=where, tokens_per_s=tps, extra=extra))
        log.peak("peak_reserved_bytes", float(m.group(4)) * GiB)
        prev_step = step
    if (ev := end.event(log)) is not None:
        log.events.append(ev)
    return log


def set_step_times(log: ParsedLog, tokens_per_step_per_device: int) -> None:
    """tokens/s per device -> seconds per optimizer step, once batch and sequence are known."""
    log.windows = [
        Window(
            last_step=w.last_step,
            steps=w.steps,
            where=w.where,
            tokens_per_s=w.tokens_per_s,
            extra=w.extra,
            step_s=tokens_per_step_per_device / w.tokens_per_s,
        )
        for w in log.windows
    ]

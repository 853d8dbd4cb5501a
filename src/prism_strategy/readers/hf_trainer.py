"""Hugging Face Trainer logs (transformers `Trainer._inner_training_loop` and its tqdm bar), as a
job's stdout holds them::

    ***** Running training *****
      Num examples = 1,000
      Instantaneous batch size per device = 8
      Total train batch size (w. parallel, distributed & accumulation) = 64
      Gradient Accumulation steps = 4
      Total optimization steps = 375
      Number of trainable parameters = 124,439,808
     10%|#         | 38/375 [00:40<05:55,  1.05s/it]        (tqdm, updates joined by carriage returns)
    {'loss': 3.1, 'grad_norm': 2.0, 'learning_rate': 4.5e-05, 'epoch': 0.27}
    {'train_runtime': 400.1, 'train_samples_per_second': 7.5, 'train_steps_per_second': 0.937, ...}

Each tqdm update gives the optimizer steps done and tqdm's rate (it/s or s/it, its smoothed
mean over recent updates): one window per new step count, its seconds per step from the rate.
The banner gives the micro-batch, the accumulation and the world size (total batch / (micro-batch
x accumulation)); ``train_runtime`` is written once training ends (the end line: diagnose reads a
log without it as incomplete, readers/log_end.py). Rank 0 only: no per-rank phase times.
"""

from __future__ import annotations

import re
from pathlib import Path

from prism_strategy.readers.log_end import LogEnd
from prism_strategy.readers.torchtitan import NO_STEP_RECORDS as _TITAN_WHY
from prism_strategy.readers.training_log import TEXT_SUFFIXES, ParsedLog, Window, head_text, log_lines
from prism_strategy.specs.errors import SpecError

FORMAT = "hf-trainer-log"
SUFFIXES = TEXT_SUFFIXES
NO_STEP_RECORDS = _TITAN_WHY.replace("rank 0's tokens/s", "rank 0's steps per second")
BANNER = "***** Running training *****"
COMPLETED = "train_runtime"
TQDM = re.compile(r"(\d+)/(\d+) \[(?:\d+:)?\d+:\d+<[^,\]]*,\s*([0-9.]+)(it/s|s/it)\]")
FIELDS = {
    "micro_batch": re.compile(r"Instantaneous batch size per device = ([\d,]+)"),
    "grad_accum": re.compile(r"Gradient Accumulation steps = ([\d,]+)"),
    "total_batch": re.compile(r"Total train batch size \(w\. parallel, distributed & accumulation\) = ([\d,]+)"),
    "trainable_params": re.compile(r"Number of trainable parameters = ([\d,]+)"),
}


def looks_like(path: Path) -> bool:
    head = head_text(path, 1 << 20)
    return BANNER in head or bool(TQDM.search(head) and "'learning_rate'" in head)


def read(path: Path) -> ParsedLog:
    log = ParsedLog(format=FORMAT, files=[path])
    end = LogEnd(completed_by=COMPLETED, program="Hugging Face Trainer")
    said: dict[str, int] = {}
    wheres: dict[str, str] = {}
    prev = 0
    for i, line, _ended in log_lines(path):
        where = f"{path}:{i}"
        end.see(line, where)
        for name, pattern in FIELDS.items():
            if m := pattern.search(line):
                said[name], wheres[name] = int(m.group(1).replace(",", "")), where
                if name in ("micro_batch", "grad_accum"):
                    log.state(name, said[name], where)
        for m in TQDM.finditer(line):
            step, rate = int(m.group(1)), float(m.group(3))
            if step <= prev or rate <= 0:
                continue
            step_s = rate if m.group(4) == "s/it" else 1.0 / rate
            log.windows.append(Window(last_step=step, steps=step - prev, where=where, step_s=step_s))
            prev = step
    _world(log, said, wheres)
    if (ev := end.event(log)) is not None:
        log.events.append(ev)
    return log


def _world(log: ParsedLog, said: dict[str, int], wheres: dict[str, str]) -> None:
    micro, accum, total = said.get("micro_batch"), said.get("grad_accum", 1), said.get("total_batch")
    if micro and total:
        if total % (micro * accum):
            where = wheres["total_batch"]
            raise SpecError(
                f"{where}: total train batch {total} is not micro-batch {micro} x accumulation {accum} x ranks"
            )
        log.state("world_size", total // (micro * accum), wheres["total_batch"])
    if "trainable_params" in said:
        log.notes.append(f"trainable parameters as printed: {said['trainable_params']:,}")

"""`plan --rank-jitter`: the per-rank spread of the work between synchronisations, as a number or
read from a StepMonitor folder (rank{R}.jsonl, runtime/monitor.py) of the user's own run.

From the logs: each rank's collective-free work per step, local = data + forward + optimizer
(analysis/detect.Series.local: in DDP / ZeRO-1/2 these phases hold no collective, so they are
measured without a barrier); per step, the std across ranks over the mean; the median over the
steps after the first WARMUP. That is the cv estimate/scale_loss.py prices: the spread of one
interval's work between two synchronisations. Where forward holds collectives (FSDP all-gathers)
the forward includes waits and the spread is a lower bound, and the number of steps limits it.
"""

from __future__ import annotations

import math
from pathlib import Path

from prism_strategy.analysis.detect import Series
from prism_strategy.readers.step_monitor import rank_files, read_folder
from prism_strategy.specs.errors import SpecError

WARMUP = 2
"""Leading steps left out (compilation, allocator warm-up, first data loads)."""


def rank_jitter_from(value: str) -> float:
    """A cv given as a number (0.02), or read from a StepMonitor folder; bad input is a SpecError."""
    p = Path(value)
    if p.is_dir():
        return stepmonitor_jitter(p)
    try:
        cv = float(value)
    except ValueError:
        raise SpecError(
            f"--rank-jitter {value!r}: give the spread as a number (std / mean, e.g. 0.02) or a "
            "StepMonitor folder of rank*.jsonl files"
        ) from None
    if not 0 <= cv < 1:
        raise SpecError(f"--rank-jitter {value}: must be in [0, 1) (std / mean of one rank's work, e.g. 0.02)")
    return cv


def stepmonitor_jitter(folder: Path) -> float:
    files = rank_files(folder)
    if len(files) < 2:
        raise SpecError(
            f"--rank-jitter {folder}: {len(files)} rank*.jsonl file(s); a spread across ranks needs "
            "the logs of 2 or more ranks (StepMonitor writes one per rank)"
        )
    s = Series.from_records(read_folder(folder).records)  # the readers' grammar: analyze reads these alike
    local = s.local
    spreads = []
    for j in range(WARMUP, local.shape[1]):
        col = [float(x) for x in local[:, j] if math.isfinite(float(x))]
        if len(col) >= 2 and (mean := sum(col) / len(col)) > 0:
            spreads.append(math.sqrt(sum((x - mean) ** 2 for x in col) / (len(col) - 1)) / mean)
    if not spreads:
        raise SpecError(
            f"--rank-jitter {folder}: no step after the first {WARMUP} with data/forward/optimizer "
            "phases on 2 or more ranks; log more steps with StepMonitor"
        )
    spreads.sort()
    mid = len(spreads) // 2
    return spreads[mid] if len(spreads) % 2 else 0.5 * (spreads[mid - 1] + spreads[mid])

"""Log readers, one per format: `looks_like(path)` and `read(path)` (DESIGN.md, readers/).

Collective benchmarks users already run: nccl-tests (`nccl_tests`) and oneCCL's `benchmark`
(`oneccl_benchmark`); each returns a `CollectiveLog`. Training logs `results import` stores:
PRISM's [TIMING] logs and perf.jsonl (`prism`), torchtitan's (`torchtitan`) and StepMonitor
folders (`step_monitor`); each returns a `training_log.ParsedLog` (bench/importers/ picks one and
stores it). diagnose/logs.py still reads step logs with its own, more lenient grammar.
"""

from __future__ import annotations

from prism_strategy.readers import nccl_tests, oneccl_benchmark
from prism_strategy.readers.collective_log import CollectiveLog, Sample

COLLECTIVE_FORMATS = {"nccl-tests": nccl_tests, "oneccl-benchmark": oneccl_benchmark}

__all__ = ["COLLECTIVE_FORMATS", "CollectiveLog", "Sample"]

"""Log readers, one per format: `looks_like(path)` and `read(path)` (DESIGN.md, readers/).

Here so far: the collective benchmarks users already run, nccl-tests (`nccl_tests`) and
oneCCL's `benchmark` (`oneccl_benchmark`); each returns a `CollectiveLog`. The training-log
readers still live in bench/importers/ (they move here separately).
"""

from __future__ import annotations

from prism_strategy.readers import nccl_tests, oneccl_benchmark
from prism_strategy.readers.collective_log import CollectiveLog, Sample

COLLECTIVE_FORMATS = {"nccl-tests": nccl_tests, "oneccl-benchmark": oneccl_benchmark}

__all__ = ["COLLECTIVE_FORMATS", "CollectiveLog", "Sample"]

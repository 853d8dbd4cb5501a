"""oneCCL's `benchmark` output (github.com/oneapi-src/oneCCL, read at 5f70104:
examples/benchmark/src/benchmark.cpp and include/benchmark.hpp print it).

    options:
      processes:       24
      ...
      buf_count:       1
    datatype: bfloat16
    reduction: sum
    #------------------------------------------------------------
    # Benchmarking: allreduce
    # #processes: 24
    #------------------------------------------------------------
            #bytes   #elem_count  #repetitions   t_min[usec]   t_max[usec]   t_avg[usec]  stddev[%]
           1048576        524288            20        210.51        231.90        220.03       2.41
    # All done

Columns by their header (older releases print no #elem_count). Times are usec per iteration;
t_avg is the mean over ranks (print_timings), the time taken here, as nccl-tests' default.
#bytes = elem_count x dtype size x buf_count, per rank: for allgather(v) the send buffer, so the
gathered payload (census convention) is #bytes x processes; reduce_scatter's elem_count is the
unscattered send count (cpu_reduce_scatter_coll.hpp: recv = elem_count / comm size): as is.
Host buffers (backend host, sycl_dev_type cpu, sycl_usm_type host) mark the log `buffers = "host"`:
stored as its own curve, never priced as the device's collective. Refused, because the times
would not be one collective's: several collectives benchmarked
together (their times are summed), buf_count > 1 (buffers in flight at once), several tables.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from prism_strategy.readers.collective_log import CollectiveLog, Sample, bad_line, head, text_lines
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.safe_files import MAX_INT

FORMAT = "oneccl-benchmark"
OPS = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "allgatherv": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "bcast": "broadcast",
    "broadcast": "broadcast",
}
NEEDED = ("#bytes", "#repetitions", "t_min[usec]", "t_max[usec]", "t_avg[usec]", "stddev[%]")
_KEY = re.compile(r"(?:#\s*)?(#processes|buf_count|datatype|Benchmarking|backend|sycl_dev_type|sycl_usm_type):\s*(.*)")
HOST = {"backend": ("host",), "sycl_dev_type": ("cpu", "host"), "sycl_usm_type": ("host",)}
"""Options under which the benchmark's buffers are host memory (benchmark.hpp print_user_options):
the host backend, a CPU SYCL device, or USM host allocations."""


def looks_like(path: Path) -> bool:
    text = head(path)
    return "# Benchmarking:" in text or ("t_avg[usec]" in text and "#bytes" in text)


def _settings(log: CollectiveLog, key: str, value: str, where: str) -> None:
    if key == "Benchmarking":
        names = value.split()
        if len(names) != 1:
            raise SpecError(
                f"{where}: benchmarks {', '.join(names) or 'nothing'} together (their times are "
                "summed); run one collective per -l"
            )
        if names[0] not in OPS:
            raise SpecError(f"{where}: {names[0]} is not a collective the planner prices; one of {', '.join(OPS)}")
        log.op = OPS[names[0]]
    elif key == "#processes":
        if not (value.strip().isascii() and value.strip().isdigit()):
            raise SpecError(f"{where}: #processes {value.strip()!r} is not a count; import the benchmark's own output")
        log.ranks = int(value)
    elif key == "buf_count" and value.strip() != "1":
        raise SpecError(
            f"{where}: buf_count {value.strip()}: buffers run at once, not one collective; rerun with --buf_count 1"
        )
    elif key == "datatype":
        log.dtype = value.strip()
    elif key in HOST and value.strip() in HOST[key]:
        log.buffers = "host"


def read(path: Path) -> CollectiveLog:
    log = CollectiveLog(format=FORMAT, path=path)
    cols: dict[str, int] | None = None
    tables, done, last = 0, False, 0
    for i, line, ended in text_lines(path):
        last, s = i, line.strip()
        if m := _KEY.fullmatch(s):
            _settings(log, m.group(1), m.group(2), f"{path}:{i}")
        elif s.startswith("#bytes"):
            names = s.split()
            missing = [n for n in NEEDED if n not in names]
            if missing:
                raise bad_line(path, i, ended, "the table header", "columns " + " ".join(NEEDED))
            cols, tables = {n: names.index(n) for n in names}, tables + 1
        elif s == "# All done":
            done = True
        elif s[:1].isdigit() and cols is not None:
            log.samples.append(_row(log, cols, i, s, ended))
    if not done:
        raise SpecError(
            f"{path}:{last}: the log ends before the benchmark's '# All done' (a truncated log: the run "
            "did not finish); import a complete log"
        )
    if tables != 1 or not log.op:
        raise SpecError(
            f"{path}: expected one '# Benchmarking:' table, found {tables}; run one datatype and reduction per log"
        )
    if log.op == "all_gather":
        if not log.ranks:
            raise SpecError(f"{path}: an allgather log without '# #processes:': the gathered size is unknown")
        log.samples = [Sample(bytes=x.bytes * log.ranks, seconds=x.seconds, where=x.where) for x in log.samples]
    return log


def _row(log: CollectiveLog, cols: dict[str, int], i: int, line: str, ended: bool) -> Sample:
    t = line.split()
    expected = "numbers under " + " ".join(NEEDED)
    if len(t) < len(cols):
        raise bad_line(log.path, i, ended, "a result row", expected)
    try:
        nbytes, us = int(t[cols["#bytes"]]), float(t[cols["t_avg[usec]"]])
    except (ValueError, IndexError):
        raise bad_line(log.path, i, ended, "a result row", expected) from None
    if not 0 < nbytes <= MAX_INT or not 0 < us < math.inf:
        raise SpecError(
            f"{log.path}:{i}: {str(nbytes)[:24]} B in {us} us is not a measurement (both must be finite and > 0)"
        )
    if any(x.bytes == nbytes for x in log.samples):
        raise SpecError(f"{log.path}:{i}: size {nbytes} B appears twice; import one run per log")
    return Sample(bytes=float(nbytes), seconds=us * 1e-6, where=f"{log.path}:{i}")

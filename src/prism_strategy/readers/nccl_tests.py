"""nccl-tests `*_perf` output (github.com/NVIDIA/nccl-tests, read at a0b82b2: src/util.cu and
src/common.cu print it).

    # nccl-tests version 2.17.1 nccl-headers=22807 nccl-library=22807      (newer releases)
    # Collective test starting: all_reduce_perf                              (newer releases)
    # nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 ...
    #  Rank  0 Group  0 Pid 123456 on    node01 device  0 [0000:18:00] NVIDIA H100 80GB HBM3
    #       size         count      type   redop    root     time   algbw   busbw  #wrong     time ...
       1048576        262144     float     sum      -1    35.12   29.86   55.98       0    34.80 ...
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 120.5
    # Collective test concluded: all_reduce_perf                             (newer releases)

A data row is `%12li  %12li  %8s  %6s  %6s` (size in bytes, count, type, redop, root), then
out-of-place and in-place `time algbw busbw #wrong` (time in us; #wrong "N/A" without -c), each
followed by `i_min i_max i_p99 i_cv%` with per-iteration timing (-I 1), and a timestamp with -T.
`size` is max(send, receive) bytes (common.cu: writeBenchmarkLinePreamble): the gathered output
of an all-gather, the unscattered input of a reduce-scatter: census's payload. Time taken:
in-place for all_reduce and broadcast (torch reduces DDP's buckets in place), out-of-place for
all_gather and reduce_scatter (FSDP2 gathers into a separate buffer). The collective comes from
"Collective test starting: X_perf" or, for older releases, from the file name.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from prism_strategy.readers.collective_log import CollectiveLog, Sample, bad_line, head, text_lines
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.safe_files import MAX_INT

FORMAT = "nccl-tests"
OPS = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "broadcast": "broadcast",
}
DTYPES = {
    "float": "float32",
    "half": "float16",
    "bfloat16": "bfloat16",
    "double": "float64",
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "uint32": "uint32",
    "int64": "int64",
    "uint64": "uint64",
    "char": "int8",
    "int": "int32",
    "f8e4m3": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
}
IN_PLACE = ("all_reduce", "broadcast")
_RANK = re.compile(r"#\s+Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device")
_PROGRAM = re.compile(r"# Collective test (?:starting|concluded): (\w+)_perf")
_ROW = "size count type redop root, then time algbw busbw #wrong out-of-place and in-place"


def looks_like(path: Path) -> bool:
    text = head(path)
    return "# nThread" in text and "nGpus" in text and "minBytes" in text


def _op_from_name(path: Path) -> str | None:
    return next((op for op in OPS if op in path.name or op.replace("_", "") in path.name), None)


def _row(log: CollectiveLog, per_iter: bool, i: int, line: str, ended: bool) -> tuple[str, str, Sample]:
    t = line.split()
    side = 8 if per_iter else 4
    if len(t) < 5 + 2 * side:
        raise bad_line(log.path, i, ended, "a result row", _ROW)
    try:
        size = int(t[0])
        oop, inp = float(t[5]), float(t[5 + side])
    except ValueError:
        raise bad_line(log.path, i, ended, "a result row", _ROW) from None
    for wrong in (t[8], t[8 + side]):
        if wrong != "N/A" and wrong != "0":
            raise SpecError(
                f"{log.path}:{i}: #wrong = {wrong}: nccl-tests found corrupted data at size {size}; "
                "its times are not a measurement to price with (check the fabric, rerun)"
            )
    op = log.op or ""
    us = inp if op in IN_PLACE else oop
    if not 0 < size <= MAX_INT or not 0 < us < math.inf:
        raise SpecError(
            f"{log.path}:{i}: size {str(size)[:24]} B in {us} us is not a measurement (both must be finite and > 0)"
        )
    return t[2], t[3], Sample(bytes=float(size), seconds=us * 1e-6, where=f"{log.path}:{i}")


def read(path: Path, op: str | None = None) -> CollectiveLog:
    """op: the collective the log measured (`results import --collective`), for a log that names
    none (older nccl-tests) under a file name that names none; a log that names another is refused."""
    if op is not None and op not in OPS:
        raise SpecError(f"--collective {op!r}: nccl-tests measures one of {', '.join(OPS)}")
    log = CollectiveLog(format=FORMAT, path=path, op=op or _op_from_name(path) or "")
    per_iter, footer, last, kinds, ranks = False, False, 0, set(), {}
    for i, line, ended in text_lines(path):
        last = i
        s = line.strip()
        if m := _PROGRAM.search(s):
            if m.group(1) not in OPS:
                raise SpecError(
                    f"{path}:{i}: {m.group(1)}_perf is not a collective the planner prices; "
                    f"import one of {', '.join(o + '_perf' for o in OPS)}"
                )
            if op is not None and OPS[m.group(1)] != op:
                raise SpecError(f"{path}:{i}: the log measured {m.group(1)}_perf, not --collective {op}")
            log.op = OPS[m.group(1)]
        elif m := _RANK.match(s):
            ranks[int(m.group(1))] = m.group(2)
        elif s.startswith("#") and "i_min" in s:
            per_iter = True
        elif s.startswith("# Avg bus bandwidth"):
            footer = True
        elif s[:1].isdigit():
            if footer:
                raise SpecError(
                    f"{path}:{i}: a result row after the '# Avg bus bandwidth' footer: a second run; "
                    "import one run per log"
                )
            if not log.op:
                raise SpecError(
                    f"{path}:{i}: which collective is this? the log does not say (older nccl-tests) "
                    f"and the file name names none; name it: --collective {' | '.join(OPS)}"
                )
            dtype, redop, sample = _row(log, per_iter, i, s, ended)
            kinds.add((dtype, redop))
            if any(x.bytes == sample.bytes for x in log.samples):
                raise SpecError(f"{path}:{i}: size {sample.bytes:.0f} B appears twice; import one run per log")
            log.samples.append(sample)
            log.dtype = DTYPES.get(dtype, dtype)
    if not footer:
        raise SpecError(
            f"{path}:{last}: the log ends before nccl-tests' '# Avg bus bandwidth' footer (a truncated "
            "log: the run did not finish); import a complete log"
        )
    if len(kinds) > 1:
        raise SpecError(f"{path}: several data types / reductions in one log ({sorted(kinds)}); run one -d/-o per log")
    if not log.samples:
        raise SpecError(f"{path}: no result rows between the header and the footer")
    log.ranks = len(ranks) or None
    log.hosts = tuple(dict.fromkeys(ranks.values()))
    return log

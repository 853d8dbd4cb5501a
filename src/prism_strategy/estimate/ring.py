"""The ring algorithm's counts, shared by every backend's model (NCCL, oneCCL, measured curves).

A ring all-gather or reduce-scatter over n ranks runs n - 1 dependent steps, a ring all-reduce
2(n - 1) (reduce-scatter then all-gather); each rank moves (n - 1) / n of the buffer per phase,
which is nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md): busbw = algbw x bus_factor.
"""

from __future__ import annotations


def ring_steps(op: str, n: int) -> int:
    return 2 * (n - 1) if op == "all_reduce" else n - 1


def bus_factor(op: str, n: int) -> float:
    return (2.0 if op == "all_reduce" else 1.0) * (n - 1) / n

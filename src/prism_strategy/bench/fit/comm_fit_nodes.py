"""The comm fit checked across node counts: fit on some node counts, predict the others.

Folds (bench/fit/comm_fit.py `fit` on the rest, terms re-decided each time):
- leave one node count out: every row predicted by the fit that saw no row at its node count;
- fit 2-8 nodes (and one node), predict 16;
- fit without the 8,192-node rows, predict them.
The priors a fit starts from (and holds an undecided term at) come from outside the rows: the
vendor's and ALCF's link figures, oneCCL's source (COMM_PRIORS).
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

from prism_strategy.bench.fit.comm_fit import CommPoint, errors_pct, fit
from prism_strategy.specs.cluster import PlatformSpec

COMM_PRIORS: dict[str, tuple[float, str]] = {
    "collective_overhead_us": (50.0, "assumption: a oneCCL call's submission and completion on the host, tens of us"),
    "scaleout_overhead_us": (50.0, "assumption: a scale-out schedule's entries and staging copies, tens of us"),
    "intra_latency_us": (
        10.0,
        "assumption: one oneCCL schedule step inside a node (~2-3 us hardware) polled by one worker",
    ),
    "inter_latency_us": (30.0, "assumption: one OFI/CXI message over Slingshot (~2-3 us) through the host schedule"),
    "intra_bw_gbps": (15.0, "ALCF node-performance overview (2026-01-12): GPU to GPU 15 GB/s per pair, one way"),
    "mdfi_bw_gbps": (185.0, "ALCF node-performance overview: tile to tile on one GPU 185 GB/s one way"),
    "scaleout_rank_bw_gbps": (6.3, "argonne-lcf/straggler_detection_and_scaling: MPI host buffers, 6.3 GB/s per rank"),
    "host_copy_node_gbps": (318.0, "ALCF node-performance overview: PCIe host-to-device 318 GB/s per node"),
    "host_copy_gbps": (54.0, "ALCF node-performance overview: PCIe host-to-device 54 GB/s per tile"),
    "intra_ring_bw_gbps": (6.3, "assumption: a flat host ring's rank moves at its host-buffer injection (as above)"),
}
"""Where the collective fit starts, each with a source that is not one of the fitted rows. The
node's host-ring limit (host_ring_node_gbps, fitted to the 12-rank training record A1) is off here:
no collective row has more than 4 ranks per node on the flat ring."""


def prior_platform(p: PlatformSpec) -> PlatformSpec:
    return p.with_values(
        **{k: v for k, (v, _) in COMM_PRIORS.items()}, allreduce_algorithm="topology", host_ring_node_gbps=0.0
    )


Fold = tuple[str, list[int], list[int]]
"""(name, the points fitted, the points predicted)."""


def node_folds(pts: list[CommPoint]) -> list[Fold]:
    counts = sorted({x.nodes for x in pts})
    out: list[Fold] = []
    for n in counts:
        out.append((f"without {n} node(s)", [i for i, x in enumerate(pts) if x.nodes != n], _at(pts, n)))
    if 16 in counts:
        out.append(("fit 1-8 nodes, predict 16", [i for i, x in enumerate(pts) if x.nodes <= 8], _at(pts, 16)))
    if 8192 in counts:
        out.append(
            ("fit without 8,192 nodes, predict them", [i for i, x in enumerate(pts) if x.nodes < 8192], _at(pts, 8192))
        )
    return out


def _at(pts: list[CommPoint], n: int) -> list[int]:
    return [i for i, x in enumerate(pts) if x.nodes == n]


def fold_errors(
    start: PlatformSpec, pts: list[CommPoint], bounds: Callable[[str], tuple[float, float]]
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """({point curve: its error when its node count was left out}, per fold: the median |error|)."""
    per_row: dict[str, float] = {}
    folds = []
    for name, train, test in node_folds(pts):
        if not train or not test:
            continue
        fitted, _, _ = fit(start, [pts[i] for i in train], bounds)
        errs = errors_pct(fitted, [pts[i] for i in test])
        if name.startswith("without"):
            per_row |= {pts[i].curve: e for i, e in zip(test, errs)}
        folds.append(
            {
                "fold": name,
                "fitted_points": len(train),
                "predicted": [pts[i].curve for i in test],
                "errors_pct": errs,
                "median_abs_err_pct": statistics.median(abs(e) for e in errs),
            }
        )
    return per_row, folds

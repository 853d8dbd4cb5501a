"""torch.compile's remaining memory factor (issue 17 item 7): what is left once the partitioner's terms
(estimate/memory_compile.py) are in. The compiled blocks' activations x k is fitted on compiled / eager
ratios of the same scenario, which do not depend on what the pair shares (PRISM D's unrecorded
sequence length, the allocator model) as long as the eager model's error scales every item alike:
TT-02/TT-01 and TT-22/TT-20 (torchtitan, reserved), D2/D1 (PRISM, allocated). Prints each pair's own
k, least-squares fits with leave-one-out errors, D's other reading (the bytes compile saved, which
holds if D1's +84% sits in items compile does not touch), and the compiled records with no eager
pair (D3, TT-21, TT-23, TT-24, E1) as checks. Run: PYTHONPATH=src python benchmarks/compile_memory_fit.py
"""

from __future__ import annotations

from prism_strategy.bench.fit.published import load_published
from prism_strategy.estimate import memory_compile
from prism_strategy.estimate.memory_runtime import runtime_memory
from prism_strategy.flags import scenario_from_flags
from prism_strategy.planning.planner import evaluate
from prism_strategy.specs.cluster import GiB
from prism_strategy.strategies import get_strategy

RECORDS = {r.id: r for name in ("aurora-prism", "cuda-published") for r in load_published(name)}
PAIRS = [("TT-01", "TT-02", "reserved"), ("TT-20", "TT-22", "reserved"), ("D1", "D2", "allocated")]
CHECKS = [("D3", "allocated"), ("TT-21", "reserved"), ("TT-23", "reserved"), ("TT-24", "ran"), ("E1", "allocated")]
GRID = [0.5 + i / 1000 for i in range(701)]
_CACHE: dict[tuple[str, str, float], tuple[float, str]] = {}


def _evaluate(rid: str, counter: str, k: float) -> tuple[float, str]:
    if (rid, counter, k) not in _CACHE:
        memory_compile.REMAINING_FACTOR = k
        r = RECORDS[rid]
        sc = scenario_from_flags(**r.scenario_kwargs())
        strategy = get_strategy(r.planner_strategy).with_options(reduce_dtype=r.scenario.reduce_dtype)
        mem = evaluate(sc, strategy).memory
        rt = runtime_memory(mem, sc.platform)
        _CACHE[rid, counter, k] = (rt.reserved if counter == "reserved" else rt.allocated), mem.moment
        memory_compile.REMAINING_FACTOR = 1.0
    return _CACHE[rid, counter, k]


def predicted(rid: str, counter: str, k: float) -> float:
    """Linear in k between k = 0.5 and 1 (the activations scale, the rest stays) while the peak
    moment is the same at both ends; evaluated directly otherwise."""
    (lo, m_lo), (hi, m_hi) = _evaluate(rid, counter, 0.5), _evaluate(rid, counter, 1.0)
    return lo + (k - 0.5) * (hi - lo) / 0.5 if m_lo == m_hi else _evaluate(rid, counter, k)[0]


def measured(rid: str, counter: str) -> float:
    r = RECORDS[rid]
    if counter == "reserved":
        return r.peak_bytes("reserved")
    m = r.measured
    return (m.peak_gb if m.peak_gb is not None else m.peak_allocated_gb) * r.memory_unit_bytes


def ratio_error(pair: tuple[str, str, str], k: float) -> float:
    eager, compiled, counter = pair
    want = measured(compiled, counter) / measured(eager, counter)
    return predicted(compiled, counter, k) / predicted(eager, counter, 1.0) / want - 1


def fit(pairs: list[tuple[str, str, str]]) -> float:
    return min(GRID, key=lambda k: sum(ratio_error(p, k) ** 2 for p in pairs))


def main() -> None:
    print("pair           counter    measured  predicted(k=1)  k alone")
    for p in PAIRS:
        e, c, counter = p
        want = measured(c, counter) / measured(e, counter)
        got = predicted(c, counter, 1.0) / predicted(e, counter, 1.0)
        print(f"{c}/{e:6s}     {counter:9s}  {want:8.3f}  {got:14.3f}  {fit([p]):7.3f}")
    k_all, k_tt = fit(PAIRS), fit(PAIRS[:2])
    for name, pairs, k in (("torchtitan pairs", PAIRS[:2], k_tt), ("all three pairs", PAIRS, k_all)):
        fitted = ", ".join(f"{100 * ratio_error(p, k):+.1f}%" for p in pairs)
        print(f"fit over {name}: k = {k:.3f}; fitted ratio errors {fitted}")
        for i, p in enumerate(pairs):
            ko = fit(pairs[:i] + pairs[i + 1 :])
            e, c, counter = p
            held = measured(e, counter) * predicted(c, counter, ko) / predicted(e, counter, 1.0)
            print(
                f"  leave out {c}/{e}: k = {ko:.3f}, ratio error {100 * ratio_error(p, ko):+.1f}%; "
                f"{c} from {e}'s figure {held / GiB:.1f} vs {measured(c, counter) / GiB:.1f} GiB"
            )
    saved = measured("D1", "allocated") - measured("D2", "allocated")
    pred_saved = predicted("D1", "allocated", 1.0) - predicted("D2", "allocated", 1.0)
    k_bytes = min(GRID, key=lambda k: abs(predicted("D1", "allocated", 1.0) - predicted("D2", "allocated", k) - saved))
    print(
        f"D1 -> D2 bytes saved: measured {saved / GiB:.1f} GiB, predicted {pred_saved / GiB:.1f} (k=1); "
        f"k for the bytes reading {k_bytes:.3f}"
    )
    # Not shipped as a record: PR #165's eager FSDP2 full-checkpointing row, the pair of TT-21, from the
    # PR's description (pytorch/torchtitan 83c879f18): "FSDP2 (AC): ... 32.64% peak reserved" of 95.04 GiB.
    ac_eager = 0.3264 * 95.04 * GiB
    memory_compile.REMAINING_FACTOR = 1.0
    r = RECORDS["TT-21"]
    sc = scenario_from_flags(**(r.scenario_kwargs() | {"compile": False}))
    eager_pred = runtime_memory(evaluate(sc, get_strategy(r.planner_strategy)).memory, sc.platform).reserved
    tt21 = predicted("TT-21", "reserved", 1.0) / eager_pred
    print(
        f"TT-21 / PR #165's eager FSDP2 full checkpointing (31.02 GiB reserved, not shipped): measured "
        f"{measured('TT-21', 'reserved') / ac_eager:.3f},"
    )
    print(
        f"  predicted {tt21:.3f}; the eager row itself predicted {eager_pred / GiB:.1f} GiB "
        f"({100 * (eager_pred / ac_eager - 1):+.1f}%)"
    )
    print("in the code: REMAINING_FACTOR = 1.0 (estimate/memory_compile.py)")
    for rid, counter in CHECKS:
        for k in (1.0, k_all):
            got = predicted(rid, "allocated" if counter == "ran" else counter, k)
            if counter == "ran":
                print(f"check {rid} (ran) k={k:.3f}: {got / GiB:.1f} GiB allocated")
            else:
                want = measured(rid, counter)
                print(
                    f"check {rid} ({counter}) k={k:.3f}: {got / GiB:.1f} vs {want / GiB:.1f} GiB "
                    f"({100 * (got / want - 1):+.1f}%)"
                )
    memory_compile.REMAINING_FACTOR = 1.0


if __name__ == "__main__":
    main()

"""CUDA allocator cache factor (issue 17 item 5): fit (reserved - active) = factor x predicted transient
(activations and buffers, estimate/memory_runtime.transient_bytes) on the records with both counters,
torchtitan PR #165 TT-18 (FSDP1) and TT-20 (FSDP2), and its leave-one-out errors on reserved.
Using the measured active figure isolates the allocator from the allocated model's own error.
Run: PYTHONPATH=src python benchmarks/cuda_allocator_fit.py
"""
from prism_strategy.bench.fit.published import load_published
from prism_strategy.estimate.memory_runtime import runtime_memory, transient_bytes
from prism_strategy.planning.planner import evaluate
from prism_strategy.planning.scenario import build_scenario
from prism_strategy.strategies import get_strategy
from prism_strategy.specs.cluster import GiB
pts = []
for r in load_published("cuda-published"):
    if r.id not in ("TT-18", "TT-20"):
        continue
    kw = dict(r.scenario_kwargs())
    sc = build_scenario(**kw)
    mem = evaluate(sc, get_strategy(r.planner_strategy)).memory
    act, res = r.peak_bytes("active"), r.peak_bytes("reserved")
    t = transient_bytes(mem)
    pts.append((r.id, act, res, t))
    print(r.id, "pred alloc GiB", round(runtime_memory(mem, sc.platform).allocated / GiB, 2), "active", round(act / GiB, 2),
          "reserved", round(res / GiB, 2), "transient", round(t / GiB, 2), "gap/transient", round((res - act) / t, 3))
f = sum(t * (m - a) for _, a, m, t in pts) / sum(t * t for *_, t in pts)
print("fit", round(f, 3))
for i, (rid, a, m, t) in enumerate(pts):
    o = [p for j, p in enumerate(pts) if j != i]
    fo = sum(tt * (mm - aa) for _, aa, mm, tt in o) / sum(tt * tt for *_, tt in o)
    print("LOO", rid, "factor", round(fo, 3), "reserved err %", round(100 * ((a + fo * t) - m) / m, 1))

"""One rank of the traced-vs-real check: `python traced_worker.py OUT_DIR CASES_JSON`.

For each case it builds the model the trace builds (traced/model.py, real tensors this
time), wraps it with the real `wrap()` on the real gloo process group, runs two warm-up steps
(optimizer state; DDP rebuilds its buckets in the second forward) and two profiled steps, and
measures the peak of the last one with the CPU allocator itself, not with the trackers the
trace uses: the profiler's memory events are every allocation and free the allocator makes
on this thread, and the running total starts from the bytes of every live tensor storage.
Writes OUT_DIR/rank{r}.json: {case name: {peak_bytes, live_before_step, allocations}}.
"""

from __future__ import annotations

import gc
import json
import sys
import warnings
from pathlib import Path

import torch
from torch._C._profiler import _EventType
from torch.profiler import ProfilerActivity, profile, record_function

from prism_strategy.runtime.dist import init_distributed
from prism_strategy.runtime.wrap import wrap
from prism_strategy.specs.model import MultimodalSpec, TransformerSpec
from prism_strategy.specs.training import TrainingSpec
from prism_strategy.traced.model import build_from_spec
from prism_strategy.traced.run import mixed_precision_for, optimizer_factory

STEP = "prism_step"
PROFILED_STEPS = 2


def _walk(nodes):
    for n in nodes:
        yield n
        yield from _walk(n.children)


def _step(job, built, micro_batch: int, *, zero_at_end: bool = True) -> None:
    """One training step as a script using wrap()'s Job runs it."""
    job.zero_grad()
    batch = built.make_batch(micro_batch)
    loss = built.loss(job.model, batch)
    job.backward(loss)
    del loss, batch
    job.step()
    if zero_at_end:
        job.zero_grad()


def live_tensor_bytes() -> int:
    """Bytes of every distinct CPU storage a live Python tensor holds (params and shards, grads,
    optimizer state, buffers)."""
    seen: dict[int, int] = {}
    for obj in gc.get_objects():
        if type(obj) in (torch.Tensor, torch.nn.Parameter):
            st = obj.untyped_storage()
            if st.nbytes() and st.device.type == "cpu":
                seen[st.data_ptr()] = max(seen.get(st.data_ptr(), 0), st.nbytes())
    return sum(seen.values())


def step_peak(prof, before: int) -> tuple[int, int]:
    """Peak live bytes during the last profiled step, as a running total from `before`:
    allocations add, frees subtract. A block freed on a thread the profiler does not follow
    (gloo's) has no free event; it is dropped when its address is handed out again (the step
    before the last lets that happen), so the total can only overcount, never miss a byte.
    Returns (peak bytes, allocation events)."""
    events = list(_walk(prof.profiler.kineto_results.experimental_event_tree()))
    last = max((n for n in events if n.name == STEP), key=lambda n: n.start_time_ns)
    allocs = sorted((n for n in events if n.tag == _EventType.Allocation), key=lambda n: n.start_time_ns)
    live: dict[int, int] = {}
    total, peak = before, 0
    for n in allocs:
        f = n.extra_fields
        if f.alloc_size > 0:
            total += f.alloc_size - live.pop(f.ptr, 0)
            live[f.ptr] = f.alloc_size
        else:
            live.pop(f.ptr, None)
            total += f.alloc_size
        if n.start_time_ns >= last.start_time_ns:
            peak = max(peak, total)
    return peak, len(allocs)


def measure(ctx, spec: MultimodalSpec, training: TrainingSpec, strategy: str, micro_batch: int) -> dict:
    """Allocator peak of one steady-state training step on this rank (bytes)."""
    torch.manual_seed(0)
    built = build_from_spec(spec, training)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        job = wrap(
            built.module,
            strategy,
            ctx=ctx,
            optimizer=optimizer_factory(training),
            block_types=built.block_types,
            mixed_precision=mixed_precision_for(training),
            ckpt_freq=training.ckpt_freq,
        )
    _step(job, built, micro_batch)
    # Keep the last warm-up step's grads until the profiled step's own zero_grad: DDP's grads are
    # views of its buckets (held in C++), which live_tensor_bytes() then sees; setting the grads
    # to None frees nothing while DDP holds the buckets. FSDP's sharded grads are freed there.
    _step(job, built, micro_batch, zero_at_end=False)
    if strategy != "ddp":
        job.zero_grad()
    gc.collect()
    before = live_tensor_bytes()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for _ in range(PROFILED_STEPS):
            with record_function(STEP):
                _step(job, built, micro_batch)
    peak, events = step_peak(prof, before)
    del job, built
    gc.collect()
    gc.freeze()  # what survived, out of the next case's collections (bench/launch/worker.py collect_garbage)
    return {"peak_bytes": peak, "live_before_step": before, "allocations": events}


def case_specs(case: dict) -> tuple[MultimodalSpec, TrainingSpec]:
    vision = TransformerSpec(**case["vision"]) if case.get("vision") else None
    spec = MultimodalSpec(backbone=TransformerSpec(**case["model"]), vision=vision, mode=case.get("mode", "e2e"))
    training = TrainingSpec.from_precision(case["precision"], seq_len=case["seq_len"], ckpt_freq=case["ckpt_freq"])
    return spec, training


def main() -> None:
    out, cases = Path(sys.argv[1]), json.loads(sys.argv[2])
    torch.set_num_threads(1)
    ctx = init_distributed(ranks_per_node=2)
    results = {}
    for case in cases:
        spec, training = case_specs(case)
        results[case["name"]] = measure(ctx, spec, training, case["strategy"], case["micro_batch"])
    (out / f"rank{ctx.rank}.json").write_text(json.dumps({"rank": ctx.rank, "results": results}))
    ctx.destroy()


if __name__ == "__main__":
    main()

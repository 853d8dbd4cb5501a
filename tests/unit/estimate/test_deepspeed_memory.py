"""ZeRO-3's memory on a small model (issue 25 item 8), by hand from DeepSpeed 0.19's source, and the
bench's measurement seeing what DeepSpeed allocates before the measured step.

On 4 CPU ranks (tiny Llama, micro-batch 4, seq 128) the measured peak was 9-24% under the
prediction because torch's MemTracker sees only tensors made inside it or handed to it, and
DeepSpeed's ZeRO optimizer is no torch.optim.Optimizer: its ipg buffer showed up only once a
gradient became a view into it, after the loss's buffers were gone, and its fp32 partitions never.
With them handed over (bench/launch/worker.optimizer_state) the same launch measured 33.87 MiB
(fp32) and 31.46 MiB (bf16-mixed) against 33.85 and 31.45 predicted, and small Llama's drop from 2
to 4 ranks (benchmarks/shard_memory_drop.py) 23.84 MiB against 23.84; the distributed check is
tests/distributed/test_census_memory.py (measured in the same run).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch.distributed._tools.mem_tracker import MemTracker

from prism_strategy.bench.launch.worker import optimizer_state
from prism_strategy.engines.deepspeed import bucket_elements
from prism_strategy.estimate.memory import moments
from prism_strategy.specs import Layout, MultimodalSpec, TrainingSpec
from prism_strategy.specs.parts import model_parts
from prism_strategy.specs.presets import load_model, load_platform
from prism_strategy.strategies import get_strategy

LAY4 = Layout(nodes=2, ranks_per_node=2)
TINY_PARAMS = 2 * 512 * 64 + 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128 + 2 * 64) + 64
"""tiny-llama by hand: embeddings and LM head 512 x 64; per layer q, k/v (2 kv heads x 16), o,
gate/up/down (FFN 128), two norms; the final norm. Every tensor has <= 1e5 elements."""


def _start_of_backward(precision: str):
    t = TrainingSpec.from_precision(precision, seq_len=128, micro_batch=4)
    parts = model_parts(MultimodalSpec(backbone=load_model("tiny-llama")), t)
    ms = {m.name: m for m in moments(parts, t, load_platform("cpu"), LAY4, get_strategy("zero3"))}
    return ms["start of backward"], t


def test_zero3_on_a_small_model_holds_every_param_whole_and_its_buffers_from_init():
    for precision in ("fp32", "bf16-mixed"):
        m, t = _start_of_backward(precision)
        rows = {label: b for _, label, b in m.fixed}
        e = t.compute_bytes

        def row(prefix: str) -> float:
            return next(b for label, b in rows.items() if label.startswith(prefix))

        assert row("params (") == e * TINY_PARAMS / 4  # the rank's partition
        # Adam's two moments and the fp32 master, a copy even in fp32 (stage3.py _create_fp32_partitions)
        assert row("adamw state") == 3 * 4 * TINY_PARAMS / 4
        # parameter_offload.py mark_persistent_parameters: every param of <= 1e5 elements stays gathered
        assert row("persistent params held gathered") == e * TINY_PARAMS
        # stage3.py __init__: grad_partitions_flat_buffer, gradient_accumulation_dtype = the model dtype
        assert row("grad partition flat buffer") == e * TINY_PARAMS / 4
        # stage3.py __init__: torch.empty(reduce_bucket_size) whatever the model size (25 MiB default)
        assert row("ipg reduce bucket") == bucket_elements(get_strategy("zero3"), t) * e == 25 * 2**20
        # nothing is gathered per module, so L is one module's unsharded grads: the embedding's
        assert row("largest module gathered") == e * 512 * 64
        assert row("prefetch bucket") == 0


def test_zero3_prefetches_beyond_the_module_in_use():
    """small Llama: embeddings and LM head (4096 x 256) and the MLP matrices (256 x 688) exceed 1e5
    elements and are gathered per module; L is the largest module gathered with its grads, and the
    prefetch bucket holds the rest of what is gathered (under the 25 MiB bucket), not L again."""
    t = TrainingSpec.from_precision("fp32", seq_len=128, micro_batch=4)
    parts = model_parts(MultimodalSpec(backbone=load_model("small-llama")), t)
    ms = {m.name: m for m in moments(parts, t, load_platform("cpu"), LAY4, get_strategy("zero3"))}
    rows = {label: b for _, label, b in ms["start of backward"].fixed}
    big = 4096 * 256
    gathered = 2 * big + 4 * 3 * 256 * 688  # both vocab matrices, every layer's gate, up and down
    assert next(b for k, b in rows.items() if k.startswith("largest module")) == 4 * (big + big)
    assert next(b for k, b in rows.items() if k.startswith("prefetch bucket")) == 4 * (gathered - big)


def test_the_bench_hands_an_engines_optimizer_state_to_memtracker():
    """An optimizer wrapper shaped as DeepSpeed's (an inner torch optimizer, flat partitions in a
    list, a buffer made at init, buckets holding a `buffer`): every tensor made before the tracked
    step is counted, the wrapper's inner torch optimizer's states with them."""
    w = torch.nn.Linear(8, 8)
    inner = torch.optim.AdamW(w.parameters())
    w(torch.ones(2, 8)).sum().backward()
    inner.step()
    wrapper = SimpleNamespace(
        optimizer=inner,
        fp32_partitioned_groups_flat=[torch.zeros(1000)],
        grad_partitions_flat_buffer=torch.zeros(2000),
        ipg_buckets={torch.float32: SimpleNamespace(buffer=torch.empty(3000))},
        reduce_bucket_size=3000,
    )
    got = optimizer_state(wrapper)
    assert inner in got and sum(x.numel() for x in got if isinstance(x, torch.Tensor)) == 6000

    def peak(*external) -> float:
        mt = MemTracker()
        mt.track_external(w, *external)
        with mt:
            torch.ones(10)
        return sum(d["Total"] for d in mt.get_tracker_snapshot("peak").values())

    adam = 2 * 4 * (64 + 8)  # exp_avg and exp_avg_sq of the 8x8 weight and its bias
    assert peak(*got) - peak() >= 4 * 6000 + adam
    assert optimizer_state(inner) == [inner]

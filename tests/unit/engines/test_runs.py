"""engines/runs.py: Runs reads as the tuple it encodes, and a deep stack's per-block collectives
are carried as a handful of runs (issue 26, finding 12: the plan's cost flat in depth)."""

from __future__ import annotations

import json
import random

import pytest

import prism_strategy.engines.base as base
import prism_strategy.engines.ddp as ddp
import prism_strategy.engines.deepspeed as ds
import prism_strategy.engines.fsdp2 as fsdp2
from prism_strategy.engines import step_collectives
from prism_strategy.engines.runs import Runs
from prism_strategy.flags import scenario_from_flags
from prism_strategy.specs.parts import model_parts
from prism_strategy.strategies import get_strategy


def test_runs_read_as_the_tuple_they_encode():
    rng = random.Random(1)
    for _ in range(300):
        values = [rng.choice([0.0, 1.0, 2.5, 7]) for _ in range(rng.randint(0, 40))]
        r = Runs(values)
        assert list(r) == values and list(reversed(r)) == values[::-1] and len(r) == len(values)
        assert [r[i] for i in range(-len(values), len(values))] == values + values
        assert r[1:5] == tuple(values[1:5]) and sum(r) == sum(values) and bool(r) == bool(values)
        assert all(a != b for (a, _), (b, _) in zip(r.runs, r.runs[1:]))  # neighbours differ: canonical
        split = Runs.of_runs([(x, 1) for x in values] + [(3.0, 0)])  # one run per value, an empty one
        assert split == r and hash(split) == hash(r)
        assert r.map(lambda x: 2 * x) == Runs(2 * x for x in values)
    with pytest.raises(IndexError):
        Runs([1.0, 1.0])[2]
    assert Runs([1.0]) != Runs([1.0, 1.0]) and Runs([1.0]) != (1.0,)


def test_a_deep_stack_s_per_block_calls_are_a_few_runs(tmp_path):
    config = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4}
    (tmp_path / "config.json").write_text(json.dumps(config | {"num_hidden_layers": 20_000, "vocab_size": 256}))
    sc = scenario_from_flags(model=str(tmp_path), platform="dgx-h100", nodes=2, seq_len=64)
    parts = model_parts(sc.model, sc.training)
    cs = step_collectives(get_strategy("fsdp_full_shard"), parts, sc.training, sc.layout, 1)
    gather = next(c for c in cs if c.op == "all_gather" and c.phase == "forward")
    assert len(gather.sizes) == 20_001 == gather.calls  # the root unit, then every block
    assert len(gather.sizes.runs) == 2 and gather.sizes.runs[1][1] == 20_000


def _deep_parts(tmp_path, layers, hidden):
    config = {"model_type": "llama", "hidden_size": hidden, "intermediate_size": 2 * hidden, "num_attention_heads": 4}
    (tmp_path / "config.json").write_text(json.dumps(config | {"num_hidden_layers": layers, "vocab_size": 256}))
    sc = scenario_from_flags(model=str(tmp_path), platform="dgx-h100", nodes=2, seq_len=64)
    return model_parts(sc.model, sc.training)


def test_zero3_sizes_by_groups_equal_the_module_by_module_walk(tmp_path):
    """DeepSpeed's gathers, ipg buckets and padded sizes counted per group of identical blocks,
    against the per-module / per-tensor walks they replace, on a stack whose reuse distance is
    crossed inside the group of blocks and whose buckets close inside it."""
    parts = _deep_parts(tmp_path, 400, 512)
    modules = [(p, m) for p in parts for m in base.part_modules(p).forward_order()]  # every block spelled out
    grads = [n for p, m in reversed(modules) if p.trains for n, _ in reversed(m)]

    def ipg(bucket):
        calls, filled = 0, 0
        for x in grads:
            if filled + x > bucket and filled > 0:
                calls, filled = calls + 1, 0
            filled += x
        return calls + (1 if filled else 0)

    for bucket in (10**5, 3 * 10**6 + 7, 5 * 10**8, 10**12):
        assert ds._ipg_buckets(ds._grad_order(parts), bucket) == ipg(bucket)
    after, released = 0, []
    for p, m in reversed(modules):
        gathered = sum(n for n, _ in m if not ds.is_persistent(n))
        if gathered and p.backward and 2 * after >= ds.MAX_REUSE_DISTANCE:
            released.append(gathered)
        after += sum(n for n, _ in m)
    gathered_modules = sum(1 for _, m in modules if any(not ds.is_persistent(n) for n, _ in m))
    assert 0 < len(released) < gathered_modules - 100  # crossed inside the group of 400 blocks
    bucket = 5 * 10**7
    fwd = sum(n for _, m in modules for n, _ in m if not ds.is_persistent(n))
    assert ds._zero3_gathers(parts, bucket, 2) == (
        (2 * fwd, 2 * min(gathered_modules, -(-fwd // bucket))),
        (2 * sum(released), 2 * min(len(released), -(-sum(released) // bucket))),
    )
    padded, small, small_count = ds._zero3_sizes(parts, 16)
    assert padded == sum(-(-x // 16) * 16 for x in grads)
    tiny = [-(-n // 16) * 16 for _, m in modules for n, _ in m if ds.is_persistent(n)]
    assert (small, small_count) == (sum(tiny), len(tiny))


def _reducer_fill(tensor_bytes, first_cap, cap):
    """torch's Reducer, tensor by tensor in reverse parameter order: a bucket closes at >= its cap."""
    out, size, limit = [], 0.0, first_cap
    for b in reversed(tensor_bytes):
        size += b
        if size >= limit:
            out.append(size)
            size, limit = 0.0, cap
    return out + ([size] if size > 0 else [])


def test_ddp_buckets_filled_by_groups_equal_the_tensor_by_tensor_fill(tmp_path):
    """ddp.filled_buckets skips the copies that stay under the cap: the same buckets as the Reducer's
    tensor-by-tensor walk, whole or fractional caps."""
    rng = random.Random(2)
    for _ in range(300):
        groups = [(tuple(rng.choice([0, 3, 64, 1000, 4096]) for _ in range(rng.randint(1, 4))), rng.randint(1, 40))]
        groups += [(tuple(rng.choice([1, 512]) for _ in range(rng.randint(1, 3))), rng.randint(1, 9))]
        first, cap = rng.choice([1, 700.5, 5000]), rng.choice([1000, 2500.25, 60_000])
        flat = [b for tensors, k in groups for _ in range(k) for b in tensors]
        assert ddp.filled_buckets(groups, first, cap) == _reducer_fill(flat[::-1], first, cap)
    parts = _deep_parts(tmp_path, 300, 128)
    grads = [n * 4 for p in parts if p.trains for m in base.part_modules(p).forward_order() for n, _ in m]
    for first, cap in ((2**20, 25 * 2**20), (3 * 2**20, 3 * 2**20)):
        total, buckets = ddp._buckets(parts, 4, first, cap)
        assert (total, list(buckets)) == (float(sum(grads)), _reducer_fill(grads, first, cap))
        assert len(buckets) > 3
    assert ddp._trainable_totals(parts) == (sum(grads) // 4, max(grads) // 4, len(grads))


def test_zero3_buffers_count_every_part_s_own_modules():
    """_zero3_buffer_sizes per part and group, against every module of every part read directly
    (all kept alive). Its per-module memo keyed by id() summed a freed part's modules for the next
    part's new lists (ids are reused after a free): a SigLIP2 + Qwen3 model counted 350 small
    persistent tensors, not its 238."""
    sc = scenario_from_flags(
        model="qwen3-0.6b", vision="siglip2-base-patch16-224", mode="projector", platform="dgx-a100-40"
    )
    parts = model_parts(sc.model, sc.training)
    modules = [m for pm in [base.part_modules(p) for p in parts] for m in pm.forward_order()]
    small = [n for m in modules for n, _ in m if ds.is_persistent(n)]
    z = ds._zero3_buffer_sizes(parts)
    assert (z.persistent, z.persistent_count) == (sum(small), len(small)) == (z.persistent, 238)
    assert z.gathered == sum(n for m in modules for n, _ in m) - sum(small)


def _regathered_one_by_one(units):
    """FSDP2's re-gathered blocks, unit by unit (the walk fsdp2.regathered does per run)."""
    blocks = [u for u in units if u.block]
    if not blocks:
        return []
    flowing = [i for i, u in enumerate(blocks[:-1]) if u.backward]
    first = next((i for i, u in enumerate(blocks) if u.backward), None)
    if first is not None and first > 0 and first - 1 not in flowing:
        flowing = [first - 1] + flowing
    return [blocks[i] for i in flowing]


def test_fsdp2_regathered_runs_equal_the_unit_by_unit_walk():
    rng = random.Random(3)
    kinds = [fsdp2.Unit(n, n * t, b, True) for n in (5, 9) for t in (0, 1) for b in (False, True)]
    for _ in range(500):
        runs = [(rng.choice(kinds), rng.randint(1, 4)) for _ in range(rng.randint(0, 6))]
        runs.append((fsdp2.Unit(3, 3, rng.random() < 0.5, False), 1))  # the root
        units = [u for u, k in runs for _ in range(k)]
        assert [u for u, k in fsdp2.regathered(runs) for _ in range(k)] == _regathered_one_by_one(units)

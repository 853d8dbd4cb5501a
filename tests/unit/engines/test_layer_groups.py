"""Issue 26, what is left, item 3: identical layers are counted once and multiplied (engines'
PartModules.block_groups and per-part caches, estimate/overlap.py's runs of equal calls), with
results equal to the layer-by-layer way: every block its own module lists (deep copies, so no
per-block size is shared or reused), each computed on its own. Compared exactly for the engines'
collectives and to float rounding for the step time and memory (sums taken in another order)."""

from __future__ import annotations

import copy
import dataclasses
import random
from pathlib import Path

import pytest

import prism_strategy.engines.base as base
import prism_strategy.engines.ddp as ddp
import prism_strategy.engines.deepspeed as ds
import prism_strategy.engines.fsdp2 as fsdp2
import prism_strategy.estimate.comm as comm
from prism_strategy.engines import step_collectives
from prism_strategy.estimate.option import estimate_option
from prism_strategy.estimate.overlap import _runs, _slots
from prism_strategy.flags import scenario_from_flags
from prism_strategy.specs.parts import model_parts
from prism_strategy.strategies import STRATEGY_NAMES, get_strategy

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "census"
CACHED = (
    ddp._buckets,
    ddp._trainable_totals,
    fsdp2._local_totals,
    ds._grad_order,
    ds._zero3_sizes,
    ds._ipg_buckets,
    ds._module_gathers,
    fsdp2._local_shards,
    comm._cached_collectives,
)
SCENARIOS = {
    "llama": dict(model="tiny-llama", platform="dgx-h100", nodes=2, seq_len=64),
    "moe": dict(model=str(FIXTURES / "tiny-qwen2-moe.toml"), platform="cpu", nodes=2, ranks_per_node=2, seq_len=32),
    "projector": dict(
        model="tiny-llama",
        vision=str(FIXTURES / "tiny-siglip.toml"),
        mode="encoder-projector",
        platform="dgx-h100",
        nodes=1,
        seq_len=32,
    ),
}


def _clear():
    for f in CACHED:
        f.cache_clear()


def _layer_by_layer(original):
    def part_modules(part):
        pm = original(part)
        blocks = [copy.deepcopy(b) for b in pm.blocks]  # every block its own lists: nothing shared
        return dataclasses.replace(pm, block_groups=tuple((b, 1) for b in blocks))

    return part_modules


def _both_ways(monkeypatch, compute):
    _clear()
    grouped = compute()
    patched = _layer_by_layer(base.part_modules)
    for module in (base, ds, fsdp2):  # where engines look part_modules up (ddp goes through base)
        monkeypatch.setattr(module, "part_modules", patched)
    _clear()
    try:
        return grouped, compute()
    finally:
        monkeypatch.undo()
        _clear()


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_grouped_collectives_equal_the_layer_by_layer_ones(monkeypatch, name):
    sc = scenario_from_flags(**SCENARIOS[name])

    def every_strategy():
        parts = model_parts(sc.model, sc.training)
        return [step_collectives(get_strategy(s), parts, sc.training, sc.layout, 2) for s in STRATEGY_NAMES]

    grouped, reference = _both_ways(monkeypatch, every_strategy)
    assert any(len(c.sizes) > 2 for cs in grouped for c in cs)  # per-block calls were listed
    assert grouped == reference


@pytest.mark.parametrize("name", ["llama", "moe"])
def test_grouped_step_time_and_memory_equal_the_layer_by_layer_ones(monkeypatch, name):
    sc = scenario_from_flags(**SCENARIOS[name])

    def estimates():
        return [estimate_option(sc, get_strategy(s)) for s in STRATEGY_NAMES]

    grouped, reference = _both_ways(monkeypatch, estimates)
    for g, r in zip(grouped, reference):
        assert g.batch == r.batch
        assert g.step.step_time_s == pytest.approx(r.step.step_time_s, rel=1e-12)
        assert g.step.exposed_comm_s == pytest.approx(r.step.exposed_comm_s, rel=1e-12, abs=1e-15)
        assert g.device_peak_bytes == pytest.approx(r.device_peak_bytes, rel=1e-12)


def test_runs_of_calls_fill_the_slots_as_calls_one_by_one_do():
    """overlap.phase_of's slot filling by runs of equal calls, against placing each call on its
    own (the layer-by-layer loop it replaces), on random schedules with clamping at both ends."""
    rng = random.Random(0)
    for _ in range(500):
        n0, q, start = rng.randint(1, 60), rng.randint(1, 8), rng.randint(-12, 70)
        calls = [rng.choice([1.0, 2.5, 2.5, 7.0]) for _ in range(rng.randint(1, 50))]
        one_by_one = [0.0] * (-(-n0 // q))
        for i, x in enumerate(calls):
            one_by_one[min(n0 - 1, max(0, start + i)) // q] += x
        by_runs = [0.0] * len(one_by_one)
        for i, x, count in _runs(calls):
            for k, m in _slots(start + i, count, n0, q):
                by_runs[k] += x * m
        assert by_runs == pytest.approx(one_by_one, rel=1e-12)

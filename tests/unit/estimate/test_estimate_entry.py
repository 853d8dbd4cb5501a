"""estimate/entry.py: the planner's questions beside estimate_option answer with the figures
estimate_option itself judges by."""

from __future__ import annotations

import pytest

from prism_strategy.estimate.entry import (
    BatchAt,
    device_peak_at,
    estimate_option,
    gathered_model_bytes,
    memory_at,
    model_state_bytes,
)
from prism_strategy.flags import scenario_from_flags
from prism_strategy.specs.cluster import Layout
from prism_strategy.strategies import get_strategy


@pytest.mark.parametrize("name", ["ddp", "zero3", "hsdp_full_shard"])
@pytest.mark.parametrize("grad_accum", [1, 2])
def test_memory_at_is_what_estimate_option_judges_feasibility_on(name, grad_accum):
    sc = scenario_from_flags("qwen3-0.6b", platform="dgx-h100", nodes=2, seq_len=512, bucket_mb=50)
    s = get_strategy(name)
    at = BatchAt(micro_batch=3, grad_accum=grad_accum)
    e = estimate_option(sc, s, at)
    m = memory_at(sc, s, at)
    assert m.memory == e.memory and m.device_peak_bytes == e.device_peak_bytes
    assert dict(m.memory_runtime) == dict(e.memory_runtime)
    assert device_peak_at(sc, s, at) == e.device_peak_bytes


def test_model_states_divide_over_the_ranks_a_strategy_shards_them_on():
    sc = scenario_from_flags("qwen3-0.6b", platform="dgx-h100", nodes=1)
    wide = sc.with_layout(Layout(nodes=4, ranks_per_node=sc.layout.ranks_per_node))
    ddp, zero3 = get_strategy("ddp"), get_strategy("zero3")
    assert model_state_bytes(wide, ddp) == model_state_bytes(sc, ddp)  # replicated: no change with nodes
    assert model_state_bytes(wide, zero3) < model_state_bytes(sc, zero3) / 3
    # bf16 params gathered whole: 2 bytes a parameter (the 0.6B model's embedding counted once)
    assert gathered_model_bytes(sc) == pytest.approx(2 * sc.model.total_params, rel=0.05)

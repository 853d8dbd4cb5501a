"""estimate/option.py: one strategy estimated in one call, a frozen answer the planner, bench's
predictions and the fits all read."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from prism_strategy.bench.results.predict import predict
from prism_strategy.estimate.option import BatchAt, estimate_option, estimate_step
from prism_strategy.flags import scenario_from_flags
from prism_strategy.planning.planner import evaluate
from prism_strategy.specs.presets import load_platform
from prism_strategy.strategies import get_strategy

SRC = Path(__file__).resolve().parents[3] / "src" / "prism_strategy"


def test_the_planners_option_is_the_estimate_as_it_came_back():
    sc = scenario_from_flags("llama-3.1-8b", nodes=4, seq_len=2048, global_batch=192)
    s = get_strategy("hsdp_full_shard")
    e, o = estimate_option(sc, s), evaluate(sc, s)
    assert (o.micro_batch, o.grad_accum, o.max_micro_batch) == (
        e.batch.micro_batch,
        e.batch.grad_accum,
        e.batch.max_micro_batch,
    )
    assert o.step_time_s == e.step.step_time_s and o.memory == e.memory and o.provenance == dict(e.provenance)
    assert o.micro_batch * o.grad_accum * sc.layout.world == 192
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.step = e.step  # type: ignore[misc]
    with pytest.raises(TypeError):
        e.provenance["memory"] = "changed"  # type: ignore[index]


def test_a_given_batch_is_priced_as_given_and_one_node_scales_perfectly():
    sc = scenario_from_flags("qwen3-0.6b", platform="dgx-h100", seq_len=512, micro_batch=2)
    e = estimate_option(sc, get_strategy("ddp"), BatchAt(micro_batch=3, grad_accum=2))
    assert (e.batch.micro_batch, e.batch.grad_accum, e.scaling_efficiency) == (3, 2, 1.0)
    alone = estimate_step(sc, get_strategy("ddp"), BatchAt(micro_batch=3, grad_accum=2))
    assert alone == e.step  # the step part is the same call
    assert e.step.samples_per_s == pytest.approx(3 * 2 * sc.layout.world / e.step.step_time_s)


def test_bench_predicts_through_the_same_entry():
    config = dict(model="tiny-llama", strategy="zero2", nproc=4, micro_batch=2, seq_len=128)
    got = predict(config, load_platform("cpu"))
    from prism_strategy.inputs.stored import scenario_from_row

    e = estimate_option(scenario_from_row(config, load_platform("cpu")), get_strategy("zero2"))
    assert got["step_time_s"] == e.step.step_time_s and got["memory_bytes"] == e.memory.total


def test_the_planner_reaches_the_estimates_through_the_one_entry():
    tree = ast.parse((SRC / "planning" / "planner.py").read_text())
    used = {
        n.module
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("prism_strategy.estimate")
    }
    # the platform's env profile and calibration, once per plan, come through the same entry
    assert used == {"prism_strategy.estimate.entry"}, used  # all of planning/: tests/unit/house/test_layers.py

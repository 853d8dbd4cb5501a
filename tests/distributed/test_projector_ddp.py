"""Projector-only training (frozen backbone) under DDP with static_graph: only trainable
parameters get gradients and only they are communicated; unused parameters are handled."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.distributed


def test_projector_only_ddp_static_graph_trains_and_matches(torch_run):
    r = torch_run[0]["projector"]
    assert r["keys_match"] and r["max_diff"] <= 1e-6
    assert "static_graph=True" in r["describe"]


def test_only_trainable_parameters_get_gradients(torch_run):
    for res in torch_run:
        assert res["projector"]["with_grad"] == ["projector.bias", "projector.weight"]


def test_only_trainable_parameters_are_communicated(torch_run):
    for res in torch_run:
        r = res["projector"]
        assert r["communicated_per_step"] == r["trainable"] == 16 * 32 + 32


def test_unused_trainable_parameter_with_static_graph(torch_run):
    r = torch_run[0]["unused/static_graph"]
    assert r["max_diff"] <= 1e-6 and not r["warnings"]


def test_find_unused_parameters_trains_with_a_cost_warning(torch_run):
    r = torch_run[0]["unused/find_unused"]
    assert r["max_diff"] <= 1e-6
    assert any("find-unused-cost" in w for w in r["warnings"])
    assert "static_graph=False find_unused_parameters=True" in r["describe"]

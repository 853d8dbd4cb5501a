"""Issue 26 findings 9, 11 (--nodes bound) and 12: "nothing fits" says what does not fit and the
smallest change that does, computed; sizes far beyond any model are judged before any timing or
tracing; a job larger than any reported is bad input."""

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prism_strategy.cli import app
from prism_strategy.specs.cluster import MAX_RANKS

runner = CliRunner()
HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
MIXTRAL = ["--model", str(HF / "mixtral-8x7b" / "config.json"), "--platform", "dgx-a100-40"]


def plan(*args):
    r = runner.invoke(app, ["plan", *args, "--json"])
    assert r.exit_code in (0, 1), r.output
    return r.exit_code, json.loads(r.stdout)


def feasible(d, name):
    return next(o for o in d["options"] if o["strategy"] == name)["feasible"]


def test_mixtral_on_one_a100_node_names_the_nodes_each_strategy_needs():
    """Finding 9: 'try a shorter --seq-len' though model states alone do not fit. The advice names
    model states and a node count per strategy; the plan at that count finds it feasible, and one
    node fewer does not."""
    code, d = plan(*MIXTRAL, "--nodes", "1")
    assert code == 1 and d["recommended"] is None
    advice = d["reasons"][0]
    assert "model states alone need" in advice and "shorter --seq-len" not in advice
    needs = re.findall(r"(\w+) on (\d+) nodes", advice.split("nodes needed")[1])
    assert needs
    for name, n in needs[:2]:
        n = int(n)
        assert feasible(plan(*MIXTRAL, "--nodes", str(n))[1], name), (name, n)
        if n > 1:
            assert not feasible(plan(*MIXTRAL, "--nodes", str(n - 1))[1], name), (name, n)


def test_pinned_checkpointing_advice_names_checkpointing_every_block():
    code, d = plan(*MIXTRAL, "--nodes", "1", "--ckpt-freq", "0", "--seq-len", "4096")
    assert code == 1
    m = re.search(r"--ckpt-freq 1 \(checkpoint every block\): (\w+) fits on (\d+) nodes", d["reasons"][0])
    assert m, d["reasons"][0]
    later = plan(*MIXTRAL, "--nodes", m.group(2), "--ckpt-freq", "1", "--seq-len", "4096")[1]
    assert feasible(later, m.group(1))


def _huge(tmp_path, **change):
    cfg = json.loads((HF / "mistral-7b" / "config.json").read_text()) | change
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path / "config.json")


def _no_timing(monkeypatch):
    import prism_strategy.planning.planner as planner

    def never(*a, **k):
        raise AssertionError("a step was timed for a model whose states cannot fit")

    monkeypatch.setattr(planner, "estimate_option", never)  # the one entry every option is timed through
    monkeypatch.setattr(planner, "trace_options", never)


@pytest.mark.parametrize("nodes, states", [(1, "do not fit"), (MAX_RANKS // 8, "fit; activations")])
def test_a_100000_layer_config_is_judged_before_any_timing(tmp_path, monkeypatch, nodes, states):
    """Finding 12: 44 s for the plan (cost grew with the layer count). Nothing can fit (the model
    states on one node; the checkpointed activations on the most nodes a plan takes): exit 1, each
    option's reason says it was judged before timing."""
    _no_timing(monkeypatch)
    args = ["--model", _huge(tmp_path, num_hidden_layers=100_000), "--platform", "dgx-h100", "--nodes", str(nodes)]
    code, d = plan(*args)
    assert code == 1 and d["recommended"] is None
    assert all("judged before timing" in o["why_not"] for o in d["options"])
    assert states in next(o for o in d["options"] if o["strategy"] == "zero3")["why_not"]
    assert "no node count up to" in d["reasons"][0]


def test_estimate_on_hidden_size_1e9_answers_without_tracing(tmp_path, monkeypatch):
    _no_timing(monkeypatch)
    r = runner.invoke(app, ["estimate", "--model", _huge(tmp_path, hidden_size=10**9), "--platform", "dgx-h100"])
    assert r.exit_code == 1, r.output
    assert "model states alone" in r.stdout and "do not fit" in r.stdout and "nothing traced" in r.stdout


def test_identical_layers_are_counted_once():
    """The parameter count of a 100,000-layer stack is the 32-layer one's blocks x 3125, exactly."""
    from dataclasses import replace

    from prism_strategy.specs.hf import load_hf_config

    spec = load_hf_config(HF / "mistral-7b" / "config.json")
    big = replace(spec, layers=100_000)
    assert big.stack_params == spec.stack_params // 32 * 100_000
    assert [n for _, n in big.stack_groups] == [100_000]  # one block's modules, and how many


def test_nodes_beyond_the_stated_bound_are_bad_input():
    r = runner.invoke(app, ["plan", "--model", "qwen3-0.6b", "--platform", "dgx-h100", "--nodes", "1000000"])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and f"{MAX_RANKS:,}" in lines[0] and f"at most {MAX_RANKS // 8} nodes" in lines[0]


@pytest.mark.parametrize("nodes", [MAX_RANKS // 8])
def test_the_bound_itself_is_accepted(nodes):
    r = runner.invoke(app, ["plan", "--model", "qwen3-0.6b", "--platform", "dgx-h100", "--nodes", str(nodes), "--json"])
    assert r.exit_code == 0, r.output

"""`plan --varying-lengths / --fixed-lengths`: the allocator's reserve in the JSON and the ceiling it
sets (estimate/memory_runtime.py). Scenario: PRISM C6's (OLMo-7B projector-only DDP on Aurora)."""

import json

from typer.testing import CliRunner

from prism_strategy.cli import app
from prism_strategy.specs.presets import load_platform

runner = CliRunner()
C6 = [
    "plan",
    "--model",
    "olmo-7b",
    "--vision",
    "siglip2-base-patch16-224",
    "--mode",
    "projector",
    "--platform",
    "aurora",
    "--seq-len",
    "1024",
    "--micro-batch",
    "2",
    "--ckpt-freq",
    "0",
    "--precision",
    "bf16-pure",
    "--json",
]


def _ddp(flag: str) -> dict:
    r = runner.invoke(app, [*C6, flag])
    assert r.exit_code == 0, r.output
    return next(o for o in json.loads(r.stdout)["options"] if o["strategy"] == "ddp")


def test_varying_lengths_add_the_slivers_to_what_is_judged():
    """The pinned slivers are allocator_pinned_factor x per-sample activations (the varying run's
    unpressed minus its fixed-shape reserve is allocator_varying_factor x the same bytes)."""
    p = load_platform("aurora")
    vary, fixed = _ddp("--varying-lengths"), _ddp("--fixed-lengths")
    assert vary["memory_allocated_gib"] == fixed["memory_allocated_gib"]
    acts = (vary["memory_reserved_gib"] - fixed["memory_reserved_gib"]) / p.allocator.allocator_varying_factor
    pinned = vary["memory_at_limit_gib"] - fixed["memory_at_limit_gib"]
    assert abs(pinned - p.allocator.allocator_pinned_factor * acts) < 0.01
    assert vary["max_micro_batch"] <= fixed["max_micro_batch"]
    assert "memory_at_limit_gib" in vary["memory_judged_on"]

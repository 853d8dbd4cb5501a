"""The optimizer step as its own memory moment (issue 17 item 1), measured on CPU.

A real torch AdamW step over tiny-llama's real parameters (transformers' LlamaForCausalLM built
from the preset) runs under torch's MemTracker, which counts every tensor the step allocates
(parameters, gradients, optimizer state, the step's temporaries). The prediction is the DDP
engine's "optimizer step" moment at world 1 (estimate/memory.py moments). foreach is forced on
CPU (torch's CPU default is the per-tensor loop), so the code path CUDA and XPU take by default
is the one measured. Tolerance 2%: what the step allocates beside the modelled tensors is one
1-element `step` tensor per parameter (torch/optim/adam.py _init_group), far below 2%.
"""

from __future__ import annotations

import pytest
import torch

from prism_strategy.estimate.memory import moments
from prism_strategy.runtime.optim import optimizer_factory
from prism_strategy.specs import Layout, MultimodalSpec, TrainingSpec, load_model, load_platform
from prism_strategy.specs.parts import model_parts
from prism_strategy.strategies import get_strategy

TOLERANCE = 0.02
CPU = load_platform("cpu")


def _model() -> torch.nn.Module:
    transformers = pytest.importorskip("transformers")
    from prism_strategy.specs.hf import to_hf_config

    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(to_hf_config(load_model("tiny-llama")))


def measured_step_peak(optimizer: str) -> float:
    """Peak tensor bytes over a second optimizer.step() (the first one creates the state)."""
    from torch.distributed._tools.mem_tracker import MemTracker

    model = _model()
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt = optimizer_factory(optimizer)(model.parameters())
    opt.step()
    mt = MemTracker()
    mt.track_external(model, opt)
    with mt:
        opt.step()
    return float(sum(d["Total"] for d in mt.get_tracker_snapshot("peak").values()))


def predicted_step(optimizer: str) -> float:
    t = TrainingSpec.from_precision(
        "fp32", seq_len=16, optimizer="adamw", optimizer_impl=optimizer.partition("-")[2] or "auto"
    )
    parts = model_parts(MultimodalSpec(backbone=load_model("tiny-llama")), t)
    ms = moments(parts, t, CPU, Layout(nodes=1, ranks_per_node=1), get_strategy("ddp"))
    return next(m for m in ms if m.name == "optimizer step").total(0)


@pytest.mark.parametrize("optimizer", ["adamw-foreach", "adamw-loop", "adamw-fused", "adamw"])
def test_optimizer_step_peak_matches_the_moment(optimizer):
    measured, predicted = measured_step_peak(optimizer), predicted_step(optimizer)
    err = (predicted - measured) / measured
    assert abs(err) <= TOLERANCE, (
        f"{optimizer}: predicted {predicted:.0f} B, measured {measured:.0f} B ({100 * err:+.1f}%)"
    )


def test_foreach_holds_a_state_sized_temporary_the_fused_step_does_not():
    """foreach - fused = one fp32 copy of every parameter (_foreach_sqrt of exp_avg_sq), measured."""
    params = sum(p.numel() for p in _model().parameters())
    extra = measured_step_peak("adamw-foreach") - measured_step_peak("adamw-fused")
    assert extra == pytest.approx(4 * params, rel=TOLERANCE)


def test_torch_default_is_the_loop_on_cpu_and_foreach_on_devices():
    t = TrainingSpec.from_precision("bf16-mixed")
    assert [t.optimizer_impl_on(d) for d in ("cpu", "cuda", "xpu")] == ["loop", "foreach", "foreach"]

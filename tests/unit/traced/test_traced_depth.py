"""Issue 38 item 3: a deep stack is traced at two shallow depths per kind of block and
extrapolated (traced/depth.py), as `plan` counts identical blocks once and multiplies.

Truth: the full trace of the same small stack (4 to 7 blocks), run in the same test with the
depth plan switched off; compared exactly (bytes are integers and the growth per block is
exact), for the total, every tracker category and the phase of the peak."""

from __future__ import annotations

import dataclasses

import pytest

import prism_strategy.traced.depth as depth
import prism_strategy.traced.model as traced_model
from prism_strategy.specs import Layout, MultimodalSpec, TrainingSpec, TransformerSpec
from prism_strategy.specs.presets import load_model
from prism_strategy.traced.estimate import trace_option

LLAMA = TransformerSpec(
    name="tiny",
    hf_model_type="llama",
    layers=4,
    hidden=64,
    heads=4,
    kv_heads=2,
    head_dim=16,
    ffn=128,
    vocab=512,
    max_positions=256,
)
WORLD4 = Layout(nodes=1, ranks_per_node=4)


def _moe(layers: int, dense: int) -> TransformerSpec:
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "fixtures" / "census" / "tiny-qwen2-moe.toml"
    return dataclasses.replace(load_model(str(path)), layers=layers, dense_layers=dense)


def test_depth_plan_traces_two_depths_per_kind_that_grows():
    t = TrainingSpec.from_precision("bf16-mixed", seq_len=64)
    assert depth.depth_plan(MultimodalSpec(backbone=dataclasses.replace(LLAMA, layers=3)), t) is None
    assert depth.depth_plan(MultimodalSpec(backbone=LLAMA), t) == [((0, 2, 0), -1.0), ((0, 3, 0), 2.0)]
    deep = MultimodalSpec(backbone=dataclasses.replace(LLAMA, layers=1000))
    assert depth.depth_plan(deep, t) == [((0, 2, 0), -997.0), ((0, 3, 0), 998.0)]
    moe = MultimodalSpec(backbone=_moe(1000, 500))
    assert depth.depth_plan(moe, t) == [((0, 2, 2), -995.0), ((0, 3, 2), 498.0), ((0, 2, 3), 498.0)]
    every3 = TrainingSpec.from_precision("bf16-mixed", seq_len=64, ckpt_freq=3)
    assert depth.depth_plan(MultimodalSpec(backbone=dataclasses.replace(LLAMA, layers=10)), every3) == [
        ((0, 4, 0), -1.0),
        ((0, 7, 0), 2.0),
    ]  # 10 = 4 + 2 x 3: the traced stacks checkpoint blocks 3 (and 6) as the full one does


def test_gemma_sliding_pattern_is_the_period():
    t = TrainingSpec.from_precision("bf16-mixed", seq_len=64)
    gemma = dataclasses.replace(
        LLAMA, hf_model_type="gemma3_text", block_norms=4, layers=26, sliding_window=16, sliding_layers=22
    )
    assert depth.period(MultimodalSpec(backbone=gemma), t) == 6
    assert depth.depth_plan(MultimodalSpec(backbone=gemma), t) == [((0, 2, 0), -3.0), ((0, 8, 0), 4.0)]


def _both(spec: TransformerSpec | MultimodalSpec, training: TrainingSpec, strategy: str, monkeypatch):
    model = spec if isinstance(spec, MultimodalSpec) else MultimodalSpec(backbone=spec)
    assert depth.depth_plan(model, training) is not None
    built: list[tuple[int, int]] = []
    original = traced_model.build_from_spec

    def recording(m, t, **kw):
        built.append((m.vision.layers if m.vision else 0, m.backbone.layers))
        return original(m, t, **kw)

    monkeypatch.setattr(traced_model, "build_from_spec", recording)
    extrapolated = trace_option(model, training, WORLD4, strategy, 2).memory
    v, dense, sparse = depth.counts(model)
    assert built and (v, dense + sparse) not in built  # the full stack was never built
    monkeypatch.setattr(depth, "depth_plan", lambda *a: None)
    whole = trace_option(model, training, WORLD4, strategy, 2).memory
    return extrapolated, whole


@pytest.mark.parametrize(
    "spec, precision, ckpt, strategy",
    [
        (LLAMA, "bf16-mixed", 0, "fsdp_full_shard"),
        (LLAMA, "fp32", 0, "ddp"),
        (dataclasses.replace(LLAMA, layers=7), "bf16-mixed", 2, "fsdp_full_shard"),
        (_moe(5, 1), "bf16-pure", 0, "fsdp_full_shard"),
    ],
    ids=["llama-4-fsdp", "llama-4-ddp", "llama-7-ckpt2-fsdp", "moe-5-fsdp"],
)
def test_extrapolated_trace_equals_the_full_trace(monkeypatch, spec, precision, ckpt, strategy):
    training = TrainingSpec.from_precision(precision, seq_len=64, ckpt_freq=ckpt)
    extrapolated, whole = _both(spec, training, strategy, monkeypatch)
    assert extrapolated.peak_bytes == whole.peak_bytes
    assert extrapolated.categories == whole.categories
    assert extrapolated.phase == whole.phase
    assert "extrapolated per block" in extrapolated.model and "extrapolated per block" in extrapolated.method
    assert "extrapolated" not in whole.model + whole.method


SIGLIP = TransformerSpec(
    name="tiny-siglip",
    kind="vision",
    hf_model_type="siglip_vision_model",
    layers=5,
    hidden=64,
    heads=4,
    kv_heads=4,
    head_dim=16,
    ffn=128,
    qkv_bias=True,
    o_bias=True,
    mlp_bias=True,
    mlp="gelu",
    norm="layernorm",
    image_size=32,
    patch_size=8,
)


def test_vision_and_backbone_extrapolated_together_equal_the_full_trace(monkeypatch):
    model = MultimodalSpec(backbone=LLAMA, vision=SIGLIP, mode="encoder-projector")
    training = TrainingSpec.from_precision("bf16-mixed", seq_len=64)
    assert depth.depth_plan(model, training) == [((2, 2, 0), -4.0), ((3, 2, 0), 3.0), ((2, 3, 0), 2.0)]
    extrapolated, whole = _both(model, training, "fsdp_full_shard", monkeypatch)
    assert (extrapolated.peak_bytes, extrapolated.categories, extrapolated.phase) == (
        whole.peak_bytes,
        whole.categories,
        whole.phase,
    )

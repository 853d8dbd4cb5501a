"""DeepSpeed's bf16 master weights and optimizer states (bf16.bf16_master_weights_and_grads +
bf16_optimizer_states, deepspeedai/DeepSpeed #7700, 0.18.3+): what bf16-pure runs on DeepSpeed.

Truth: DeepSpeedExamples training/bf16_master_weight/README.md (45b4b71), "Memory Breakdown":
per parameter, baseline = bf16 params 2 + bf16 grads 2 + fp32 master 4 + fp32 master grads 4 +
fp32 Adam moments 4 + 4 = 20 bytes; low precision = 2 + 2 + 2 + 2 + 2 + 2 = 12 bytes, each
partitioned over the ranks under ZeRO-3."""

from __future__ import annotations

from pathlib import Path

import pytest

from prism_strategy.engines import engine_of
from prism_strategy.estimate.memory import moments
from prism_strategy.inputs.frameworks import read_config
from prism_strategy.specs import Layout, MultimodalSpec, TrainingSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.parts import model_parts
from prism_strategy.specs.presets import load_model, load_platform
from prism_strategy.strategies import get_strategy

CONFIGS = Path(__file__).parents[2] / "fixtures" / "configs"
LAY = Layout(nodes=1, ranks_per_node=4)


def _step(precision: str, stage: str = "zero3"):
    t = TrainingSpec.from_precision(precision, seq_len=128, micro_batch=1)
    parts = model_parts(MultimodalSpec(backbone=load_model("tiny-llama")), t)
    pt = sum(p.trainable for p in parts)
    ms = {m.name: m for m in moments(parts, t, load_platform("cpu"), LAY, get_strategy(stage))}
    return ms["optimizer step"], pt


def _model_states(moment) -> float:
    """params + grads + optimizer state + the sub-group's flattened master gradients."""
    keep = ("params", "grad partition", "adamw state", "one sub-group")
    return sum(b for _, label, b in moment.fixed if label.startswith(keep))


@pytest.mark.parametrize(("precision", "per_param"), [("bf16-mixed", 20), ("bf16-pure", 12)])
def test_zero3_model_states_are_the_examples_bytes_per_param(precision, per_param):
    m, pt = _step(precision)
    # tiny-llama has no frozen params; everything is partitioned over the 4 ranks
    assert _model_states(m) == pytest.approx(per_param * pt / LAY.world, rel=0.01)


def test_the_examples_configs_read_as_bf16_mixed_and_bf16_pure():
    base = read_config(CONFIGS / "deepspeed_zero3_bf16.json")
    full = read_config(CONFIGS / "deepspeed_zero3_bf16_full.json")
    assert base.options["precision"] == "bf16-mixed" and full.options["precision"] == "bf16-pure"
    assert not [f for f in full.ignored if "bf16_master" in f.field or "bf16_optimizer" in f.field]


def test_bf16_pure_writes_deepspeeds_keys_and_they_load_in_deepspeed():
    cfg = engine_of(get_strategy("zero2")).engine_config(
        get_strategy("zero2"), micro_batch=1, world_size=4, precision="bf16-pure"
    )
    assert cfg["bf16"] == {"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}
    ds = pytest.importorskip("deepspeed.runtime.config")
    parsed = ds.DeepSpeedConfig(cfg)
    assert parsed.bfloat16_config.bf16_master_weights_and_grads and parsed.bfloat16_config.bf16_optimizer_states


def test_optimizer_states_without_master_weights_is_bad_input(tmp_path):
    text = (CONFIGS / "deepspeed_zero3_bf16_full.json").read_text()
    (tmp_path / "ds.json").write_text(
        text.replace('"bf16_master_weights_and_grads": true', '"bf16_master_weights_and_grads": false')
    )
    with pytest.raises(SpecError, match="bf16_optimizer_states is true without bf16_master_weights_and_grads"):
        read_config(tmp_path / "ds.json")


def test_master_weights_alone_need_offload_and_are_said(tmp_path):
    text = (CONFIGS / "deepspeed_zero3_bf16_full.json").read_text()
    (tmp_path / "ds.json").write_text(text.replace('"bf16_optimizer_states": true', '"bf16_optimizer_states": false'))
    cfg = read_config(tmp_path / "ds.json")
    assert cfg.options["precision"] == "bf16-mixed"
    note = next(f.note for f in cfg.ignored if f.field == "bf16.bf16_master_weights_and_grads")
    assert "ZeRO-Offload" in note

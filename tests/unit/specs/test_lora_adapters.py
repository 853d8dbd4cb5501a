"""LoRA as a trainable subset (specs/lora.py): the base frozen, r x (in + out) parameters per
adapted Linear (peft tuners/lora/layer.py: lora_A Linear(in, r), lora_B Linear(r, out), no bias),
gradients and optimizer state for the adapters only, and the activations the base still stores."""

from dataclasses import replace
from pathlib import Path

import pytest

from prism_strategy.engines import engine_of
from prism_strategy.estimate.memory import part_activation_bytes_per_sample
from prism_strategy.specs import Layout, MultimodalSpec, TrainingSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.lora import LoraSpec, adapter_params, resolve_lora
from prism_strategy.specs.parts import model_parts
from prism_strategy.specs.presets import load_model
from prism_strategy.strategies import get_strategy

CONFIGS = Path(__file__).parents[2] / "fixtures" / "configs"
LLAMA2 = load_model("llama-2-7b")  # hidden 4096, 32 heads of 128 (q, k, v all 4096 wide), ffn 11008, 32 layers


def test_adapter_parameters_are_r_times_in_plus_out_per_adapted_linear():
    qv = LoraSpec(rank=64, targets=("q_proj", "v_proj"))
    assert adapter_params(LLAMA2, qv) == 32 * 2 * 64 * (4096 + 4096)  # 33,554,432
    every = LoraSpec(rank=8, targets="all-linear")
    per_block = 4 * (4096 + 4096) + 2 * (4096 + 11008) + (11008 + 4096)  # q k v o, gate up, down
    assert adapter_params(LLAMA2, every) == 32 * 8 * per_block


def test_peft_default_targets_for_the_model_type():
    assert adapter_params(LLAMA2, LoraSpec(rank=8)) == 32 * 2 * 8 * (4096 + 4096)  # llama: q_proj, v_proj


def test_only_the_adapters_have_gradients_and_optimizer_state():
    t = TrainingSpec.from_precision("bf16-mixed", seq_len=1024, micro_batch=1)
    lora = LoraSpec(rank=64, targets=("q_proj", "v_proj"))
    parts = model_parts(MultimodalSpec(backbone=LLAMA2, lora=lora), t)
    n_adapters = adapter_params(LLAMA2, lora)
    rows = engine_of(get_strategy("ddp")).states(parts, t, get_strategy("ddp"), Layout(nodes=1, ranks_per_node=8))
    by = {kind: sum(b for k, _, b in rows if k == kind) for kind in ("params", "grads", "optimizer")}
    assert by["grads"] == n_adapters * 4  # fp32 gradients of the adapters only
    assert by["optimizer"] == n_adapters * 8  # AdamW's two fp32 moments, adapters only
    assert by["params"] == n_adapters * 4 + LLAMA2.total_params * 2  # the frozen base in bf16


def test_the_base_keeps_the_adapters_inputs_and_not_the_frozen_linears_inputs():
    """A frozen Linear's input gradient needs only its weight, so it keeps no input; lora_A keeps
    its input (q_proj and v_proj share the block's normalised input: one tensor) and lora_B lora_A's
    r-wide output. Measured on CPU: tests/distributed/test_census_memory.py (LoRA within 10%)."""
    t = TrainingSpec.from_precision("bf16-mixed", seq_len=1024, micro_batch=1)
    lora = model_parts(MultimodalSpec(backbone=LLAMA2, lora=LoraSpec(rank=8)), t)[0]
    full = model_parts(MultimodalSpec(backbone=LLAMA2), t)[0]
    frozen = replace(lora, adapted=False)
    assert lora.backward and not lora.trains
    a = {
        p: part_activation_bytes_per_sample(part, t, 2)
        for p, part in (("lora", lora), ("full", full), ("frozen", frozen))
    }
    assert a["frozen"] < a["lora"] < a["full"]
    kept_per_token = 2 * (LLAMA2.hidden + 2 * 8)  # bf16: the q/v input, two r=8 middles
    assert a["lora"] - a["frozen"] == 1024 * LLAMA2.layers * kept_per_token


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"peft_type": "LORA", "r": 0, "target_modules": ["q_proj"]}, "LoRA rank r must be an integer >= 1, got 0"),
        ({"peft_type": "LORA", "r": 8, "target_modules": ["c_attn"]}, "c_attn.*not a Linear layer of llama-2-7b"),
        ({"peft_type": "LORA", "target_modules": ["q_proj"]}, "no `r`"),
        ({"peft_type": "IA3", "r": 8}, "peft_type IA3 is not LoRA"),
    ],
)
def test_a_bad_lora_config_is_one_line(tmp_path, fields, match):
    with pytest.raises(SpecError, match=match) as e:
        MultimodalSpec(backbone=LLAMA2, lora=resolve_lora(fields))
    assert "\n" not in str(e.value)


def test_a_malformed_adapter_config_is_one_line(tmp_path):
    (tmp_path / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 8,')
    with pytest.raises(SpecError, match="not valid JSON"):
        resolve_lora(tmp_path / "adapter_config.json")


def test_a_real_adapter_config_reads():
    lora = resolve_lora(CONFIGS / "peft_adapter_config_llama2_7b.json")
    assert lora.rank == 64 and lora.targets == ("q_proj", "v_proj")

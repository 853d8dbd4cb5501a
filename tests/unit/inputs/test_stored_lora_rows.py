"""A LoRA run's stored row (specs/scenario.py scenario_to_row's "lora") carries its adapters: read
back (inputs/stored.py scenario_from_row) it is the same LoraSpec, row_with keeps it, predict
prices the LoRA run, and a full-training row is stored without the key."""

from __future__ import annotations

from prism_strategy.bench.results.predict import predict
from prism_strategy.flags import scenario_from_flags
from prism_strategy.inputs.stored import RowChange, bench_row, row_key, row_values, row_with, scenario_from_row
from prism_strategy.specs.lora import LoraSpec, adapter_params
from prism_strategy.specs.presets import load_model, load_platform

LORA = {"r": 4, "target_modules": ["q_proj", "v_proj"]}
RUN = dict(platform="cpu", nodes=1, ranks_per_node=4, seq_len=32, micro_batch=2, global_batch=8, ckpt_freq=0)


def _spec(lora: LoraSpec | None) -> tuple:
    return None if lora is None else (lora.rank, lora.targets)


def test_a_lora_row_reads_back_as_the_same_lora_spec():
    sc = scenario_from_flags("tiny-llama", lora=LORA, **RUN)
    row = bench_row(sc, strategy="ddp", steps=1, warmup=1)
    back = scenario_from_row(row)
    assert _spec(back.model.lora) == _spec(sc.model.lora) == (4, ("q_proj", "v_proj"))
    assert back.model.trainable_params == adapter_params(load_model("tiny-llama"), sc.model.lora)
    assert row_values(row)["lora"] == LORA
    changed = row_with(row, RowChange(micro_batch=1, strategy="fsdp_full_shard"))
    assert _spec(scenario_from_row(changed).model.lora) == (4, ("q_proj", "v_proj"))


def test_a_lora_row_is_another_run_than_full_training_and_is_priced_as_lora():
    full = bench_row(scenario_from_flags("tiny-llama", **RUN), strategy="ddp")
    lora = bench_row(scenario_from_flags("tiny-llama", lora=LORA, **RUN), strategy="ddp")
    assert "lora" not in full and row_values(full)["lora"] is None
    assert row_key(full) != row_key(lora)
    cpu = load_platform("cpu")
    # the adapters train: no AdamW state or gradients for the frozen base
    assert predict(lora, cpu)["memory_bytes"] < predict(full, cpu)["memory_bytes"]

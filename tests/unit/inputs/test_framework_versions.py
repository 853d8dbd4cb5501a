"""Framework configs of every version, read as their framework reads them: older names through
data/framework_fields.toml (one mechanism for renames and deprecations, as DeepSpeed's own
DeepSpeedConfigModel does), unknown fields listed as unknown, assumed values listed.
Fixtures: real files, sources in tests/fixtures/configs/SOURCE.md."""

import json
from pathlib import Path

import pytest
import tomllib

from prism_strategy.emit.frameworks import framework_file
from prism_strategy.flags import plan_for_config
from prism_strategy.inputs.frameworks import read_config
from prism_strategy.inputs.frameworks.base import UNREAD, leaves
from prism_strategy.report.plan_json import plan_dict
from prism_strategy.specs.errors import SpecError

CONFIGS = Path(__file__).parents[2] / "fixtures" / "configs"
NEW = "torchtitan_llama3_8b.toml"
OLD = ("torchtitan_llama3_8b_before_local_batch.toml", "torchtitan_llama3_8b_training_degrees.toml")


def _field(cfg, name):
    return next(f for f in (*cfg.used, *cfg.ignored) if name in f.field.split(", "))


@pytest.mark.parametrize("name", OLD)
def test_an_older_torchtitan_llama3_8b_plans_as_the_current_one(name):
    # the same job (batch 1, seq 8192, selective op AC, FSDP over all ranks) in three JobConfig layouts
    old, new = read_config(CONFIGS / name), read_config(CONFIGS / NEW)
    assert old.options == new.options and old.strategy == new.strategy == "fsdp_full_shard"
    assert old.options["micro_batch"] == 1  # not JobConfig's newer default local_batch_size 8
    assert "micro_batch" in old.stated  # stated by the file: a flag that contradicts it is an error
    batch = _field(old, "training.batch_size")
    assert batch.keyword == "micro_batch" and "training.local_batch_size" in batch.note and "8570415" in batch.note
    assert not any(f.field == "training.batch_size" for f in old.ignored)


def test_every_field_of_an_older_file_is_named_under_its_own_name():
    cfg = read_config(CONFIGS / OLD[1])
    named = [n for f in (*cfg.used, *cfg.ignored) for n in f.field.split(", ")]
    for path, _ in leaves(cfg.content):
        assert any(path == n or path.startswith(n + ".") for n in named), path
    assert not [f.field for f in cfg.ignored if f.note == UNREAD]
    assert "parallelism.data_parallel_shard_degree" not in named  # the file's name is kept
    assert "training.data_parallel_shard_degree" in named


def test_an_unknown_field_is_unknown_not_ignored_with_a_borrowed_reason(tmp_path):
    text = (CONFIGS / NEW).read_text().replace("[parallelism]", "[parallelism]\ndata_paralel_shard_degree = 4", 1)
    (tmp_path / "job.toml").write_text(text)
    cfg = read_config(tmp_path / "job.toml")
    typo = _field(cfg, "parallelism.data_paralel_shard_degree")
    assert typo.note == UNREAD and "unknown" in typo.note
    known = _field(cfg, "training.max_norm")
    assert known.note != UNREAD


def test_meanings_torchtitan_reads_are_used_not_unknown(tmp_path):
    text = (CONFIGS / NEW).read_text()
    text = text.replace('mode = "selective"', 'mode = "full"').replace(
        "[parallelism]", '[parallelism]\nfsdp_reshard_after_forward = "default"', 1
    )
    (tmp_path / "job.toml").write_text(text)
    cfg = read_config(tmp_path / "job.toml")
    reshard = _field(cfg, "parallelism.fsdp_reshard_after_forward")
    assert reshard in cfg.used and "full_shard" in reshard.note
    option = _field(cfg, "activation_checkpoint.selective_ac_option")
    assert option in cfg.used and "mode = full" in option.note
    assert cfg.options["ckpt_freq"] == 1


def test_an_old_and_a_new_name_together_is_bad_input(tmp_path):
    text = (CONFIGS / NEW).read_text().replace("local_batch_size = 1", "local_batch_size = 1\nbatch_size = 2")
    (tmp_path / "job.toml").write_text(text)
    with pytest.raises(SpecError, match=r"training\.batch_size and training\.local_batch_size are both set"):
        read_config(tmp_path / "job.toml")


@pytest.mark.parametrize("name", ["accelerate_single_accelerator.yaml", "accelerate_fp8.yaml"])
def test_accelerate_distributed_type_no_is_one_process(name):
    # accelerate launch runs simple_launcher for NO: one process (commands/launch.py)
    cfg = read_config(CONFIGS / name)
    assert cfg.options["nodes"] == 1 and cfg.options["ranks_per_node"] == 1


def test_accelerate_fp8_is_said_not_silently_bf16():
    cfg = read_config(CONFIGS / "accelerate_fp8.yaml")
    assert cfg.options["precision"] == "bf16-mixed"
    assert any("fp8" in a and "not modelled" in a for a in cfg.assumed)
    assert "not modelled" in _field(cfg, "fp8_config").note


@pytest.mark.parametrize("kind", ["MULTI_GPUS", "FOO"])
def test_an_unknown_accelerate_distributed_type_is_bad_input(tmp_path, kind):
    text = (CONFIGS / "accelerate_single_accelerator.yaml").read_text().replace('"NO"', f'"{kind}"')
    (tmp_path / "a.yaml").write_text(text)
    with pytest.raises(SpecError, match=f"distributed_type = {kind}: not one of accelerate's distributed types"):
        read_config(tmp_path / "a.yaml")


def test_a_bare_yaml_no_is_accelerate_no(tmp_path):
    (tmp_path / "a.yaml").write_text("distributed_type: NO\nmixed_precision: bf16\n")  # YAML 1.1: false
    assert read_config(tmp_path / "a.yaml").options["ranks_per_node"] == 1


@pytest.mark.parametrize("name", OLD)
def test_an_older_file_round_trips_under_its_own_names(tmp_path, name):
    # emit --format torchtitan from a plan of an older JobConfig's file writes that file's names back
    # (an older torchtitan does not know local_batch_size; ours refuses both names in one file)
    p = plan_for_config(CONFIGS / name, platform="dgx-h100", nodes=2, override=True)
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan_dict(p), default=str))
    out = framework_file(plan_path, "torchtitan", "hsdp_shard_grad_op")
    (tmp_path / name).write_text(out.file.text)
    written = tomllib.loads(out.file.text)
    assert "local_batch_size" not in written["training"] and written["training"]["batch_size"] == 1
    back = read_config(tmp_path / name)
    assert back.strategy == "hsdp_shard_grad_op" and back.options["micro_batch"] == 1


def test_a_peft_adapter_beside_training_arguments_is_read_as_lora(tmp_path):
    # a PEFT run's output folder: the TrainingArguments dump and the adapter_config.json peft saved
    for src, dst in (
        ("hf_training_args_fsdp.json", "training_args.json"),
        ("peft_adapter_config_llama2_7b.json", "adapter_config.json"),
    ):
        (tmp_path / dst).write_text((CONFIGS / src).read_text())
    cfg = read_config(tmp_path / "training_args.json")
    assert cfg.options["lora"] == str(tmp_path / "adapter_config.json")
    assert any("adapter_config.json beside" in a for a in cfg.assumed)
    assert "lora" not in read_config(CONFIGS / "hf_training_args_fsdp.json").options
    p = plan_for_config(tmp_path / "training_args.json", model="llama-2-7b", platform="dgx-a100-40")
    assert p.scenario.model.lora.rank == 64 and p.scenario.inputs()["lora"]["targets"] == ["q_proj", "v_proj"]

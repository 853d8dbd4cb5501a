"""Framework configs at the edge (issue 38 item 2): the real configs of tests/fixtures/configs
(sources: SOURCE.md there) with one field changed to what the issue found giving a traceback:
NaN, inf, 1e309 or 10**400 in an integer field, a number where a table goes (`deepspeed: 3`,
`fsdp: 1`), an Accelerate deepspeed_config_file that is not a JSON object, a FIFO or /dev/zero as
the file. Each is a SpecError of one line naming the file and the field."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from prism_strategy.inputs.frameworks import read_config
from prism_strategy.specs.errors import SpecError

CONFIGS = Path(__file__).resolve().parents[2] / "fixtures" / "configs"
HOSTILE = {"NaN": "nan", "Infinity": "inf", "1e309": "inf", "1" + "0" * 400: "(401 digits)"}
"""JSON literal -> what the refusal says the value is."""


def _edited(tmp_path: Path, name: str, pattern: str, new: str) -> Path:
    text = (CONFIGS / name).read_text()
    changed, n = re.subn(pattern, new, text, count=1, flags=re.M)
    assert n == 1, f"{pattern!r} not in {name}"
    out = tmp_path / name
    out.write_text(changed)
    return out


def _refused(path: Path) -> str:
    with pytest.raises(SpecError) as e:
        read_config(path)
    msg = str(e.value)
    assert "\n" not in msg and f"--from {path}" in msg
    return msg


@pytest.mark.parametrize("literal", list(HOSTILE))
@pytest.mark.parametrize(
    ("name", "pattern", "field"),
    [
        ("deepspeed_zero3_bf16.json", r'"stage": 3', "zero_optimization.stage"),
        ("deepspeed_zero3_bf16.json", r'"train_micro_batch_size_per_gpu": 4', "train_micro_batch_size_per_gpu"),
        ("deepspeed_zero3_bf16.json", r'"reduce_bucket_size": 5e7', "zero_optimization.reduce_bucket_size"),
        ("hf_training_args_fsdp.json", r'"per_device_train_batch_size": 4', "per_device_train_batch_size"),
    ],
)
def test_json_integer_fields_refuse_non_finite_and_huge(tmp_path, name, pattern, field, literal):
    key = pattern.split(":")[0]
    msg = _refused(_edited(tmp_path, name, pattern, f"{key}: {literal}"))
    assert field in msg and HOSTILE[literal] in msg


@pytest.mark.parametrize("literal", ["nan", "inf", "-inf", "1" + "0" * 400])
@pytest.mark.parametrize(
    ("pattern", "line", "field"),
    [
        (r"^local_batch_size = .*$", "local_batch_size = {}", "training.local_batch_size"),
        (r"^seq_len = .*$", "seq_len = {}", "training.seq_len"),
        (r"^data_parallel_shard_degree = .*$", "data_parallel_shard_degree = {}", "data_parallel_shard_degree"),
    ],
)
def test_torchtitan_integer_fields_refuse_non_finite_and_huge(tmp_path, pattern, line, field, literal):
    msg = _refused(_edited(tmp_path, "torchtitan_llama3_8b.toml", pattern, line.format(literal)))
    assert field in msg


@pytest.mark.parametrize("literal", [".inf", ".nan", "1e309", "1" + "0" * 400])
def test_accelerate_num_processes_refuses_non_finite_and_huge(tmp_path, literal):
    msg = _refused(_edited(tmp_path, "accelerate_fsdp.yaml", r"^num_processes: 2$", f"num_processes: {literal}"))
    assert "num_processes" in msg


def test_torchtitan_integral_float_past_int64_is_refused(tmp_path):
    f = _edited(tmp_path, "torchtitan_llama3_8b.toml", r"^local_batch_size = .*$", "local_batch_size = 1.5e300")
    assert "training.local_batch_size must be an integer" in _refused(f)


@pytest.mark.parametrize(
    ("name", "pattern", "new", "said"),
    [
        (
            "deepspeed_zero3_bf16.json",
            r'"zero_optimization": \{',
            '"zero_optimization": 3, "x": {',
            "zero_optimization must be",
        ),
        ("deepspeed_zero3_bf16.json", r'"bf16": \{', '"bf16": 1, "x": {', "bf16 must be an object"),
        ("accelerate_fsdp.yaml", r"^fsdp_config:$", "fsdp_config: 1\nx:", "fsdp_config must be a table"),
        ("accelerate_deepspeed.yaml", r"^deepspeed_config:$", "deepspeed_config: 3\nx:", "deepspeed_config must be"),
        (
            "hf_training_args_fsdp.json",
            r'"fsdp": "full_shard auto_wrap"',
            '"fsdp": 1',
            "fsdp must be a string or a list",
        ),
        (
            "hf_training_args_fsdp.json",
            r'"ddp_bucket_cap_mb": null',
            '"ddp_bucket_cap_mb": "big"',
            "ddp_bucket_cap_mb must",
        ),
    ],
)
def test_a_wrong_nested_type_is_one_line(tmp_path, name, pattern, new, said):
    assert said in _refused(_edited(tmp_path, name, pattern, new))


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("hello: [\n", "not valid JSON / TOML / YAML"),
        ("[1, 2, 3]", "a list, not a ds_config object"),
        ('{"zero_optimization": {"stage": NaN}}', "zero_optimization.stage = nan"),
    ],
)
def test_accelerate_deepspeed_config_file_that_is_not_a_ds_config(tmp_path, content, said):
    (tmp_path / "ds.txt").write_text(content)
    f = _edited(tmp_path, "accelerate_deepspeed.yaml", r"deepspeed_config_file: .*$", "deepspeed_config_file: ds.txt")
    msg = _refused(f)
    assert "deepspeed_config.deepspeed_config_file = ds.txt" in msg and said in msg


def test_accelerate_deepspeed_config_file_of_the_wrong_type(tmp_path):
    f = _edited(tmp_path, "accelerate_deepspeed.yaml", r"deepspeed_config_file: .*$", "deepspeed_config_file: [a]")
    assert "deepspeed_config.deepspeed_config_file must be a path" in _refused(f)


def test_a_fifo_or_a_device_as_the_config_is_refused(tmp_path):
    fifo = tmp_path / "ds_config.json"
    os.mkfifo(fifo)
    assert "a FIFO, not a regular file" in _refused(fifo)
    with pytest.raises(SpecError, match="--from /dev/zero: cannot read it: a device"):
        read_config("/dev/zero")


def test_the_real_configs_still_read(tmp_path):
    """The edge refuses only what is broken: every fixture config (with its ds_config beside it) reads."""
    for f in sorted(CONFIGS.glob("*")):
        if f.suffix in (".json", ".toml", ".yaml") and "zero_stage3" not in f.name:
            shutil.copy(f, tmp_path / f.name)
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 1}}))
    acc = tmp_path / "accelerate_deepspeed.yaml"
    acc.write_text(re.sub(r"deepspeed_config_file: .*", "deepspeed_config_file: ds.json", acc.read_text()))
    for f in sorted(tmp_path.iterdir()):
        if f.name != "ds.json":
            try:
                assert read_config(f).format
            except SpecError as e:  # refused for what it plans (TP, CP), never for a value's type
                assert "parallelism" in str(e), str(e)

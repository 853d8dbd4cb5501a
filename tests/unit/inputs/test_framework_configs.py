"""The framework readers (inputs/frameworks/) on the projects' own example configs
(tests/fixtures/configs/SOURCE.md), the merge with the command line, and the writers'
files read back by the frameworks' own parsers: DeepSpeed's DeepSpeedConfig and torchtitan's
ConfigManager (where installed)."""

import dataclasses
import functools
import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest

from prism_strategy.emit.frameworks import framework_file
from prism_strategy.flags import plan, plan_for_config
from prism_strategy.inputs.frameworks import read_config
from prism_strategy.inputs.frameworks.base import UNREAD, leaves, load
from prism_strategy.inputs.frameworks.plan import configured
from prism_strategy.report.plan_json import plan_dict
from prism_strategy.specs.errors import SpecError

CONFIGS = Path(__file__).parents[2] / "fixtures" / "configs"
READABLE = [
    "torchtitan_llama3_8b.toml",
    "deepspeed_zero3_bf16.json",
    "accelerate_zero_stage3_config.json",
    "accelerate_zero_stage3_offload_config.json",
    "accelerate_fsdp.yaml",
    "accelerate_multi_gpu.yaml",
    "hf_training_args_fsdp.json",
]


@pytest.mark.parametrize("name", READABLE)
def test_every_field_of_the_example_is_used_or_ignored_with_its_own_reason(name):
    cfg = read_config(CONFIGS / name)
    named = [n for f in (*cfg.used, *cfg.ignored) for n in f.field.split(", ")]
    for path, _ in leaves(cfg.content):
        assert any(path == n or path.startswith(n + ".") for n in named), path
    assert not [f.field for f in cfg.ignored if f.note == UNREAD]  # each has a reason of its own
    assert all(f.note for f in cfg.ignored)


def test_torchtitan_llama3_8b_reads_as_torchtitan_runs_it():
    cfg = read_config(CONFIGS / "torchtitan_llama3_8b.toml")
    assert cfg.format == "torchtitan" and cfg.strategy == "fsdp_full_shard"
    assert cfg.options == {
        "model": "llama-3.1-8b",
        "micro_batch": 1,
        "grad_accum": 1,
        "seq_len": 8192,
        "precision": "bf16-mixed",
        "reduce_dtype": "fp32",
        "ckpt_freq": "sac",
        "compile": False,
        "optimizer": "adamw-fused",  # JobConfig's default implementation, the file names only AdamW
    }
    # what the file states vs what JobConfig defaults (a flag overrides a default silently)
    assert {"seq_len", "micro_batch", "ckpt_freq", "compile", "model"} <= cfg.stated
    assert not {"precision", "reduce_dtype", "optimizer", "grad_accum"} & cfg.stated


def test_torchtitan_defaults_apply_to_absent_sections(tmp_path):
    f = tmp_path / "job.toml"
    f.write_text(
        '[model]\nname = "qwen3"\nflavor = "0.6B"\n[parallelism]\ndata_parallel_replicate_degree = 2\n'
        'data_parallel_shard_degree = 4\nfsdp_reshard_after_forward = "never"\n'
    )
    cfg = read_config(f)
    assert cfg.strategy == "hsdp_shard_grad_op" and cfg.dp_degrees == (2, 4)
    assert cfg.options["model"] == "qwen3-0.6b"
    assert (cfg.options["micro_batch"], cfg.options["seq_len"], cfg.options["ckpt_freq"]) == (8, 2048, 2)


def test_deepspeed_zero3_buckets_and_what_the_model_does_not_run():
    cfg = read_config(CONFIGS / "deepspeed_zero3_bf16.json")
    assert cfg.strategy == "zero3"
    assert cfg.options["bucket_mb"] * 2**20 / 2 == 5e7  # reduce_bucket_size elements of bf16
    ignored = {f.field: f.note for f in cfg.ignored}
    assert "runs False" in ignored["zero_optimization.overlap_comm"]
    assert "100000" in ignored["zero_optimization.stage3_param_persistence_threshold"]


def test_auto_values_read_as_not_said():
    cfg = read_config(CONFIGS / "accelerate_zero_stage3_config.json")
    assert "micro_batch" not in cfg.options and "bucket_mb" not in cfg.options
    assert cfg.options["precision"] == "bf16-mixed"  # fp16: bf16's bytes
    assert {"train_micro_batch_size_per_gpu", "zero_optimization.reduce_bucket_size"} <= {
        f.field for f in cfg.ignored if f.note.startswith("auto")
    }


def test_accelerate_counts_processes_over_all_machines(tmp_path):
    f = tmp_path / "a.yaml"
    f.write_text(
        "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n  gradient_accumulation_steps: 4\n"
        "num_machines: 2\nnum_processes: 16\nmixed_precision: 'no'\n"
    )
    cfg = read_config(f)
    assert cfg.strategy == "zero2"
    assert (cfg.options["nodes"], cfg.options["ranks_per_node"], cfg.options["grad_accum"]) == (2, 8, 4)
    assert cfg.options["precision"] == "fp32"
    f.write_text("distributed_type: MULTI_GPU\nnum_machines: 2\nnum_processes: 3\n")
    with pytest.raises(SpecError, match="num_processes"):
        read_config(f)


def test_hf_training_arguments_dump():
    cfg = read_config(CONFIGS / "hf_training_args_fsdp.json")
    assert cfg.format == "hf-trainer" and cfg.strategy == "fsdp_full_shard"
    assert (cfg.options["micro_batch"], cfg.options["grad_accum"], cfg.options["ckpt_freq"]) == (4, 8, 1)
    assert cfg.options["optimizer"] == "adamw-fused"


def _values(**kw):
    base = dict(
        model="qwen3-0.6b",
        platform="dgx-h100",
        nodes=4,
        ranks_per_node=None,
        seq_len=1024,
        micro_batch=None,
        grad_accum=None,
        global_batch=None,
        ckpt_freq="auto",
        precision="bf16-mixed",
        reduce_dtype=None,
        compile=False,
        compile_loss=False,
        optimizer="adamw",
        bucket_mb=None,
        loss="upcast",
    )
    return base | kw


def test_a_stated_value_against_a_flag_is_an_error_and_override_lets_the_flag_win():
    cfg = read_config(CONFIGS / "torchtitan_llama3_8b.toml")
    with pytest.raises(SpecError, match=r"training.local_batch_size = 1 .* contradicts --micro-batch 2"):
        configured(cfg, _values(micro_batch=2), {"micro_batch"}, override=False)
    merged, section = configured(cfg, _values(micro_batch=2), {"micro_batch"}, override=True)
    assert merged["micro_batch"] == 2 and merged["seq_len"] == 8192
    assert section["overridden"] == [
        {"field": "training.local_batch_size", "value": 1, "flag": "--micro-batch", "planned": 2, "default": False}
    ]
    merged, section = configured(cfg, _values(precision="fp32"), {"precision"}, override=False)  # a default
    assert merged["precision"] == "fp32" and section["overridden"][0]["default"] is True
    merged, _ = configured(cfg, _values(micro_batch=1), {"micro_batch"}, override=False)  # agreeing: fine
    assert merged["micro_batch"] == 1


def _plan_file(tmp_path, config: str | None = None, **kw) -> Path:
    p = plan_for_config(CONFIGS / config, **kw) if config is not None else plan(**_values(**kw))
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(plan_dict(p), default=str))
    return f


def test_plan_for_config_is_plan_with_the_configs_keywords():
    p = plan_for_config(CONFIGS / "accelerate_fsdp.yaml", model="qwen3-1.7b", platform="dgx-h100")
    q = plan("qwen3-1.7b", platform="dgx-h100", nodes=1, ranks_per_node=2, ckpt_freq=0, precision="bf16-mixed")
    assert plan_dict(q)["options"] == plan_dict(p)["options"]
    assert p.config["strategy_option"]["strategy"] == "fsdp_full_shard"
    with pytest.raises(SpecError, match="contradicts --precision"):
        plan_for_config(CONFIGS / "accelerate_fsdp.yaml", model="qwen3-1.7b", precision="fp32")


class _DataParallel:  # DeepSpeed's mpu interface: the data-parallel world the file is sized for
    def __init__(self, size):
        self.size = size

    def get_data_parallel_world_size(self):
        return self.size


def test_emitted_ds_config_reads_back_in_deepspeed_and_here(tmp_path):
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.config import DeepSpeedConfig

    plan_path = _plan_file(tmp_path, "deepspeed_zero3_bf16.json", model="qwen3-1.7b", platform="dgx-h100")
    out = framework_file(plan_path, "deepspeed")
    assert out.strategy == "zero3" and out.file.name == "ds_config.json"
    (tmp_path / "ds_config.json").write_text(out.file.text)
    ds = DeepSpeedConfig(json.loads(out.file.text), mpu=_DataParallel(8))
    again = read_config(tmp_path / "ds_config.json")
    assert (ds.zero_optimization_stage, ds.train_micro_batch_size_per_gpu, ds.gradient_accumulation_steps) == (
        3,
        again.options["micro_batch"],
        again.options["grad_accum"],
    )
    assert ds.zero_config.reduce_bucket_size == again.options["bucket_mb"] * 2**20 / 2 == 5e7
    assert ds.bfloat16_config.enabled and again.options["precision"] == "bf16-mixed"
    assert again.strategy == "zero3"


def test_ds_config_from_a_flags_plan_is_a_full_config(tmp_path):
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.config import DeepSpeedConfig

    plan_path = _plan_file(tmp_path, micro_batch=2, grad_accum=3, ckpt_freq=1)
    out = framework_file(plan_path, "deepspeed", "zero2")
    cfg = json.loads(out.file.text)
    ds = DeepSpeedConfig(cfg, mpu=_DataParallel(32))
    assert (ds.zero_optimization_stage, ds.train_micro_batch_size_per_gpu, ds.gradient_accumulation_steps) == (2, 2, 3)
    assert "from plan plan.json" in cfg["prism_strategy_plan"]


@functools.cache
def _load_config_manager():
    """torchtitan's ConfigManager without the package __init__ (it imports triton kernels); None
    when torchtitan or tyro is not installed."""
    spec = importlib.util.find_spec("torchtitan")
    if spec is None or importlib.util.find_spec("tyro") is None:
        return None
    if "torchtitan" not in sys.modules:
        pkg = types.ModuleType("torchtitan")
        pkg.__path__, pkg.__spec__ = list(spec.submodule_search_locations), spec
        sys.modules["torchtitan"] = pkg
    from torchtitan.config.manager import ConfigManager

    return ConfigManager


def _torchtitan_config_manager():
    manager = _load_config_manager()
    if manager is None:
        pytest.skip("torchtitan (and tyro) not installed: pip install torchtitan==0.2.2")
    return manager


def test_emitted_torchtitan_toml_reads_back_in_torchtitan_and_here(tmp_path):
    manager = _torchtitan_config_manager()
    plan_path = _plan_file(tmp_path, model="qwen3-8b", seq_len=4096, nodes=2)
    data = json.loads(plan_path.read_text())
    out = framework_file(plan_path, "torchtitan", "hsdp_shard_grad_op")
    f = tmp_path / out.file.name
    f.write_text(out.file.text)
    job = manager().parse_args(["--job.config_file", str(f)])
    ours = read_config(f)
    pick = next(o for o in data["options"] if o["strategy"] == "hsdp_shard_grad_op")
    assert ours.strategy == "hsdp_shard_grad_op" and ours.dp_degrees == (2, 8)
    assert (job.parallelism.data_parallel_replicate_degree, job.parallelism.data_parallel_shard_degree) == (2, 8)
    assert job.parallelism.fsdp_reshard_after_forward == "never"
    assert job.training.local_batch_size == ours.options["micro_batch"] == pick["micro_batch"]
    assert job.training.seq_len == ours.options["seq_len"] == 4096
    assert (job.model.name, job.model.flavor) == ("qwen3", "8B") and ours.options["model"] == "qwen3-8b"
    assert ours.options["ckpt_freq"] == pick["ckpt_freq"]


def test_torchtitan_parses_the_round_tripped_llama3_8b(tmp_path):
    manager = _torchtitan_config_manager()
    plan_path = _plan_file(tmp_path, "torchtitan_llama3_8b.toml")
    own = json.loads(plan_path.read_text())["inputs"]["config"]["strategy"]
    out = framework_file(plan_path, "torchtitan", strategy=own)  # the config's own strategy: nothing to change
    f = tmp_path / out.file.name
    f.write_text(out.file.text)
    job = manager().parse_args(["--job.config_file", str(f)])
    assert (job.training.local_batch_size, job.training.seq_len, job.activation_checkpoint.mode) == (
        1,
        8192,
        "selective",
    )
    assert load(f)[1] == load(CONFIGS / "torchtitan_llama3_8b.toml")[1]


def test_offloaded_host_memory_is_deepspeeds_own_estimate():
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    from prism_strategy.diagnose.framework_config_checks import host_bytes_per_node

    cfg = read_config(CONFIGS / "accelerate_zero_stage3_offload_config.json")
    assert cfg.offload == {"optimizer", "params"} and cfg.offload_engine == "deepspeed"
    params = 7_000_000_000
    for nodes in (1, 4):
        cpu, _, _ = estimate_zero3_model_states_mem_needs(params, 10**8, num_gpus_per_node=8, num_nodes=nodes)
        assert host_bytes_per_node(params, cfg, nodes, 8) == pytest.approx(cpu, rel=1e-9)
    zero2 = dataclasses.replace(cfg, strategy="zero2", offload=frozenset({"optimizer"}))
    cpu, _ = estimate_zero2_model_states_mem_needs(params, num_gpus_per_node=8, num_nodes=2)
    assert host_bytes_per_node(params, zero2, 2, 8) == pytest.approx(cpu, rel=1e-9)

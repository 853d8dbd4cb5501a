"""`plan --from FILE` and `emit --format ... --from-plan`: the projects' own example configs
(tests/fixtures/configs/SOURCE.md) plan the same scenario as the equivalent flags, and what emit
writes reads back to the same plan."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prism_strategy.cli import app

runner = CliRunner()
CONFIGS = Path(__file__).parents[1] / "fixtures" / "configs"


def _plan(*args: str) -> dict:
    r = runner.invoke(app, ["plan", *args, "--json"])
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def _error(*args: str) -> str:
    r = runner.invoke(app, list(args))
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.output, r.output
    return lines[0]


def _same_scenario(from_config: dict, from_flags: dict) -> None:
    section = from_config["inputs"].pop("config")
    assert from_config["inputs"] == from_flags["inputs"]
    assert from_config["options"] == from_flags["options"]
    assert from_config["recommended"] == from_flags["recommended"]
    assert section["used"] and all(f["note"] for f in section["ignored"])


TORCHTITAN_FLAGS = [
    *("--model", "llama-3.1-8b", "--platform", "dgx-h100", "--nodes", "4", "--seq-len", "8192"),
    *("--micro-batch", "1", "--grad-accum", "1", "--ckpt-freq", "sac", "--precision", "bf16-mixed"),
    *("--reduce-dtype", "fp32", "--optimizer", "adamw-fused", "--no-compile"),
]


def test_torchtitan_llama3_8b_plans_as_its_flags():
    config = _plan("--from", str(CONFIGS / "torchtitan_llama3_8b.toml"), "--platform", "dgx-h100", "--nodes", "4")
    assert config["inputs"]["config"]["strategy"] == "fsdp_full_shard"  # shard degree -1, replicate 1
    _same_scenario(config, _plan(*TORCHTITAN_FLAGS))


def test_deepspeed_zero3_example_plans_as_its_flags():
    args = ("--model", "qwen3-1.7b", "--platform", "dgx-h100")
    config = _plan("--from", str(CONFIGS / "deepspeed_zero3_bf16.json"), *args)
    section = config["inputs"]["config"]
    assert section["strategy"] == "zero3" and section["strategy_option"]["strategy"] == "zero3"
    ignored = {f["field"] for f in section["ignored"]}
    assert {"zero_optimization.overlap_comm", "zero_optimization.stage3_param_persistence_threshold"} <= ignored
    flags = ("--micro-batch", "4", "--grad-accum", "1", "--precision", "bf16-mixed", "--optimizer", "adamw")
    _same_scenario(config, _plan(*args, *flags, "--bucket-mb", str(5e7 * 2 / 2**20)))


def test_accelerate_fsdp_example_plans_as_its_flags():
    args = ("--model", "qwen3-1.7b", "--platform", "dgx-h100")
    config = _plan("--from", str(CONFIGS / "accelerate_fsdp.yaml"), *args)
    assert config["inputs"]["config"]["strategy"] == "fsdp_full_shard"
    flags = ("--nodes", "1", "--ranks-per-node", "2", "--ckpt-freq", "0", "--precision", "bf16-mixed")
    _same_scenario(config, _plan(*args, *flags))


def test_a_contradicting_flag_is_an_error_unless_override():
    path = str(CONFIGS / "torchtitan_llama3_8b.toml")
    line = _error("plan", "--from", path, "--platform", "dgx-h100", "--nodes", "4", "--seq-len", "4096")
    assert "training.seq_len" in line and "--seq-len 4096" in line and "--override" in line
    p = _plan("--from", path, "--platform", "dgx-h100", "--nodes", "4", "--seq-len", "4096", "--override")
    assert p["inputs"]["seq_len"] == 4096
    assert p["inputs"]["config"]["overridden"][0]["field"] == "training.seq_len"


def test_a_framework_default_yields_to_a_flag():
    """llama3_8b.toml leaves [compile] components and training.dtype to JobConfig's defaults."""
    path = str(CONFIGS / "torchtitan_llama3_8b.toml")
    p = _plan("--from", path, "--platform", "dgx-h100", "--nodes", "4", "--precision", "bf16-pure")
    assert p["inputs"]["precision"] == "bf16-pure"


def test_non_data_parallel_degrees_exit_2_naming_them():
    line = _error("plan", "--from", str(CONFIGS / "torchtitan_llama3_70b.toml"), "--model", "llama-3.1-8b")
    assert "tensor_parallel_degree = 8" in line and "set tensor_parallel_degree to 1" in line


def test_dp_degrees_that_do_not_fit_the_layout_exit_2(tmp_path):
    text = (CONFIGS / "torchtitan_llama3_8b.toml").read_text()
    f = tmp_path / "hsdp.toml"
    f.write_text(text.replace("data_parallel_replicate_degree = 1", "data_parallel_replicate_degree = 3"))
    line = _error("plan", "--from", str(f), "--platform", "dgx-h100", "--nodes", "4")
    assert "data_parallel_replicate_degree" in line and "--nodes 4" in line


@pytest.mark.parametrize(
    ("text", "name", "said"),
    [
        ('{"inputs": {}, "options": []}', "plan.json", "emit --from-plan"),
        ('{"model_type": "llama", "hidden_size": 8}', "config.json", "pass it as --model"),
        ("trainer:\n  devices: 8\nmodel:\n  lr: 1\n", "lightning.yaml", "Lightning"),
        ('strategy = "ddp"\nckpt_freq = 1\n', "strategy.toml", "strategy.toml"),
        ('{"lr": 1}', "x.json", "no field says which framework"),
        ("[parallelism\n", "bad.toml", "not valid TOML"),
        ('{"zero_optimization": {"stage": "three"}}', "ds.json", "zero_optimization.stage"),
        ("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: HALF\n", "a.yaml", "fsdp_sharding_strategy"),
    ],
)
def test_unknown_malformed_or_other_framework_configs_exit_2(tmp_path, text, name, said):
    f = tmp_path / name
    f.write_text(text)
    line = _error("plan", "--from", str(f), "--model", "qwen3-0.6b")
    assert str(f) in line and said in line


def test_a_config_without_a_model_needs_model():
    line = _error("plan", "--from", str(CONFIGS / "deepspeed_zero3_bf16.json"))
    assert "names no model" in line and "--model" in line


def test_accelerate_deepspeed_file_that_is_not_there_names_the_field():
    line = _error("plan", "--from", str(CONFIGS / "accelerate_deepspeed.yaml"), "--model", "qwen3-0.6b")
    assert "deepspeed_config.deepspeed_config_file" in line and "no such file" in line


def _emit_and_read_back(tmp_path, plan: dict, fmt: str, plan_args: tuple[str, ...]) -> tuple[Path, dict]:
    """Emit the config's own strategy (the plan may pick another) and plan from the file emitted."""
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan))
    out = tmp_path / f"out-{fmt}"
    own = plan["inputs"]["config"]["strategy"]
    r = runner.invoke(
        app, ["emit", "--from-plan", str(plan_file), "--format", fmt, "--strategy", own, "--out", str(out)]
    )
    assert r.exit_code == 0, r.output
    name = {"deepspeed": "ds_config.json"}.get(fmt, Path(plan["inputs"]["config"]["file"]).name)
    again = _plan("--from", str(out / name), *plan_args)
    return out / name, again


@pytest.mark.parametrize(
    ("fixture", "fmt", "args"),
    [
        ("torchtitan_llama3_8b.toml", "torchtitan", ("--platform", "dgx-h100", "--nodes", "4")),
        ("deepspeed_zero3_bf16.json", "deepspeed", ("--model", "qwen3-1.7b", "--platform", "dgx-h100")),
        ("accelerate_fsdp.yaml", "accelerate", ("--model", "qwen3-1.7b", "--platform", "dgx-h100")),
    ],
)
def test_round_trip_keeps_every_field_and_plans_the_same(tmp_path, fixture, fmt, args):
    from prism_strategy.inputs.frameworks.base import load

    first = _plan("--from", str(CONFIGS / fixture), *args)
    written, again = _emit_and_read_back(tmp_path, first, fmt, args)
    _, original = load(CONFIGS / fixture)
    _, back = load(written)
    back.pop("prism_strategy_plan", None)
    assert back == original  # the plan changed nothing these configs fix: every field kept
    first["inputs"].pop("config"), again["inputs"].pop("config")
    assert again["inputs"] == first["inputs"] and again["options"] == first["options"]
    assert "plan.json" in written.read_text()  # the file says which plan wrote it


def test_accelerate_gets_the_plans_pick_and_keeps_the_rest(tmp_path):
    """Two ranks of qwen3-1.7b: the plan picks ddp over the YAML's FSDP; the file emitted says
    MULTI_GPU, drops fsdp_config and keeps every other key."""
    args = ("--model", "qwen3-1.7b", "--platform", "dgx-h100")
    first = _plan("--from", str(CONFIGS / "accelerate_fsdp.yaml"), *args)
    assert first["recommended"] == "ddp"
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(first))
    out = tmp_path / "acc"
    r = runner.invoke(app, ["emit", "--from-plan", str(plan_file), "--format", "accelerate", "--out", str(out)])
    assert r.exit_code == 0, r.output
    import yaml

    back = yaml.safe_load((out / "accelerate_fsdp.yaml").read_text())
    original = yaml.safe_load((CONFIGS / "accelerate_fsdp.yaml").read_text())
    assert back.pop("distributed_type") == "MULTI_GPU" and "fsdp_config" not in back
    assert back == {k: v for k, v in original.items() if k not in ("distributed_type", "fsdp_config")}
    again = _plan("--from", str(out / "accelerate_fsdp.yaml"), *args)
    assert again["inputs"]["config"]["strategy"] == "ddp"


def test_emit_writes_the_plans_pick_where_it_differs(tmp_path):
    """A plan from flags (checkpointing searched): the torchtitan and Accelerate files carry its
    pick, and reading them back plans that pick with it fixed."""
    args = ("--model", "qwen3-8b", "--platform", "dgx-h100", "--nodes", "2", "--seq-len", "4096")
    first = _plan(*args)
    pick = next(o for o in first["options"] if o["strategy"] == first["recommended"])
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(first))
    out = tmp_path / "tt"
    r = runner.invoke(app, ["emit", "--from-plan", str(plan_file), "--format", "torchtitan", "--out", str(out)])
    assert r.exit_code == 0, r.output
    again = _plan("--from", str(out / "torchtitan.toml"), "--platform", "dgx-h100", "--nodes", "2")
    assert again["inputs"]["config"]["strategy"] == first["recommended"]
    assert (again["inputs"]["micro_batch"], again["inputs"]["ckpt_freq"]) == (pick["micro_batch"], pick["ckpt_freq"])
    assert again["inputs"]["seq_len"] == 4096


def test_format_that_cannot_express_the_strategy_exits_2(tmp_path):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(_plan("--model", "qwen3-0.6b", "--platform", "dgx-h100")))
    line = _error(
        "emit",
        "--from-plan",
        str(plan_file),
        "--format",
        "torchtitan",
        "--strategy",
        "zero2",
        "--out",
        str(tmp_path / "o"),
    )
    assert "zero2" in line and "--strategy" in line
    assert not (tmp_path / "o").exists()
    line = _error(
        "emit", "--format", "deepspeed", "--strategy", "zero2", "--platform", "aurora", "--out", str(tmp_path / "o")
    )
    assert "--from-plan" in line


def _doctor(*args: str) -> tuple[int, list[dict]]:
    r = runner.invoke(app, ["doctor", *args, "--json"])
    assert r.exit_code in (0, 1), r.output
    return r.exit_code, json.loads(r.stdout)["findings"]


def test_doctor_config_applies_the_rules_to_what_the_config_says(tmp_path):
    ds = json.loads((CONFIGS / "deepspeed_zero3_bf16.json").read_text())
    code, found = _doctor(
        "--config", str(CONFIGS / "deepspeed_zero3_bf16.json"), "--model", "qwen3-1.7b", "--platform", "dgx-h100"
    )
    assert (code, found) == (0, [])  # persistence 0: nothing kept whole; micro-batch 4 fits
    ds["zero_optimization"]["stage3_param_persistence_threshold"] = 1e9
    ds["compile"] = {"enabled": True}
    (tmp_path / "ds.json").write_text(json.dumps(ds, indent=1))
    code, found = _doctor("--config", str(tmp_path / "ds.json"), "--model", "qwen3-1.7b", "--platform", "dgx-h100")
    assert code == 1 and {f["rule"] for f in found} == {"deepspeed-compile", "zero3-persistence-keeps-params-gathered"}


def test_doctor_config_flags_a_micro_batch_the_plan_says_does_not_fit(tmp_path):
    text = (CONFIGS / "torchtitan_llama3_8b.toml").read_text().replace("local_batch_size = 1", "local_batch_size = 64")
    (tmp_path / "big.toml").write_text(text)
    code, found = _doctor("--config", str(tmp_path / "big.toml"), "--platform", "dgx-h100", "--nodes", "4")
    assert code == 1 and [f["rule"] for f in found] == ["config-micro-batch-does-not-fit"]
    assert "local_batch_size" in found[0]["message"] and found[0]["line"] > 1
    code, found = _doctor(
        "--config", str(CONFIGS / "torchtitan_llama3_8b.toml"), "--platform", "dgx-h100", "--nodes", "4"
    )
    assert (code, found) == (0, [])


def test_doctor_config_root_only_wrap(tmp_path):
    f = tmp_path / "nowrap.yaml"
    f.write_text(
        "distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: NO_WRAP\n"
        "  fsdp_sharding_strategy: SHARD_GRAD_OP\nnum_processes: 8\n"
    )
    _, found = _doctor("--config", str(f))
    assert [x["rule"] for x in found] == ["fsdp-root-only-wrap"] and found[0]["line"] == 3


def test_doctor_config_bad_input_names_the_flag():
    line = _error("doctor", "--config", str(CONFIGS / "torchtitan_llama3_70b.toml"))
    assert line.startswith("error: --config ") and "tensor_parallel_degree" in line


def test_doctor_config_offload_against_host_memory():
    """Accelerate's ZeRO-3 offload template with Mixtral 8x7B: one Polaris node's 512 GB cannot
    hold DeepSpeed's estimate of the offloaded states; four nodes can."""
    path = str(CONFIGS / "accelerate_zero_stage3_offload_config.json")
    code, found = _doctor("--config", path, "--model", "mixtral-8x7b", "--platform", "polaris")
    assert code == 1 and [f["rule"] for f in found] == ["offload-exceeds-host-memory"]
    assert "polaris has 512 GiB" in found[0]["message"]
    code, found = _doctor("--config", path, "--model", "mixtral-8x7b", "--platform", "polaris", "--nodes", "4")
    assert (code, found) == (0, [])


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        ("empty.toml", b"", "no field says which framework"),
        ("bin.json", b"\x00\x01\x02zero_optimization", "binary"),
        ("list.json", b"[1, 2]", "a JSON list"),
        ("tt.toml", b'[training]\nseq_len = "long"\n[parallelism]\n', "training.seq_len"),
        ("tt2.toml", b'[activation_checkpoint]\nmode = "some"\n', "activation_checkpoint.mode"),
        ("tt3.toml", b"training = 3\n[parallelism]\n", "training"),
        ("acc.yaml", b"distributed_type: MULTI_GPU\nnum_processes: -3\n", "num_processes"),
        ("acc2.yaml", b"distributed_type: XLA\n", "distributed_type"),
        ("ds.json", b'{"train_micro_batch_size_per_gpu": 0}', "train_micro_batch_size_per_gpu"),
        (
            "ds2.json",
            b'{"zero_optimization": {"stage": 3}, "bf16": {"enabled": true}, "fp16": {"enabled": true}}',
            "bf16/fp16",
        ),
        ("hf.json", b'{"output_dir": "o", "per_device_train_batch_size": "x"}', "per_device_train_batch_size"),
        ("hf2.json", b'{"output_dir": "o", "per_device_train_batch_size": 2, "fsdp": "auto_wrap"}', "fsdp"),
        (
            "hf3.json",
            b'{"output_dir": "o", "per_device_train_batch_size": 2, "parallelism_config": {"tp_size": 4}}',
            "parallelism_config.tp_size = 4",
        ),
    ],
)
def test_malformed_fields_exit_2_naming_file_and_field(tmp_path, name, content, said):
    f = tmp_path / name
    f.write_bytes(content)
    line = _error("plan", "--from", str(f), "--model", "qwen3-0.6b")
    assert str(f) in line and said in line


def test_a_folder_or_a_missing_file_exits_2(tmp_path):
    assert "cannot read it" in _error("plan", "--from", str(tmp_path), "--model", "qwen3-0.6b")
    assert "no such file" in _error("plan", "--from", str(tmp_path / "nope.toml"), "--model", "qwen3-0.6b")
    assert "--override needs --from" in _error("plan", "--override")


def test_accelerate_reads_its_deepspeed_file(tmp_path):
    (tmp_path / "ds.json").write_text((CONFIGS / "deepspeed_zero3_bf16.json").read_text())
    (tmp_path / "acc.yaml").write_text(
        "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: "
        "ds.json\n  zero3_init_flag: true\nnum_machines: 2\nnum_processes: 16\n"
    )
    p = _plan("--from", str(tmp_path / "acc.yaml"), "--model", "qwen3-1.7b", "--platform", "dgx-h100")
    section = p["inputs"]["config"]
    assert section["strategy"] == "zero3" and section["format"] == "accelerate"
    assert (p["inputs"]["nodes"], p["inputs"]["ranks_per_node"], p["inputs"]["micro_batch"]) == (2, 8, 4)
    assert "ds.json:zero_optimization.overlap_comm" in {f["field"] for f in section["ignored"]}


@pytest.mark.parametrize(
    ("fixture", "named"),
    [
        ("accelerate_tp_hsdp.yaml", "parallelism_config_tp_size = 2"),
        ("accelerate_cp.yaml", "parallelism_config_cp_size = 8"),
    ],
)
def test_accelerate_tensor_or_context_parallel_exits_2_naming_them(fixture, named):
    line = _error("plan", "--from", str(CONFIGS / fixture), "--model", "qwen3-0.6b")
    assert named in line and "to 1" in line


def test_accelerate_parallelism_config_hsdp_and_its_mesh_note(tmp_path):
    text = (CONFIGS / "accelerate_tp_hsdp.yaml").read_text()
    f = tmp_path / "hsdp.yaml"
    f.write_text(text.replace("parallelism_config_tp_size: 2", "parallelism_config_tp_size: 1"))
    line = _error("plan", "--from", str(f), "--model", "qwen3-0.6b", "--platform", "dgx-h100")
    assert "2 x 2 = 4 does not fit" in line and "8 ranks" in line  # num_processes 8 on one machine
    f.write_text(
        text.replace("parallelism_config_tp_size: 2", "parallelism_config_tp_size: 1").replace(
            "num_processes: 8", "num_processes: 4"
        )
    )
    section = _plan("--from", str(f), "--model", "qwen3-0.6b", "--platform", "dgx-h100")["inputs"]["config"]
    assert section["strategy"] == "hsdp_full_shard" and "replicates over nodes" in section["notes"][0]


def test_plan_from_lists_what_it_assumed(tmp_path):
    # accelerate's own fp8 template: no sequence length (the data's) and fp8, which is not modelled
    fixture = Path(__file__).parents[1] / "fixtures" / "configs" / "accelerate_fp8.yaml"
    args = ["plan", "--from", str(fixture), "--model", "qwen3-0.6b", "--platform", "dgx-h100"]
    r = CliRunner().invoke(app, args, terminal_width=100)
    assert r.exit_code == 0, r.output
    assert "assumed seq_len: not in the file" in r.output and "pass" in r.output and "--seq-len" in r.output
    assert "assumed precision: the file says fp8" in r.output
    r = CliRunner().invoke(app, [*args, "--seq-len", "2048", "--json"])
    section = json.loads(r.output)["inputs"]["config"]
    assert not [a for a in section["assumed"] if a.startswith("seq_len")]
    assert json.loads(r.output)["inputs"]["ranks_per_node"] == 1


LORA_QV_R64 = 32 * 2 * 64 * (4096 + 4096)
"""LLaMA-2-7B, LoRA r=64 on q_proj and v_proj: r x (in + out) per adapted Linear, 2 per block, 32 blocks."""


def test_plan_from_a_peft_adapter_config_trains_only_the_adapters():
    fixture = Path(__file__).parents[1] / "fixtures" / "configs" / "peft_adapter_config_llama2_7b.json"
    args = ["plan", "--from", str(fixture), "--model", "llama-2-7b", "--platform", "dgx-a100-40", "--seq-len", "1024"]
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    inputs = json.loads(r.output)["inputs"]
    assert inputs["lora"]["params"] == LORA_QV_R64 and inputs["params"]["trainable"] == LORA_QV_R64
    assert inputs["lora"]["targets"] == ["q_proj", "v_proj"]
    # the same adapters given as --lora plan the same
    r2 = CliRunner().invoke(app, ["plan", *args[3:], "--lora", str(fixture), "--json"])
    assert json.loads(r2.output)["options"] == json.loads(r.output)["options"]
    human = CliRunner().invoke(app, args, terminal_width=100).output
    assert "LoRA r=64, base frozen" in human


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"peft_type": "LORA", "r": 0, "target_modules": ["q_proj"]}', "LoRA rank r must be an integer >= 1, got 0"),
        ('{"peft_type": "LORA", "r": 8, "target_modules": ["q_proj"', "not valid JSON"),
    ],
)
def test_a_bad_adapter_config_exits_2_with_one_line(tmp_path, text, says):
    (tmp_path / "adapter_config.json").write_text(text)
    for how in (["--from"], ["--lora"]):
        r = CliRunner().invoke(
            app,
            ["plan", *how, str(tmp_path / "adapter_config.json"), "--model", "llama-2-7b", "--platform", "dgx-a100-40"],
        )
        assert r.exit_code == 2 and says in r.output, r.output
        assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output

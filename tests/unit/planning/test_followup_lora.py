"""A LoRA plan's printed follow-up commands carry its adapters (planning/followup.py), so bench and
commbench measure the run that was planned, not full training; adapters with no file to pass (a
dict, a script's LoraConfig) leave --lora out."""

import shlex
from pathlib import Path

from typer.testing import CliRunner

from prism_strategy.cli import app
from prism_strategy.flags import scenario_from_flags
from prism_strategy.planning.followup import bench_command, commbench_command

ADAPTER = Path(__file__).parents[2] / "fixtures" / "configs" / "peft_adapter_config_llama2_7b.json"
FLAGS = dict(platform="cpu", nodes=2, ranks_per_node=2, seq_len=32, micro_batch=2)


def _lora_of(command: str) -> str | None:
    argv = shlex.split(command)
    return argv[argv.index("--lora") + 1] if "--lora" in argv else None


def test_adapters_read_from_a_file_are_passed_to_bench_and_commbench():
    sc = scenario_from_flags("tiny-llama", lora=str(ADAPTER), **FLAGS)
    for command in (bench_command(sc, ["ddp"]), commbench_command(sc, ["ddp"])):
        assert _lora_of(command) == str(ADAPTER.resolve()), command


def test_adapters_with_no_file_leave_lora_out():
    sc = scenario_from_flags("tiny-llama", lora={"r": 4, "target_modules": ["q_proj"]}, **FLAGS)
    assert _lora_of(bench_command(sc, ["ddp"])) is None


def test_commbench_takes_lora_and_refuses_a_bad_one_on_one_line(tmp_path):
    bad = tmp_path / "adapter_config.json"
    bad.write_text('{"r": 0, "target_modules": ["q_proj"]}')
    res = CliRunner().invoke(app, ["commbench", "--model", "tiny-llama", "--lora", str(bad), "--nproc", "2"])
    assert res.exit_code == 2 and "LoRA rank r must be an integer >= 1, got 0" in res.output
    assert "Traceback" not in res.output

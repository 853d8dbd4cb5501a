"""bench and census take plan's --lora: a LoRA rank of 0, a malformed adapter config or a missing
peft exit 2 with one line before any rank starts (cli/bench_inputs.py bench_scenario)."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from prism_strategy.cli import app

runner = CliRunner()


def _adapter(tmp_path, body) -> str:
    path = tmp_path / "adapter_config.json"
    path.write_text(body if isinstance(body, str) else json.dumps(body))
    return str(path)


@pytest.mark.parametrize("command", ["bench", "census"])
@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"peft_type": "LORA", "r": 0, "target_modules": ["q_proj"]}, "LoRA rank r must be an integer >= 1"),
        ({"peft_type": "LORA", "target_modules": ["q_proj"]}, "no `r`"),
        ('{"r": 4,', "LoRA config"),
        ({"r": 4, "target_modules": ["nope_proj"]}, "nope_proj"),
    ],
)
def test_a_bad_lora_config_exits_2_on_one_line(tmp_path, command, body, said):
    r = runner.invoke(app, [command, "--lora", _adapter(tmp_path, body), "--nproc", "2"])
    assert r.exit_code == 2, r.output
    assert said in r.output and len(r.output.strip().splitlines()) == 1, r.output


@pytest.mark.parametrize("command", ["bench", "census"])
def test_lora_without_peft_exits_2_naming_pip_install_peft(tmp_path, monkeypatch, command):
    monkeypatch.setitem(sys.modules, "peft", None)  # importlib.util.find_spec("peft") is None, as when absent
    adapter = _adapter(tmp_path, {"r": 4, "target_modules": ["q_proj", "v_proj"]})
    r = runner.invoke(app, [command, "--lora", adapter, "--nproc", "2"])
    assert r.exit_code == 2, r.output
    assert "pip install peft" in r.output and len(r.output.strip().splitlines()) == 1, r.output

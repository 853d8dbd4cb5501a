"""Issue #26 finding 3: every command a plan prints for the user to run next runs as printed (at
small scale: tiny-llama, 2 x 2 gloo ranks) and exits 0 or 1; it carries the plan's own inputs (a
config.json model by its path, the vision encoder and --mode, the platform as given)."""

from __future__ import annotations

import json
import re
import shlex

import pytest
from typer.testing import CliRunner

from prism_strategy.cli import app

pytestmark = pytest.mark.distributed
COMMAND = re.compile(r"prism-strategy (?:commbench|bench) .*?(?= \(emit writes|; |$)")
SIGLIP = "tests/fixtures/census/tiny-siglip.toml"


def _printed(args: list[str]) -> list[str]:
    res = CliRunner().invoke(app, ["plan", *args, "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    return [m.group(0) for line in d["reasons"] + d["warnings"] for m in COMMAND.finditer(line)]


def _run(command: str) -> tuple[int, dict]:
    argv = shlex.split(command)
    assert argv[0] == "prism-strategy"
    res = CliRunner().invoke(app, [*argv[1:], "--json"])
    assert res.exit_code in (0, 1), f"{command}\n{res.output}"
    return res.exit_code, json.loads(res.stdout)


@pytest.fixture(autouse=True)
def _own_store(tmp_path, monkeypatch):
    monkeypatch.setenv("PRISM_STRATEGY_DB", str(tmp_path / "results.db"))


SMALL = ["--platform", "cpu", "--ranks-per-node", "2", "--seq-len", "32", "--micro-batch", "2"]


def test_plan_commbench_line_for_a_projector_vlm_runs_and_replays_only_the_projector():
    commands = _printed(["--model", "tiny-llama", "--vision", SIGLIP, "--mode", "projector", "--nodes", "2", *SMALL])
    commbench = [c for c in commands if c.startswith("prism-strategy commbench")]
    assert commbench, commands
    assert f"--vision {SIGLIP} --mode projector" in commbench[0]
    rc, report = _run(commbench[0])
    assert rc == 0, report
    from prism_strategy.specs.presets import load_model

    # projector-only: what is all-reduced is the projector's gradients, far less than the LLM's
    llm_bytes = load_model("tiny-llama").total_params * 4
    ddp = next(s for s in report["strategies"] if s["strategy"] == "ddp")
    grads = sum(k["bytes_per_call"] * k["calls"] for k in ddp["collectives"] if k["op"] == "all_reduce")
    assert 0 < grads < llm_bytes / 4


def test_plan_bench_line_on_one_node_runs_with_a_config_json_model(tmp_path):
    folder = tmp_path / "tiny model"  # a space: the printed command quotes it
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "vocab_size": 256,
                "max_position_embeddings": 128,
            }
        )
    )
    commands = _printed(["--model", str(folder), "--nodes", "1", *SMALL])
    assert commands and all(shlex.split(c)[3] == str(folder) for c in commands), commands
    for c in commands:
        _run(c)


PROFILE = """name = "test-collectives"
version = "1"
description = "collective variables for the follow-up test"
source = "tests"
unset = ["NCCL_DEBUG"]

[[var]]
name = "CCL_ALLREDUCE"
value = "ring"
why = "a oneCCL choice gloo does not read"
source = "tests"
"""


def test_plan_commbench_line_carries_the_plans_env_profile_and_the_ranks_run_under_it(tmp_path, monkeypatch):
    """Issue 26, what is left, item 2: the printed commbench carries plan's --env-profile; its ranks
    get the profile's variables (and lose its unset ones), which are recorded with the curves and
    said to be inert under gloo."""
    profile = tmp_path / "profile.toml"
    profile.write_text(PROFILE)
    monkeypatch.setenv("NCCL_DEBUG", "INFO")  # the profile removes it from the ranks' environment
    commands = _printed(["--model", "tiny-llama", "--nodes", "2", *SMALL, "--env-profile", str(profile)])
    commbench = [c for c in commands if c.startswith("prism-strategy commbench")]
    assert commbench and all(f"--env-profile {profile.resolve()}" in c for c in commands), commands
    rc, report = _run(commbench[0])
    assert rc == 0, report
    env = report["environment"]
    assert env["variables"] == {"CCL_ALLREDUCE": "ring"} and env["inert"] == ["CCL_ALLREDUCE"]
    seen = report["fingerprint"]["env"]  # what rank 0's process had
    assert seen.get("CCL_ALLREDUCE") == "ring" and "NCCL_DEBUG" not in seen
    assert report["fingerprint"]["env_profile"] == str(profile.resolve())


def test_plan_bench_line_for_bf16_pure_runs_bf16_pure():
    """Item 1: the one-node bench line keeps --precision bf16-pure (bench runs it for real)."""
    commands = _printed(["--model", "tiny-llama", "--nodes", "1", *SMALL, "--precision", "bf16-pure"])
    bench = [c for c in commands if c.startswith("prism-strategy bench")]
    assert bench and all("--precision bf16-pure" in c for c in bench), commands
    rc, report = _run(bench[0])
    assert rc == 0 and all(r["config"]["precision"] == "bf16-pure" for r in report), report

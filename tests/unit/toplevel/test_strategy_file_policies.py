"""strategy.toml read in the Scenario's terms (wrap_config.py WrapConfig.policies / RunPolicies):
a file emitted from a plan reads back as the plan's own policies, and the CLI flags and the file
describe a run the same way."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from prism_strategy.cli.app import app
from prism_strategy.flags import scenario_from_flags
from prism_strategy.runtime.strategy_file import read_strategy_file
from prism_strategy.specs.cluster import Layout
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.policies import MemoryPolicy
from prism_strategy.wrap_config import RunPolicies, WrapConfig

FLAGS = dict(model="tiny-llama", platform="cpu", nodes=2, ranks_per_node=2, seq_len=64)


@pytest.mark.parametrize(
    "run",
    [
        dict(ckpt_freq=1, precision="fp32", loss="chunked"),
        dict(ckpt_freq="sac", precision="bf16-mixed", compile=True),
    ],
)
def test_a_strategy_file_emitted_from_a_plan_reads_back_as_the_plan_s_policies(tmp_path, run):
    argv = [f"--{k.replace('_', '-')}={v}" for k, v in (FLAGS | run).items() if not isinstance(v, bool)]
    argv += [f"--{k}" for k, v in run.items() if v is True]
    res = CliRunner().invoke(app, ["plan", *argv, "--json"])
    assert res.exit_code == 0, res.output
    (tmp_path / "plan.json").write_text(res.stdout)
    plan = json.loads(res.stdout)
    option = next(o for o in plan["options"] if o["strategy"] == plan["recommended"])
    out = tmp_path / "emitted"
    res = CliRunner().invoke(app, ["emit", "--from-plan", str(tmp_path / "plan.json"), "--out", str(out)])
    assert res.exit_code == 0, res.output

    read = read_strategy_file(out / "strategy.toml").policies
    sc = scenario_from_flags(FLAGS["model"], **{k: v for k, v in FLAGS.items() if k != "model"}, **run)
    assert read == RunPolicies.of(sc, micro_batch=option["micro_batch"], grad_accum=option["grad_accum"])
    assert read.layout == Layout(nodes=2, ranks_per_node=2) and read.memory.checkpointing == run["ckpt_freq"]


def test_policies_and_the_file_are_one_mapping():
    p = RunPolicies(
        precision="fp32",
        memory=MemoryPolicy(checkpointing=2, loss="fused", bucket_mb=50),
        micro_batch=3,
        grad_accum=4,
        layout=Layout(nodes=1, ranks_per_node=4),
    )
    cfg = WrapConfig.from_policies("ddp", p, static_graph=True)
    assert (cfg.mixed_precision, cfg.ckpt_freq, cfg.loss, cfg.bucket_mb, cfg.nodes) == (None, 2, "fused", 50, 1)
    assert WrapConfig.from_dict(_toml_dict(cfg.to_toml())).policies == p
    with pytest.raises(SpecError, match="auto is a plan search"):
        WrapConfig.from_policies("ddp", RunPolicies(memory=MemoryPolicy(checkpointing="auto")))


def _toml_dict(text: str) -> dict:
    import tomllib

    return tomllib.loads(text)

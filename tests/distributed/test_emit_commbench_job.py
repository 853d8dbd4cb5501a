"""Issue #26 finding 3, emit: the commbench job emitted from a plan replays THAT plan's model (not
a fixed example), with its sequence length and micro-batch, and its submit hint needs no model
typed in. The job's rank command runs as written: here under torchrun, 2 gloo ranks."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from _harness import base_env, free_port
from typer.testing import CliRunner

from prism_strategy.cli import app

pytestmark = pytest.mark.distributed


def _emit_from_plan(tmp_path, plan_args):
    res = CliRunner().invoke(app, ["plan", *plan_args, "--json"])
    assert res.exit_code == 0, res.output
    plan = tmp_path / "plan.json"
    plan.write_text(res.stdout)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["emit", "--from-plan", str(plan), "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    return out, json.loads(res.stdout)


def test_emitted_commbench_names_the_plans_model_and_its_rank_command_runs(tmp_path):
    args = ["--model", "tiny-llama", "--platform", "dgx-h100", "--nodes", "1", "--ranks-per-node", "2"]
    out, summary = _emit_from_plan(tmp_path, [*args, "--seq-len", "32", "--micro-batch", "2"])
    text = (out / "commbench.sbatch").read_text()
    assert "qwen3-8b" not in text and "qwen3-8b" not in json.dumps(summary)
    assert '[ -n "${PRISM_COMMBENCH_MODEL:-}" ] || PRISM_COMMBENCH_MODEL=tiny-llama' in text.splitlines()
    line = next(x.strip() for x in text.splitlines() if "prism_strategy.cli commbench --launched" in x)
    assert "--seq-len 32" in line and "--micro-batch 2" in line
    strategy = re.search(r"PRISM_COMMBENCH_STRATEGIES:-(\w+)", text).group(1)
    cmd = (
        line.removeprefix('exec "${PRISM_PYTHON:-python3}" -m prism_strategy.cli ')
        .replace('"$PRISM_COMMBENCH_MODEL"', "tiny-llama")
        .replace('"$PRISM_COMMBENCH_STRATEGIES"', strategy)
        .replace('"$3"', "2")
        .replace('"$4"', "2")
    )
    port, procs = free_port(), []
    for rank in range(2):  # what srun starts: one process per rank, the rendezvous in the environment
        env = base_env() | {
            "PRISM_STRATEGY_DB": str(tmp_path / "results.db"),
            **{"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"},
            **{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)},
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "prism_strategy.cli", *cmd.split()],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
        )
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode in (0, 1) for p in procs), [e[-3000:] for _, e in outs]
    report = json.loads(outs[0][0])  # rank 0 reports
    assert report["world"] == 2 and [s["strategy"] for s in report["strategies"]] == [strategy]

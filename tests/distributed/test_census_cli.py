"""`prism-strategy census --json` end to end: a real 2-rank launch, pinned JSON."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from prism_strategy.cli import app

pytestmark = pytest.mark.distributed


def test_census_json_is_pinned_and_fsdp_matches_its_model():
    res = CliRunner().invoke(
        app,
        [
            "census",
            "--model",
            "tiny-llama",
            "--strategies",
            "fsdp_shard_grad_op,fsdp_full_shard",
            "--nproc",
            "2",
            "--ranks-per-node",
            "2",
            "--seq-len",
            "16",
            "--json",
        ],
    )
    data = json.loads(res.stdout)
    assert set(data) == {"world", "strategies"} and data["world"] == 2
    assert [s["strategy"] for s in data["strategies"]] == ["fsdp_shard_grad_op", "fsdp_full_shard"]
    for s in data["strategies"]:
        assert set(s) == {"strategy", "ok", "bytes_error_pct", "collectives"}
        assert s["ok"] and s["bytes_error_pct"] <= 5, s
    # full_shard gathers the blocks again in backward: more all-gather calls than shard_grad_op
    gathers = [{c["op"]: c for c in s["collectives"]}["all_gather"] for s in data["strategies"]]
    assert gathers[1]["calls_recorded"] > gathers[0]["calls_recorded"] and gathers[0]["group_size"] == 2
    assert res.exit_code == 0, res.output

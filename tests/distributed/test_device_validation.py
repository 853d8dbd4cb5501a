"""benchmarks/device_validation.py on CPU at tiny sizes: the --quick matrix runs for real (a 1-rank
gloo process group in a child process), its markdown rows match the stored results, calibrate and
compare read those results, an out-of-memory row is recorded and the matrix goes on, a budget
stops cleanly, and bad input exits 2 with one line and writes nothing.

In distributed/ (issue 29 item 7): each run is a child process that starts a gloo group and runs a
benchmark matrix, minutes on a loaded 2-core machine; KIT_TIMEOUT_S is a hang guard (4x the
240 s that a fresh-clone `make test` beside other work ran past), not a speed bound."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prism_strategy.bench.results.store import Store
from prism_strategy.cli import app
from prism_strategy.inputs.stored import row_values
from prism_strategy.specs.cluster import GiB
from prism_strategy.specs.presets import platform_names

pytestmark = pytest.mark.distributed
KIT_TIMEOUT_S = 960

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "device_validation.py"


def run_kit(tmp: Path, *args: str, timeout: int = KIT_TIMEOUT_S) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--platform",
        "cpu",
        "--device",
        "cpu",
        "--db",
        str(tmp / "r.db"),
        "--out-dir",
        str(tmp / "out"),
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def load_kit():
    spec = importlib.util.spec_from_file_location("device_validation", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def table_rows(out_dir: Path) -> list[list[str]]:
    files = sorted(out_dir.iterdir())
    assert [f.name for f in files if not re.fullmatch(r"cpu-\d{4}-\d{2}-\d{2}\.md", f.name)] == []
    assert len(files) == 1
    lines = [ln for ln in files[0].read_text().splitlines() if ln.startswith("| tiny-llama")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("quick")
    proc = run_kit(tmp, "--quick")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    """A 3.5 MiB CPU memory limit: fsdp_shard_grad_op at micro-batch 2 (predicted ~4 MiB) does not fit."""
    tmp = tmp_path_factory.mktemp("limited")
    proc = run_kit(tmp, "--quick", "--memory-limit-gib", str(3.5 / 1024))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp


def test_quick_rows_match_the_store(quick):
    rows = table_rows(quick / "out")
    stored = Store(quick / "r.db").query()
    assert len(rows) == len(stored) == 3
    assert {(r[1], r[2], r[3]) for r in rows} == {
        ("ddp", "1", "0"),
        ("fsdp_full_shard", "2", "1"),
        ("fsdp_shard_grad_op", "2", "0"),
    }
    by_key = {
        (r.strategy, str(row_values(r.config)["micro_batch"]), str(row_values(r.config)["ckpt_freq"])): r
        for r in stored
    }
    for model, strategy, mb, ckpt, probe, predicted, status, a_pred, a_meas, _, reserved, t_pred, t_meas, *_ in rows:
        r = by_key[(strategy, mb, ckpt)]
        assert (r.kind, r.status, r.config["suite"], row_values(r.config)["nproc"], r.platform) == (
            "bench",
            "ok",
            "device_validation",
            1,
            "cpu",
        )
        assert status == "ok" and predicted == "fits" and probe == "-" and reserved == "n/a"
        m, p = r.measured, r.predicted
        assert m["step_time_s"] > 0 and m["peak_memory_bytes"] > 0 and m["peak_reserved_bytes"] is None
        assert float(a_meas) == pytest.approx(m["peak_memory_bytes"] / GiB, rel=1e-2)
        assert float(a_pred) == pytest.approx(p["allocated_bytes"] / GiB, rel=1e-2)
        assert float(t_meas) == pytest.approx(m["step_time_s"], abs=1e-3)
        assert float(t_pred) == pytest.approx(p["step_time_s"], abs=1e-3)
        assert r.fingerprint["platform"] == "cpu" and r.fingerprint["backend"] == "gloo"


def test_quick_header_says_where_numbers_come_from(quick):
    text = next((quick / "out").iterdir()).read_text()
    assert "--platform cpu" in text and "torch " in text and "MemTracker" in text
    assert "planner.evaluate" in text and "3 of 3 rows run" in text


def test_calibrate_and_compare_read_the_results(quick, tmp_path):
    db = str(quick / "r.db")
    res = CliRunner().invoke(app, ["calibrate", "--platform", "cpu", "--db", db, "--out", str(tmp_path / "c.toml")])
    assert res.exit_code == 0, res.output
    assert "on 3 runs" in res.output
    res = CliRunner().invoke(app, ["compare", "--db", db, "--json", "--calibration", "none"])
    assert res.exit_code == 0, res.output
    assert res.output.count('"suite": "device_validation"') == 3


def test_out_of_memory_is_a_result_and_the_matrix_goes_on(limited):
    stored = Store(limited / "r.db").query()
    rows = table_rows(limited / "out")
    assert len(rows) == len(stored) == 4  # the three quick rows and one OOM probe
    status = {(r.strategy, row_values(r.config)["micro_batch"], r.config["probe"]): r for r in stored}
    oom = status[("fsdp_shard_grad_op", 2, "")]
    assert oom.status == "oom" and oom.measured["peak_memory_bytes"] > 3.5 * 2**20  # measured, not predicted
    probe = next(r for r in stored if r.config["probe"] == "oom")
    assert probe.strategy == "ddp" and probe.predicted["fits"] is False
    assert row_values(probe.config)["micro_batch"] > probe.predicted["max_micro_batch"]
    after = [r for r in stored if r.id > oom.id]
    assert after and all(r.status in ("ok", "oom") for r in after)  # rows after the OOM still ran
    cells = {r[1]: (r[5], r[6]) for r in rows if r[4] == "-"}
    fits = "fits" if oom.predicted["fits"] else "does not fit"
    assert cells["fsdp_shard_grad_op"] == (fits, "oom") and cells["ddp"] == ("fits", "ok")
    agree = sum((r.status == "ok") == r.predicted["fits"] for r in stored)
    text = next((limited / "out").iterdir()).read_text()
    assert f"the prediction agrees with the device on {agree} of 4 rows" in text


def test_budget_stops_cleanly(tmp_path):
    proc = run_kit(tmp_path, "--quick", "--budget-s", "0.001")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "budget: stopping before row 1" in proc.stdout
    rows = table_rows(tmp_path / "out")
    assert len(rows) == 3 and all(r[6] == "not run (budget)" for r in rows)
    assert Store(tmp_path / "r.db").query() == []


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--platform", "nope"], "unknown platform 'nope'"),
        (["--platform", "dgx-h200"], "is a cuda platform but the device is cpu"),
        (["--micro-batches", "1,x"], "--micro-batches must be a comma list"),
        (["--strategies", "hsdp_full_shard"], "needs several nodes"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, args, needle):
    """In-process: input is checked before any process group or file exists."""
    kit = load_kit()
    rc = kit.main(
        [
            "--platform",
            "cpu",
            "--device",
            "cpu",
            "--quick",
            "--db",
            str(tmp_path / "r.db"),
            "--out-dir",
            str(tmp_path / "out"),
            *args,
        ]
    )
    assert rc == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], captured.err
    assert captured.out == ""
    assert not (tmp_path / "out").exists() and not (tmp_path / "r.db").exists()


def test_bad_platform_command_exits_2(tmp_path):
    proc = run_kit(tmp_path, "--platform", "dgx-h2000")
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown platform 'dgx-h2000'")
    assert all(name in lines[0] for name in platform_names())  # the fix: the names that exist
    assert not (tmp_path / "out").exists()


def test_dry_run_lists_the_issue_17_moments_with_their_predictions(tmp_path):
    """--variants all: the optimizer step with foreach and fused, the chunked loss and sac, for ddp
    and fsdp_full_shard (the fused loss only where flash-attn is installed); nothing is run or written."""
    proc = run_kit(tmp_path, "--quick", "--dry-run", "--variants", "all", "--strategies", "ddp,fsdp_full_shard")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    for strategy in ("ddp", "fsdp_full_shard"):
        mine = [ln for ln in lines if f" {strategy} " in ln]
        assert any("adamw-foreach" in ln for ln in mine) and any("adamw-fused" in ln for ln in mine)
        assert any("loss chunked" in ln for ln in mine) and any("ckpt sac" in ln for ln in mine)
    assert not (tmp_path / "out").exists() and not (tmp_path / "r.db").exists()

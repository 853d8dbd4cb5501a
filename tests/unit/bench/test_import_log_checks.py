"""`results import` checks a log against the model it is told (issue 36): a torchtitan log whose
printed parameter count is not --model's is refused naming both (exit 2, nothing stored); the
accumulation and sequence length newer torchtitan prints are read; --ckpt-freq sac is accepted as
plan accepts it. Truth: torchtitan's own lines (torchtitan/trainer.py@b5bcd76: `Model llama3 8B
size: 8,030,261,248 total parameters`, `Trainer is initialized with ... gradient accumulation
steps A, maximum context length L, total steps S (warmup W)`) and the preset's count (Llama 3.1 8B:
8,030,261,248, HF config)."""

import json
from pathlib import Path

from typer.testing import CliRunner

from prism_strategy.bench.results.store import Store
from prism_strategy.cli import app

LOG = Path(__file__).resolve().parents[2] / "fixtures" / "imports" / "torchtitan" / "train.log"
PREFIX = "[titan] 2026-03-01 11:59:59,000 - root - INFO - "
SIZE = PREFIX + "Model llama3 8B size: 8,030,261,248 total parameters"
runner = CliRunner()


def _import(tmp_path, text: str, *flags: str):
    log = tmp_path / "train.log"
    log.write_text(text)
    db = tmp_path / "r.db"
    args = ["results", "import", str(log), "--platform", "dgx-h100", "--strategy", "fsdp_full_shard"]
    args += ["--precision", "bf16-mixed", "--db", str(db), "--json", *flags]
    return runner.invoke(app, args), db


def test_a_log_of_another_model_is_refused_naming_both(tmp_path):
    res, db = _import(tmp_path, SIZE + "\n" + LOG.read_text(), "--model", "qwen3-0.6b", "--ckpt-freq", "0")
    assert res.exit_code == 2, res.output
    line = " ".join(res.output.split())
    assert "8,030,261,248 parameters" in line and "qwen3-0.6b has 596,049,920" in line and "train.log:1" in line
    assert not db.exists() or Store(db).query() == []


def test_the_model_the_log_ran_is_stored_and_sac_is_accepted(tmp_path):
    res, db = _import(tmp_path, SIZE + "\n" + LOG.read_text(), "--model", "llama-3.1-8b", "--ckpt-freq", "sac")
    assert res.exit_code == 0, res.output
    assert len(Store(db).query()) == 1


def test_auto_is_refused_for_a_measured_run(tmp_path):
    res, _ = _import(tmp_path, LOG.read_text(), "--model", "llama-3.1-8b", "--ckpt-freq", "auto")
    assert res.exit_code == 2 and "a measured run ran one setting" in " ".join(res.output.split())


def test_the_accumulation_newer_torchtitan_prints_is_read(tmp_path):
    lines = LOG.read_text().splitlines()
    init = PREFIX + (
        "Trainer is initialized with 16384 tokens per DP rank, 393216 tokens per train step, "
        "gradient accumulation steps 4, maximum context length 8192, total steps 100 (warmup 10)"
    )
    text = "\n".join([SIZE, init, *lines[1:]]) + "\n"  # the new start line instead of the old one
    flags = ("--model", "llama-3.1-8b", "--ckpt-freq", "0", "--micro-batch", "2", "--nodes", "3")
    res, _ = _import(tmp_path, text, *flags)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert "neither --grad-accum nor the log says" not in res.output
    assert "train.log:2" in json.dumps(out)

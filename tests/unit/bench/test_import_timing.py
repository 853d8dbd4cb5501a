"""PRISM [TIMING] lines as running means (PRISM's native trainer) and as per-interval means both
read right; a torchtitan log defaults to mode e2e; the README's library import works."""

from pathlib import Path

import pytest

from prism_strategy.bench.importers import build_import
from prism_strategy.readers.prism import read as read_text

F = Path(__file__).resolve().parents[2] / "fixtures" / "imports"
TRUE_FWD = [1.0, 0.2, 1.0, 0.2]  # seconds per step over steps 1-10, 11-20, 21-30, 31-40


def _log(tmp_path, fwd_values) -> Path:
    lines = []
    for i, fwd in enumerate(fwd_values):
        lines += [
            f"Step {10 * (i + 1)}: Loss 2.0000 (rank_mean=2.0)",
            f"  [TIMING] Data: 0.000s | Fwd: {fwd:.3f}s | Bwd: 0.500s | Opt: 0.000s",
        ]
    p = tmp_path / "train.log"
    p.write_text("\n".join(lines) + "\n")
    return p


def _running(values):
    return [sum(values[: i + 1]) / (i + 1) for i in range(len(values))]  # equal 10-step intervals


@pytest.mark.parametrize("mode, logged", [("running", _running(TRUE_FWD)), ("interval", TRUE_FWD)])
def test_running_and_interval_timing_both_give_the_true_step_times(tmp_path, mode, logged):
    log = read_text(_log(tmp_path, logged))  # auto
    assert [w.phases["forward"] for w in log.windows] == pytest.approx(TRUE_FWD, abs=0.002)
    assert all(w.step_s > 0 for w in log.windows)
    assert any(f"read as {'running' if mode == 'running' else 'per-interval'} means" in n for n in log.notes)
    forced = read_text(_log(tmp_path, logged), mode)
    assert [w.phases["forward"] for w in forced.windows] == pytest.approx(TRUE_FWD, abs=0.002)


def test_torchtitan_log_defaults_to_e2e():
    imp = build_import(
        F / "torchtitan" / "train.log",
        dict(
            model="qwen3-0.6b",
            strategy="fsdp_full_shard",
            platform="aurora",
            nodes=2,
            ckpt_freq=0,
            precision="bf16-mixed",
        ),
    )
    assert imp.result.config["mode"] == "e2e" and "torchtitan" in imp.origin["mode"]


def test_read_strategy_file_imports_from_the_package(tmp_path):
    from prism_strategy import read_strategy_file

    (tmp_path / "strategy.toml").write_text('strategy = "ddp"\n')
    assert read_strategy_file(tmp_path / "strategy.toml").strategy == "ddp"

"""`--calibration auto`: the cached calibration file is found and applied when it was fitted on
this setup (platform, torch, backend; the host may differ), and left alone when it is stale."""

from __future__ import annotations

from importlib import metadata

import pytest

from prism_strategy.estimate.calibration import (
    calibrated_platform,
    default_calibration_dir,
    find_calibration,
    write_calibration,
)
from prism_strategy.flags import plan
from prism_strategy.specs import load_platform

TORCH = metadata.version("torch")
FITTED = 0.0123  # an achievable fraction no preset has: seeing it proves the file was applied


def cache_file(platform: str = "cpu", **fingerprint) -> None:
    fp = {"host": "another-host", "torch": TORCH, "backend": "gloo"} | fingerprint
    write_calibration(
        default_calibration_dir() / "cpu.toml",
        platform=platform,
        fingerprint=fp,
        values={"achievable_fraction": FITTED},
        runs=7,
        errors={"step_time_median": 4.0},
    )


def current() -> dict:
    return {"platform": "cpu", "torch": TORCH, "backend": "gloo"}


def test_nothing_cached_means_the_preset():
    assert find_calibration(load_platform("cpu"), current()) is None
    assert calibrated_platform(load_platform("cpu"), "auto") == load_platform("cpu")


def test_a_matching_file_is_found_and_plan_auto_uses_it():
    cache_file()
    cpu = load_platform("cpu")
    assert find_calibration(cpu, current()) == default_calibration_dir() / "cpu.toml"
    p = plan("tiny-llama", platform="cpu", nodes=1, ranks_per_node=2, seq_len=64, micro_batch=2, calibration="auto")
    assert p.scenario.platform.compute.achievable_fraction == FITTED
    assert p.options[0].provenance["compute"].startswith("predicted (calibrated)")
    none = plan("tiny-llama", platform="cpu", nodes=1, ranks_per_node=2, seq_len=64, micro_batch=2, calibration="none")
    assert none.scenario.platform.compute.achievable_fraction == cpu.compute.achievable_fraction != FITTED
    assert p.option("ddp").compute_s > none.option("ddp").compute_s  # fewer FLOP/s achieved: slower compute


@pytest.mark.parametrize(
    "stale",
    [{"torch": "1.13.0"}, {"backend": "nccl"}, {"platform": "aurora"}],
    ids=["older-torch", "other-backend", "fitted-for-another-platform"],
)
def test_a_stale_file_is_rejected(stale):
    cache_file(**stale)
    assert find_calibration(load_platform("cpu"), current()) is None
    assert calibrated_platform(load_platform("cpu"), "auto").compute.achievable_fraction != FITTED


def test_a_corrupt_file_is_ignored_by_auto():
    path = default_calibration_dir() / "cpu.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("platform = [\n")
    assert find_calibration(load_platform("cpu"), current()) is None

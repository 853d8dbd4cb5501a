"""benchmarks/allocator_device_check.py on a machine without CUDA: the predictions it sets beside
the measurement follow estimate/memory_runtime.py's terms, the length schedule, and the exits."""

import importlib.util
import sys
from pathlib import Path

import pytest

from prism_strategy.specs.presets import load_platform

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "allocator_device_check.py"


@pytest.fixture(scope="module")
def kit():
    spec = importlib.util.spec_from_file_location("allocator_device_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_four_cases_differ_only_where_the_model_says(kit):
    """Varying lengths without expandable segments add allocator_varying_factor x activations to
    reserved and allocator_pinned_factor x activations at the limit; the other three cases agree."""
    a = kit.parse_args(["--dry-run", "--platform", "dgx-h200"])
    p = {c: kit.predict(a, *c) for c in kit.CASES}
    plat, vary = load_platform("dgx-h200"), p[("varying", False)]
    for c in (("fixed", True), ("varying", True)):
        assert p[c]["reserved"] == pytest.approx(p[("fixed", False)]["reserved"])
    assert vary["reserved"] - p[("fixed", False)]["reserved"] == pytest.approx(
        plat.allocator.allocator_varying_factor * vary["activations"]
    )
    assert vary["at_limit"] - p[("fixed", False)]["at_limit"] == pytest.approx(
        plat.allocator.allocator_pinned_factor * vary["activations"], rel=1e-3
    )


def test_varying_schedule_starts_at_the_longest_and_stays_in_range(kit):
    a = kit.parse_args(["--seq-len", "512", "--steps", "20"])
    ls = kit.lengths_for(a, "varying")
    assert ls[0] == 512 and len(ls) == 20 and all(128 <= n <= 512 for n in ls) and len(set(ls)) > 5
    assert kit.lengths_for(a, "fixed") == [512] * 20


def test_without_cuda_only_the_dry_run_runs(kit, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the measurement would run")
    assert kit.main([]) == 2
    assert kit.main(["--dry-run", "--seq-len", "2"]) == 2
    assert "no CUDA device" in capsys.readouterr().err

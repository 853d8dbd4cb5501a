"""Session-wide launches: each starts its ranks once and many tests assert on what they wrote
(process start costs ~5 s per launch on this machine; the checks themselves are cheap)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from _harness import prebuild_deepspeed_ops, run_ranks, run_torchrun

ZERO = ("zero1", "zero2", "zero3")


@pytest.fixture(scope="session")
def torch_run(tmp_path_factory) -> list[dict]:
    """torchrun, 4 ranks as a 2x2 mesh (2 'nodes' x 2): ddp, fsdp_*, hsdp_*, projector, from-file."""
    out = tmp_path_factory.mktemp("torch")
    return run_torchrun(["torch", str(out)], nproc=4, out=out)[0]


@pytest.fixture(scope="session")
def ds_run(tmp_path_factory) -> list[dict]:
    """mpiexec-style (PALS/PMI env without a local size: ranks per node from hostnames), 4 ranks: zero1-3."""
    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("DeepSpeed is not installed (optional extra prism-strategy[deepspeed])")
    out = tmp_path_factory.mktemp("deepspeed")
    prebuild_deepspeed_ops(out / "prebuild.log")
    return run_ranks("pals", ["deepspeed", str(out)], world=4, out=out, local_size=False)[0]


@pytest.fixture(scope="session")
def memory_bench(request, tmp_path_factory):
    """memory_bench(file stem) -> {name: Result}: one bench launch (MemTracker peaks) per test file
    that names its runs in MEMORY_RUNS() (name -> bench config): test_census_memory.py and
    test_census_bf16_master.py, each launched when its first test asks. (One launch for both was a
    ~60 s phase alone, ~80 s beside the other xdist worker's launches: the budget is 60 s.)"""
    from prism_strategy.bench.launch.run import run_many
    from prism_strategy.bench.results.store import Store
    from prism_strategy.specs.presets import load_platform

    modules = {Path(m.__file__).stem: m for m in {getattr(item, "module", None) for item in request.session.items} if m}
    launched: dict[str, dict] = {}

    def results(stem: str) -> dict:
        if stem not in launched:
            runs = modules[stem].MEMORY_RUNS()
            store = Store(tmp_path_factory.mktemp("memory_db") / "results.db")
            launched[stem] = dict(zip(runs, run_many(list(runs.values()), load_platform("cpu"), store)))
        return launched[stem]

    return results


@pytest.fixture
def run_of(request):
    """run_of(strategy) -> the per-rank results of the launch that ran it."""
    return lambda strategy: request.getfixturevalue("ds_run" if strategy.startswith(ZERO) else "torch_run")


def pytest_collection_modifyitems(items):
    """Every multi-process test here may run once more after a failure (pytest-rerunfailures): ranks
    that ran torch.profiler sometimes abort at interpreter exit after writing their results
    (docs/testing.md); a failure that repeats fails the suite."""
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.flaky(reruns=1))

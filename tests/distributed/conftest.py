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
def memory_bench(request, tmp_path_factory) -> dict[str, dict]:
    """ONE bench launch (MemTracker peaks; DeepSpeed imported once per rank) for every collected
    test file that names its runs in MEMORY_RUNS() (name -> bench config, same nproc):
    test_census_memory.py and test_census_bf16_master.py. {file stem: {name: Result}}; a file
    run alone launches its own runs only."""
    from prism_strategy.bench.launch.run import run_many
    from prism_strategy.bench.results.store import Store
    from prism_strategy.specs.presets import load_platform

    modules = {getattr(item, "module", None) for item in request.session.items}
    runs = {
        (Path(m.__file__).stem, name): config
        for m in sorted((m for m in modules if hasattr(m, "MEMORY_RUNS")), key=lambda m: m.__file__)
        for name, config in m.MEMORY_RUNS().items()
    }
    store = Store(tmp_path_factory.mktemp("memory_db") / "results.db")
    out: dict[str, dict] = {}
    for (stem, name), r in zip(runs, run_many(list(runs.values()), load_platform("cpu"), store)):
        out.setdefault(stem, {})[name] = r
    return out


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

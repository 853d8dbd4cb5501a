"""Every test runs with its own cache dir (no user calibration or results store leaks in) and no
COLUMNS of the caller's; torch's extension builds (DeepSpeed's CPU shm op) stay in the caller's
folder, built once. Tests marked `gpu` run only where torch sees a CUDA or XPU device."""

import pytest

from prism_strategy.bench.launch.ds_ops import extensions_dir

EXTENSIONS = str(extensions_dir())
"""Where bench builds torch extensions (bench/launch/ds_ops.py), read before a test moves the cache:
otherwise every test that starts DeepSpeed rebuilds its shm op (~25 s). make test sets it."""


def _has_accelerator() -> bool:
    import torch

    return torch.cuda.is_available() or (hasattr(torch, "xpu") and torch.xpu.is_available())


def pytest_collection_modifyitems(config, items):
    gpu = [item for item in items if "gpu" in item.keywords]
    if gpu and not _has_accelerator():
        skip = pytest.mark.skip(reason="needs a CUDA or XPU device (none visible to torch here)")
        for item in gpu:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    # Tables take the width of the run's COLUMNS (report/console.py), which differs by caller (an
    # xdist worker has 80, a plain pipe none: 100); a test that wants a width sets it itself.
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", EXTENSIONS)
    cache = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("PRISM_STRATEGY_DB", str(cache / "results.db"))

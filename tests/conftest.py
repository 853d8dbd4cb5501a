"""Every test runs with its own cache dir: no user calibration or results store leaks in."""

import pytest


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    cache = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("PRISM_STRATEGY_DB", str(cache / "results.db"))

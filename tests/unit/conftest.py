"""Unit-test fixtures: `refit_without(*record_ids)`, the shipped presets refitted without the
records under test (tests/unit/_holdout.py), for every record-based accuracy and decision test."""

from __future__ import annotations

import pytest
from _holdout import Refit
from _holdout import refit_without as _refit_without


@pytest.fixture(scope="session")
def refit_without():
    """refit_without("A3-fsdp") -> Refit: `.platform(name)`, `.kwargs(record_id, **changes)` (the
    record's scenario on the refitted preset), `.fits` (which fits the records were taken out of)."""

    def refit(*record_ids: str) -> Refit:
        return _refit_without(*record_ids)

    return refit

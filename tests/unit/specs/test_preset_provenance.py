"""Preset provenance (issue 29 item 6): a platform value whose [sources] note says "taken from X"
must equal X's value, so a refit of X cannot leave its copies behind unseen.

X is read from the note itself: a preset named there (`aurora.toml`, `h100-96gb-500w`), or "the XPU
fit", the platform of the stored fit whose device is xpu (data/fits/*.toml). A table value (e.g.
grad_path_us_per_tensor) is compared on the keys both presets have.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib

from prism_strategy.specs.presets import platform_names

DATA = Path(__file__).resolve().parents[3] / "src" / "prism_strategy" / "data"
STALE: dict[tuple[str, str], str] = {}
"""Copies known to be stale: strict xfails, so the mark comes off with the fix."""


def _raw(name: str) -> dict:
    return tomllib.loads((DATA / "platforms" / f"{name}.toml").read_text())


def _xpu_fit_platform() -> str:
    for f in sorted((DATA / "fits").glob("*.toml")):
        d = tomllib.loads(f.read_text())
        if d.get("device") == "xpu":
            (name,) = d["platform"]
            return name
    raise AssertionError("no stored fit with device xpu")


def source_of(note: str) -> str | None:
    """The preset a "taken from ..." note names, None when the note takes nothing."""
    m = re.search(r"taken from (.*)", note)
    if m is None:
        return None
    rest = m.group(1)
    named = re.search(r"([\w-]+)\.toml|\b(" + "|".join(map(re.escape, platform_names())) + r")\b", rest)
    if rest.startswith("the XPU fit"):
        return _xpu_fit_platform()
    assert named is not None, f"a 'taken from' note names no preset: {note[:80]}"
    return named.group(1) or named.group(2)


def _copies() -> list[tuple[str, str, str]]:
    out = []
    for name in platform_names():
        for key, note in _raw(name).get("sources", {}).items():
            src = source_of(note)
            if src is not None and src != name:
                out.append((name, key, src))
    return out


def _param(name: str, key: str, src: str):
    marks = [pytest.mark.xfail(strict=True, reason=f"stale copy: {STALE[name, key]}")] if (name, key) in STALE else []
    return pytest.param(name, key, src, id=f"{name}.{key}<-{src}", marks=marks)


def test_the_notes_name_their_sources():
    assert source_of("taken from the FLAT fit (aurora.toml, fitted to PRISM Aurora records)") == "aurora"
    assert source_of("taken from h100-96gb-500w (same caching allocator)") == "h100-96gb-500w"
    assert source_of("taken from the XPU fit: fitted to PRISM C6-b4") == "aurora"
    assert source_of("ALCF Aurora docs: 128 GiB HBM per card") is None
    assert len(_copies()) >= 20  # the allocator factors of seven presets and the COMPOSITE copies


@pytest.mark.parametrize("name, key, src", [_param(*c) for c in _copies()])
def test_a_value_taken_from_another_preset_equals_it(name, key, src):
    mine, theirs = _raw(name)[key], _raw(src)[key]
    if isinstance(theirs, dict):
        mine = {k: v for k, v in mine.items() if k in theirs}
        theirs = {k: v for k, v in theirs.items() if k in mine}
        assert mine, f"{name}.{key} shares no key with {src}"
    assert mine == pytest.approx(theirs), f"{name}.{key} = {mine}, {src} has {theirs}"

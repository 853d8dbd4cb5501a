"""Issue 38 item 3: long reads report progress on stderr: on a terminal any file, in place;
elsewhere only files above report/console.PROGRESS_BYTES, a line at the first report and one per
tenth read."""

from __future__ import annotations

import io
import sys
from pathlib import Path

from prism_strategy.report.console import PROGRESS_BYTES, read_progress


class _Err(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def _run(monkeypatch, tty: bool, size: int) -> str:
    err = _Err(tty)
    monkeypatch.setattr(sys, "stderr", err)
    report, p = read_progress(), Path("run/train.log")
    for k in range(1, 41):
        report(p, size * k // 40, size)
    return err.getvalue()


def test_a_large_file_off_a_terminal_gets_a_first_line_and_one_per_tenth(monkeypatch):
    out = _run(monkeypatch, False, 2 * PROGRESS_BYTES)
    lines = out.splitlines()
    assert len(lines) == 11 and lines[0] == f"reading run/train.log: 2% of {2 * PROGRESS_BYTES / 1e6:,.0f} MB"
    assert lines[-1] == f"reading run/train.log: 100% of {2 * PROGRESS_BYTES / 1e6:,.0f} MB"
    assert "\r" not in out


def test_a_small_file_is_silent_off_a_terminal_and_in_place_on_one(monkeypatch):
    assert _run(monkeypatch, False, 1 << 20) == ""
    out = _run(monkeypatch, True, 1 << 20)
    assert out.count("\r") == 40 and out.endswith("100% of 1 MB\n") and out.count("\n") == 1

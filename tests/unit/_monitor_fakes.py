"""What the StepMonitor tests share: its JSONL records read back, and a device queue the test
drives (events record a device time the test sets; no host clock involved)."""

from __future__ import annotations

import json
from pathlib import Path


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


class FakeDevice:
    """A device queue the test drives: events record a device time the test sets, and complete
    only when the test says the device has caught up (no host clock involved)."""

    def __init__(self) -> None:
        self.t_ms, self.done_up_to = 0.0, -1.0

    def event(self) -> "FakeEvent":
        return FakeEvent(self)


class FakeEvent:
    def __init__(self, dev: FakeDevice) -> None:
        self.dev = dev

    def record(self):
        self.t = self.dev.t_ms

    def query(self):
        return self.t <= self.dev.done_up_to

    def synchronize(self):
        self.dev.done_up_to = max(self.dev.done_up_to, self.t)

    def elapsed_time(self, end):
        return end.t - self.t

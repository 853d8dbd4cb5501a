"""How a rank-0 training log ends, for `analyze`: completed (the framework's own end line, or
the last step it announced), stopped at a line (``^C``, a KeyboardInterrupt or other Traceback,
a signal, the scheduler's cancel), or neither (killed, or still running). An unfinished log is an
`incomplete` event at its last logged step; `results import` keeps the windows either way."""

from __future__ import annotations

import re
from dataclasses import dataclass

from prism_strategy.readers.steps import Event
from prism_strategy.readers.training_log import ParsedLog

STOPPED = re.compile(
    r"\^C|KeyboardInterrupt|Traceback \(most recent call last\)|SIGTERM|SIGINT|SIGKILL|Signals?\.SIG\w+|"
    r"received signal|DUE TO TIME LIMIT|CANCELLED AT"
)
"""A line saying the run was interrupted (Ctrl-C), crashed, or signalled by the scheduler."""
TOTAL = re.compile(r"total steps (\d+)|Total optimization steps = ([\d,]+)")
"""The step count a run announces (torchtitan's start line, HF Trainer's banner)."""


@dataclass
class LogEnd:
    completed_by: str
    """The line the framework writes after its last step."""
    program: str
    completed: bool = False
    stopped: tuple[str, str] | None = None
    total: int | None = None

    def see(self, line: str, where: str) -> None:
        self.completed = self.completed or self.completed_by in line
        if self.stopped is None and (m := STOPPED.search(line)):
            self.stopped = (where, m.group(0))
        if m := TOTAL.search(line):
            self.total = int((m.group(1) or m.group(2)).replace(",", ""))

    def event(self, log: ParsedLog) -> Event | None:
        last = log.windows[-1].last_step if log.windows else None
        if last is None or self.completed or (self.total is not None and last >= self.total and not self.stopped):
            return None
        how = (
            f"at {self.stopped[0]}: `{self.stopped[1]}` (an interrupt, a crash or the scheduler's signal)"
            if self.stopped
            else "with no error line: killed (OOM killer, SIGKILL, a lost node, the walltime) or still running"
        )
        msg = f"incomplete: the {self.program} log ends after step {last} without '{self.completed_by}', {how}"
        evidence = {"last_step": {"0": last}, "closed": {}, "stopped_at": self.stopped[0] if self.stopped else None}
        return Event("incomplete", last, (0,), evidence, msg, "log")

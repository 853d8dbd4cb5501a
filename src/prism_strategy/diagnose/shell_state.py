"""The interpreter's state while it reads a launcher: variables (each with the values it may
hold), functions, files a heredoc wrote, and the open branches it is on."""

from __future__ import annotations

from dataclasses import dataclass, field

from prism_strategy.diagnose.launch_options import Cond, Event
from prism_strategy.diagnose.shell_syntax import Binding, Node


@dataclass(kw_only=True, slots=True)
class State:
    env: dict[str, tuple[Binding, ...]] = field(default_factory=dict)
    functions: dict[str, tuple[Node, int, str]] = field(default_factory=dict)
    files: dict[str, tuple[str, int, str]] = field(default_factory=dict)
    """Files a heredoc writes (cat > rank.sh <<EOF): name -> (text, line offset, launcher file)."""
    branch: tuple[Cond, ...] = ()

    def fork(self, cond: Cond | None = None) -> "State":
        return State(
            env=dict(self.env),
            functions=dict(self.functions),
            files=dict(self.files),
            branch=self.branch + ((cond,) if cond else ()),
        )

    def lookup(self, name: str) -> tuple[Binding, ...] | None:
        return self.env.get(name)

    def merge(self, others: list["State"]) -> None:
        """After an open branch: a variable holds any value one of the sides left."""
        for o in others:
            self.functions.update(o.functions)
            self.files.update(o.files)
        names = set(self.env).union(*(o.env for o in others))
        for name in names:
            sides = [s.env.get(name) for s in (self, *others)]
            if all(b == sides[0] for b in sides):
                continue
            merged: list[Binding] = []
            for b in sides:
                for one in b or (Binding(value=None, exported=False),):
                    if one not in merged:
                        merged.append(one)
            self.env[name] = tuple(merged)


@dataclass(frozen=True, kw_only=True, slots=True)
class Launch:
    event: Event
    per_rank: list[Event] | None
    """Events of the command each rank runs; [] when it runs a program directly; None when
    the doctor cannot read it (a wrapper it cannot find)."""
    runs_python: bool
    rank_state: State | None = None
    """Each rank's variables once its command has run (None: as the job script left them)."""


@dataclass(frozen=True, slots=True)
class Group:
    """Statements read as one body (an if clause's test or body)."""

    nodes: list[Node]

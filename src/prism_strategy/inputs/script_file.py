"""The user's training script as read (nothing imported or run): every call and assignment
(inputs/script_reader.py), values followed through variables (inputs/py_values.py). doctor's
script checks (diagnose/script_checks.py) and `plan --script` (inputs/script.py) read this."""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from pathlib import Path

from prism_strategy.inputs.py_values import UNKNOWN, Alt, Assignment, Values
from prism_strategy.inputs.script_reader import Call, Collector
from prism_strategy.specs.errors import SpecError
from prism_strategy.strategies import STRATEGY_NAMES, get_strategy

DDP_CALLS = {"DistributedDataParallel", "DDP"}
FSDP1_CALLS = {"FullyShardedDataParallel", "FSDP"}
_ENV_GETS = {"os.environ.get", "os.getenv", "environ.get", "getenv"}
MAX_SCENARIOS = 12
"""Jobs supposed per call (env_scenarios): the defaults, then one variable changed at a time."""


def _is_str(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


@dataclass(frozen=True, kw_only=True, slots=True)
class ScriptFile:
    path: Path
    calls: list[Call]
    assigns: dict[tuple[str, str], list[Assignment]]
    words: frozenset[str]
    modules: frozenset[str]
    """Names bound to imported modules (their .compile() is not torch's)."""

    def engines(self) -> set[str]:
        out = set()
        for c in self.calls:
            if c.last in DDP_CALLS:
                out.add("ddp")
            if c.last in FSDP1_CALLS or c.last == "fully_shard":
                out.add("fsdp2")
            if c.name.startswith("deepspeed."):
                out.add("deepspeed")
            if c.last == "wrap" and (name := _wrap_strategy(c)):
                out.add(get_strategy(name).engine)
        return out

    def values(self, launcher_env: tuple[tuple[str, str, str], ...] = ()) -> Values:
        """The script's values; launcher_env: (name, value, launcher) the ranks surely run with,
        what os.environ.get(NAME, default) reads."""
        return Values(assigns=self.assigns, env={n: (v, f) for n, v, f in launcher_env})

    def call_kwargs(self, call: Call, vals: Values) -> list[Alt]:
        """The keywords a call gets, as dict alternatives: written ones and **dicts merged;
        UNKNOWN when a ** value is not a dict the doctor can read."""
        named = [k for k in call.node.keywords if k.arg]
        spread = [k for k in call.node.keywords if k.arg is None]

        def merge(*values: object) -> object:
            out = {k.arg: v for k, v in zip(named, values)}
            for d in values[len(named) :]:
                if not isinstance(d, dict):
                    return UNKNOWN
                out.update(d)
            return out

        return vals._combine([k.value for k in (*named, *spread)], call.scope, call.line, merge, keep_unknown=True)

    def kwarg_values(self, call: Call, name: str, vals: Values, absent: object = UNKNOWN) -> list[Alt]:
        """A keyword's values, passed directly or through **kwargs; `absent` when not passed."""
        return [
            replace(a, value=a.value.get(name, absent) if isinstance(a.value, dict) else UNKNOWN)
            for a in self.call_kwargs(call, vals)
        ]

    def env_scenarios(self, call: Call, vals: Values) -> list[Values]:
        """The jobs worth supposing for a call, each with every variable the script reads through
        os.environ.get(NAME, "default") decided: all at their defaults first, then one at a time
        set to a value an `if` test of the call's function compares it with (FSDP_SHARDING ==
        "shard_grad_op"). Variables the launchers export keep their exported value."""
        read = {
            c.node.args[0].value  # type: ignore[attr-defined]
            for c in self.calls
            if c.name in _ENV_GETS and len(c.node.args) == 2 and _is_str(c.node.args[0])
        }
        free: dict[str, str | None] = {n: None for n in sorted(read) if n not in vals.env}
        if not free:
            return [vals]
        out = [replace(vals, assumed=free)]
        for name, value in self._compared(call, vals, free):
            out.append(replace(vals, assumed={**free, name: value}))
        return out[:MAX_SCENARIOS]

    def _compared(self, call: Call, vals: Values, free: dict[str, str | None]) -> list[tuple[str, str]]:
        """(NAME, value) for each string an `if` test (or a flag assigned a comparison) in the
        call's function compares with a value read from NAME."""
        tests = {id(t): t for a in self.assigns_in(call.scope) for t, _ in a.conds}
        tests |= {id(t): t for c in self.calls if c.scope == call.scope for t, _ in c.conds}
        tests |= {id(a.value): a.value for a in self.assigns_in(call.scope) if isinstance(a.value, ast.Compare)}
        out: dict[tuple[str, str], None] = {}
        for test in tests.values():
            for node in ast.walk(test):
                if not (isinstance(node, ast.Compare) and len(node.ops) == 1):
                    continue
                for side, other in ((node.left, node.comparators[0]), (node.comparators[0], node.left)):
                    consts = [e for e in getattr(other, "elts", [other]) if _is_str(e)]
                    if not consts:
                        continue
                    names = {n for a in vals.eval(side, call.scope, test.lineno) for n in a.open_env}
                    for n in names & free.keys():
                        out |= {(n, c.value): None for c in consts}  # type: ignore[attr-defined]
        return list(out)

    def assigns_in(self, scope: str) -> list[Assignment]:
        return [a for (sc, _), found in self.assigns.items() if sc == scope for a in found]

    def find(self, *lasts: str) -> list[Call]:
        return [c for c in self.calls if c.last in lasts]

    def where(self, call: Call, detail: str) -> dict:
        return dict(file=str(self.path), line=call.line, detail=detail)


def read_script(path: Path) -> ScriptFile:
    """The script read (SpecError with one line when it cannot be read as Python)."""
    path = Path(path)
    try:
        tree = ast.parse(path.read_text(errors="replace"), filename=str(path))
    except OSError as e:
        raise SpecError(f"cannot read --script {path}: {e.strerror}") from None
    except SyntaxError as e:
        raise SpecError(f"--script {path} is not valid Python (line {e.lineno}: {e.msg})") from None
    except (ValueError, RecursionError, MemoryError) as e:
        raise SpecError(f"--script {path} cannot be read as Python ({type(e).__name__})") from None
    c = Collector()
    try:
        c.visit(tree)
    except RecursionError:
        raise SpecError(f"--script {path}: nested too deeply to read") from None
    return ScriptFile(
        path=path, calls=c.calls, assigns=c.assigns, words=frozenset(c.words), modules=frozenset(c.modules)
    )


def _wrap_strategy(c: Call) -> str | None:
    args = [*c.node.args[1:2], c.kwarg("strategy")]
    return next((a.value for a in args if isinstance(a, ast.Constant) and a.value in STRATEGY_NAMES), None)

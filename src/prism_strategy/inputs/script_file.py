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

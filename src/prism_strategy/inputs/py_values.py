"""What a training script's values are, statically: simple intra-function data flow with `ast`.

A name's value comes from the assignments that reach its use in the same function (the last
one that always runs, and any later one under an `if`); an `if` test is evaluated when it can
be, so a branch the values decide is taken or dropped. `os.environ.get(NAME, default)` reads
the launcher's exports when a launcher is given with the script, else its default (the job may
still set NAME: the notes say so). Anything else (a call, a parameter, an attribute of an
unknown object) is UNKNOWN. Every value carries the lines and choices that produced it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

UNKNOWN: Any = type("Unknown", (), {"__repr__": lambda self: "UNKNOWN"})()
MAX_ALTS = 8
MAX_DEPTH = 16
"""Nested evaluations (a name, its value, the tests above it); 16 follows a kwargs dict built
and then given three items (PRISM's fsdp_kwargs: dict(...), then kw["k"] = v under three `if`s)
down to the environment default deciding its sharding_strategy."""


@dataclass(frozen=True, slots=True)
class Symbol:
    """An object the doctor names but does not build: ShardingStrategy.SHARD_GRAD_OP (a member,
    comparable by name), or a call's result (not None, but neither its truth nor its value is
    known)."""

    name: str
    call: bool = False


def _opaque(v: Any) -> bool:
    return v is UNKNOWN or (isinstance(v, Symbol) and v.call)


@dataclass(frozen=True, slots=True)
class Alt:
    value: Any
    notes: tuple[str, ...] = ()
    """How this value was chosen, e.g. 'wrap_policy = None (line 31)'."""
    by_default: bool = True
    """False when it holds only if the job sets an environment variable the script reads."""
    open_env: tuple[str, ...] = ()
    """Environment variables read through their default (the job may still set them)."""


def _alt(value: Any, parts: list[Alt], notes: tuple[str, ...] = (), by_default: bool = True) -> Alt:
    """A value derived from `parts`: their notes, defaults and open variables carried on."""
    all_notes = tuple(dict.fromkeys((*notes, *(n for p in parts for n in p.notes))))
    env = tuple(dict.fromkeys(n for p in parts for n in p.open_env))
    return Alt(value, all_notes, by_default and all(p.by_default for p in parts), env)


@dataclass(frozen=True, slots=True)
class Assignment:
    line: int
    value: ast.expr | None
    """None: bound some other way (a loop target, `with ... as`, a parameter)."""
    conds: tuple[tuple[ast.expr, bool], ...] = ()
    """Enclosing `if` tests of the function, with the side (True: the body)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Decision:
    taken: bool | None
    """True: runs; False: never runs; None: depends on what the script leaves open."""
    notes: tuple[str, ...] = ()
    by_default: bool = True
    """Runs when the environment variables it reads keep their defaults."""
    open_env: tuple[str, ...] = ()


@dataclass(kw_only=True, slots=True)
class Values:
    assigns: dict[tuple[str, str], list[Assignment]]
    env: dict[str, tuple[str, str]] = field(default_factory=dict)
    """NAME -> (value, launcher file): what the launchers given export to every rank."""
    assumed: dict[str, str | None] = field(default_factory=dict)
    """NAME -> value: a job the doctor supposes (ScriptFile.env_scenarios), for a variable no
    launcher exports: os.environ.get(NAME, default) reads it as decided, not open (None: each
    read's own default)."""
    depth: int = 0

    def eval(self, node: ast.expr | None, scope: str, line: int) -> list[Alt]:
        if node is None or self.depth > MAX_DEPTH:
            return [Alt(UNKNOWN)]
        self.depth += 1
        try:
            return self._eval(node, scope, line)[:MAX_ALTS]
        finally:
            self.depth -= 1

    def _eval(self, node: ast.expr, scope: str, line: int) -> list[Alt]:
        if isinstance(node, ast.Constant):
            return [Alt(node.value)]
        if isinstance(node, ast.Name):
            return self.name(node.id, scope, line)
        if isinstance(node, ast.Attribute):
            return self._attribute(node, scope, line)
        if isinstance(node, ast.Call):
            return self._call(node, scope, line)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
            is_ = isinstance(node.ops[0], ast.Is)
            return self._combine(
                [node.left, node.comparators[0]], scope, line, lambda a, b: _identity(is_, a, b), keep_unknown=True
            )
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            return self._combine(
                [node.left, node.comparators[0]], scope, line, lambda a, b: _compare(node.ops[0], a, b)
            )
        if isinstance(node, ast.BoolOp):
            op = all if isinstance(node.op, ast.And) else any
            return self._combine(node.values, scope, line, lambda *v: op(bool(x) for x in v))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return self._combine([node.operand], scope, line, lambda a: not a)
        if isinstance(node, ast.IfExp):
            out = []
            for t in self.eval(node.test, scope, line):
                if _opaque(t.value):
                    return [Alt(UNKNOWN)]
                for v in self.eval(node.body if t.value else node.orelse, scope, line):
                    out.append(_alt(v.value, [t, v]))
            return out
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return self._combine(node.elts, scope, line, lambda *v: tuple(v))
        if isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) for k in node.keys):
            return self._dict([(k.value, v) for k, v in zip(node.keys, node.values)], scope, line)
        if isinstance(node, ast.Dict) and all(k is None or isinstance(k, ast.Constant) for k in node.keys):
            return self._combine(node.values, scope, line, lambda *vs: _merged(node.keys, vs), keep_unknown=True)
        if isinstance(node, ast.Subscript):
            return self._subscript(node, scope, line)
        return [Alt(UNKNOWN)]

    # --- names and the assignments that reach them -----------------------------------------
    def name(self, name: str, scope: str, line: int) -> list[Alt]:
        if name == "__name__":
            return [Alt("__main__")]
        found = self.assigns.get((scope, name)) or ([] if scope == "<module>" else None)
        if found is None:
            found = self.assigns.get(("<module>", name), [])
            scope_of, line = "<module>", 10**9
        else:
            scope_of = scope
        out: list[Alt] = []
        # an `if` whose body and else both assign the name: together they run wherever that `if`
        # is reached, whatever its test (PRISM's `if decoder_layer_cls is not None: ... else: ...`)
        sides: dict[tuple[int, ...], set[bool]] = {}
        for a in sorted((a for a in found if a.line < line), key=lambda a: -a.line):
            d = self.conditions(a.conds, scope_of, a.line)
            if d.taken is False:
                continue
            both = False
            if d.taken is None and a.conds:
                key = tuple(id(t) for t, _ in a.conds)
                sides.setdefault(key, set()).add(a.conds[-1][1])
                both = len(sides[key]) == 2 and self.conditions(a.conds[:-1], scope_of, a.line).taken is True
            values = self.eval(a.value, scope_of, a.line) if a.value is not None else [Alt(UNKNOWN)]
            src = ast.unparse(a.value)[:60] if a.value is not None else "?"
            for v in values:
                out.append(
                    _alt(
                        v.value,
                        [v, Alt(None, d.notes, d.by_default, d.open_env)],
                        notes=(f"{name} = {src} (line {a.line})",),
                    )
                )
            if d.taken is True or both:
                break
        return out or [Alt(UNKNOWN)]

    def conditions(self, conds: tuple[tuple[ast.expr, bool], ...], scope: str, line: int) -> "Decision":
        """Whether code under these `if` tests runs: decided by the script's values or the
        launcher's exports (True/False), or open: decided only by an environment default
        the job may override, or by nothing the doctor can evaluate."""
        notes: list[str] = []
        env: list[str] = []
        taken: bool | None = True
        by_default = True
        for test, side in conds:
            alts = self.eval(test, scope, line)
            text = (
                test.id
                if isinstance(test, ast.Name) and test.id.startswith("except")
                else f"if {ast.unparse(test)[:60]}"
            )
            where = f"`{text}` (line {test.lineno})"
            if any(_opaque(a.value) for a in alts):
                notes.append(f"under {where}, which the doctor cannot decide")
                taken, by_default = None, False
                continue
            holds = [bool(a.value) == side for a in alts]
            opened = [n for a in alts for n in a.open_env]
            if not any(holds) and not opened:
                return Decision(taken=False)
            if opened or not all(holds) or any(a.notes for a in alts):
                notes.append(f"{'under' if side else 'outside'} {where}")
                notes += [n for a in alts for n in a.notes]
            env += opened
            if not all(holds) or (opened and not any(holds)):
                taken = None
            by_default = by_default and any(h for a, h in zip(alts, holds) if a.by_default)
        if taken is True and env:
            taken = None if not by_default else True
        return Decision(
            taken=taken, notes=tuple(dict.fromkeys(notes)), by_default=by_default, open_env=tuple(dict.fromkeys(env))
        )

    # --- calls, attributes, containers -------------------------------------------------------
    def _call(self, node: ast.Call, scope: str, line: int) -> list[Alt]:
        fn = ast.unparse(node.func)
        if fn in ("os.environ.get", "os.getenv", "environ.get", "getenv") and node.args:
            return self._environ(node, scope, line)
        if fn in ("str", "int", "float", "bool") and len(node.args) == 1:
            conv = {"str": str, "int": int, "float": float, "bool": bool}[fn]
            return self._combine(node.args, scope, line, conv)
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("lower", "upper", "strip") and not node.args:
            return self._combine(
                [node.func.value],
                scope,
                line,
                lambda v: getattr(v, node.func.attr)() if isinstance(v, str) else UNKNOWN,
            )
        if fn == "dict" and not node.args and all(k.arg for k in node.keywords):
            return self._dict([(k.arg, k.value) for k in node.keywords], scope, line)
        if isinstance(node.func, ast.Attribute) and node.func.attr == "get" and 1 <= len(node.args) <= 2:
            default = node.args[1] if len(node.args) == 2 else ast.Constant(None)
            got = self._combine([node.func.value, node.args[0], default], scope, line, _dict_get)
            if not all(a.value is UNKNOWN for a in got):
                return got
        return [Alt(Symbol(f"{fn}(...)", call=True))]

    def _environ(self, node: ast.Call, scope: str, line: int) -> list[Alt]:
        key = self.eval(node.args[0], scope, line)
        if len(key) != 1 or not isinstance(key[0].value, str):
            return [Alt(UNKNOWN)]
        name = key[0].value
        if name in self.assumed and name not in self.env and len(node.args) == 2:
            default = [d.value for d in self.eval(node.args[1], scope, line)]
            value = self.assumed[name]
            if value is None or default == [value]:
                return [Alt(d, (f"{name} unset: the default {d!r}, unless the job sets it",)) for d in default]
            return [Alt(value, (f"the job sets {name}={value}",), by_default=False)]
        if name in self.env:
            value, file = self.env[name]
            return [Alt(value, (f"{name}={value} exported by {file}",))]
        if len(node.args) < 2:
            return [Alt(UNKNOWN)]
        return [
            _alt(
                d.value, [d, Alt(None, open_env=(name,))], notes=(f"{name} unset: the default, unless the job sets it",)
            )
            for d in self.eval(node.args[1], scope, line)
        ]

    def _attribute(self, node: ast.Attribute, scope: str, line: int) -> list[Alt]:
        if ast.unparse(node) == "os.environ":
            return [Alt(UNKNOWN)]
        if isinstance(node.value, (ast.Name, ast.Attribute)) and node.attr.isupper():
            return [Alt(Symbol(ast.unparse(node)))]  # an enum member: ShardingStrategy.SHARD_GRAD_OP
        return [Alt(UNKNOWN)]

    def _subscript(self, node: ast.Subscript, scope: str, line: int) -> list[Alt]:
        base = ast.unparse(node.value)
        if base in ("os.environ", "environ"):
            key = self.eval(node.slice, scope, line)
            if len(key) == 1 and key[0].value in self.env:
                value, file = self.env[key[0].value]
                return [Alt(value, (f"{key[0].value}={value} exported by {file}",))]
            return [Alt(UNKNOWN)]
        if base.split(".")[-1][:1].isupper():  # ShardingStrategy[name.upper()]
            return self._combine(
                [node.slice], scope, line, lambda k: Symbol(f"{base}.{k}") if isinstance(k, str) else UNKNOWN
            )
        return self._combine(
            [node.value, node.slice], scope, line, lambda d, k: d.get(k, UNKNOWN) if isinstance(d, dict) else UNKNOWN
        )

    def _dict(self, items: list[tuple[Any, ast.expr]], scope: str, line: int) -> list[Alt]:
        keys = [k for k, _ in items]
        return self._combine([v for _, v in items], scope, line, lambda *vs: dict(zip(keys, vs)), keep_unknown=True)

    def _combine(
        self, nodes: list[ast.expr], scope: str, line: int, fn: Any, *, keep_unknown: bool = False
    ) -> list[Alt]:
        """fn over every combination of the operands' alternatives (bounded)."""
        combos: list[Alt] = [Alt(())]
        for n in nodes:
            combos = [_alt(c.value + (v.value,), [c, v]) for c in combos for v in self.eval(n, scope, line)][:MAX_ALTS]
        out = []
        for c in combos:
            if not keep_unknown and any(_opaque(v) for v in c.value):
                out.append(_alt(UNKNOWN, [c]))
                continue
            try:
                out.append(_alt(fn(*c.value), [c]))
            except (TypeError, ValueError, AttributeError):
                out.append(Alt(UNKNOWN))
        return out


def _merged(keys: list[ast.expr | None], values: tuple[Any, ...]) -> Any:
    """{**a, "k": v}: UNKNOWN when a spread value is not a dict the doctor read."""
    out: dict[Any, Any] = {}
    for k, v in zip(keys, values):
        if k is None and not isinstance(v, dict):
            return UNKNOWN
        if k is None:
            out.update(v)
        else:
            out[k.value] = v
    return out


def _dict_get(d: Any, k: Any, default: Any) -> Any:
    """d.get(k, default) on a dict the doctor read (shard_map.get(name, FULL_SHARD))."""
    if not isinstance(d, dict) or _opaque(k):
        return UNKNOWN
    return d.get(k, default)


def _never_none(v: Any) -> bool:
    """A call that cannot return None: functools.partial(...) or a class, by the Capitalized name
    Python code gives classes (ModuleWrapPolicy(...), CPUOffload(...))."""
    if not (isinstance(v, Symbol) and v.call):
        return False
    last = v.name.removesuffix("(...)").rsplit(".", 1)[-1]
    return last == "partial" or last[:1].isupper()


def _identity(is_: bool, a: Any, b: Any) -> Any:
    """`a is b` / `a is not b`: decided against None for a call that cannot return None, else only
    on values the doctor knows."""
    for x, y in ((a, b), (b, a)):
        if y is None and _never_none(x):
            return not is_
    if _opaque(a) or _opaque(b):
        return UNKNOWN
    return (a is b) if is_ else (a is not b)


def _compare(op: ast.cmpop, a: Any, b: Any) -> Any:
    if isinstance(op, ast.Eq):
        return a == b
    if isinstance(op, ast.NotEq):
        return a != b
    if isinstance(op, ast.In):
        return a in b
    if isinstance(op, ast.NotIn):
        return a not in b
    if isinstance(op, ast.Is):
        return a is b
    if isinstance(op, ast.IsNot):
        return a is not b
    return UNKNOWN

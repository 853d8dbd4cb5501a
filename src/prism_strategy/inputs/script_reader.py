"""A training script as the doctor's checks see it, read with `ast` (nothing is imported or
run): every call with its resolved dotted name (import aliases expanded), the function it sits
in, whether a loop encloses it and the `if` tests above it; every assignment with its tests
(inputs/py_values.py follows them)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from prism_strategy.inputs.py_values import Assignment

Conds = tuple[tuple[ast.expr, bool], ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Call:
    name: str
    """Dotted name with import aliases expanded, e.g. torch.distributed.init_process_group."""
    node: ast.Call
    scope: str
    """Enclosing function ('<module>' at top level)."""
    in_loop: bool
    conds: Conds = ()
    """The `if` tests of its function above it, with the side (True: the body)."""

    @property
    def last(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    @property
    def line(self) -> int:
        return self.node.lineno

    def kwarg(self, name: str) -> ast.expr | None:
        return next((k.value for k in self.node.keywords if k.arg == name), None)

    def kw_true(self, name: str) -> bool:
        v = self.kwarg(name)
        return isinstance(v, ast.Constant) and v.value is True


@dataclass(kw_only=True, slots=True)
class Collector(ast.NodeVisitor):
    aliases: dict[str, str] = field(default_factory=dict)
    modules: set[str] = field(default_factory=set)
    calls: list[Call] = field(default_factory=list)
    assigns: dict[tuple[str, str], list[Assignment]] = field(default_factory=dict)
    words: set[str] = field(default_factory=set)
    scope: str = "<module>"
    loops: int = 0
    conds: list[tuple[ast.expr, bool]] = field(default_factory=list)

    def bind(self, name: str, line: int, value: ast.expr | None) -> None:
        self.assigns.setdefault((self.scope, name), []).append(
            Assignment(line=line, value=value, conds=tuple(self.conds))
        )

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            bound = a.asname or a.name.split(".")[0]
            self.aliases[bound] = a.name if a.asname else bound
            self.modules.add(bound)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for a in node.names:
            self.aliases[a.asname or a.name] = f"{node.module or ''}.{a.name}"

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer, loops, conds = self.scope, self.loops, self.conds
        for d in node.decorator_list:
            self._note_decorator(d)
        self.scope, self.loops, self.conds = node.name, 0, []
        a = node.args
        for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)):
            self.bind(arg.arg, node.lineno, None)
        for stmt in node.body:
            self.visit(stmt)
        self.scope, self.loops, self.conds = outer, loops, conds

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        for side, body in ((True, node.body), (False, node.orelse)):
            self.conds.append((node.test, side))
            for stmt in body:
                self.visit(stmt)
            self.conds.pop()

    def visit_Try(self, node: ast.Try) -> None:
        """An `except` body runs only when its `try` raised: its code is under a test nothing
        decides (`except AttributeError:`), not straight after the `try` body."""
        for stmt in (*node.body, *node.orelse, *node.finalbody):
            self.visit(stmt)
        for h in node.handlers:
            test = ast.copy_location(
                ast.Name(id=f"except {ast.unparse(h.type) if h.type else ''}".strip(), ctx=ast.Load()), h
            )
            self.conds.append((test, True))
            for stmt in h.body:
                self.visit(stmt)
            self.conds.pop()

    visit_TryStar = visit_Try
    visit_AsyncFunctionDef = visit_FunctionDef

    def _loop(self, node: ast.AST) -> None:
        if isinstance(node, (ast.For, ast.AsyncFor)):
            for n in ast.walk(node.target):
                if isinstance(n, ast.Name):
                    self.bind(n.id, node.lineno, None)
        self.loops += 1
        self.generic_visit(node)
        self.loops -= 1

    visit_For = visit_While = visit_AsyncFor = visit_ListComp = visit_GeneratorExp = _loop

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and isinstance(t.slice, ast.Constant):
                self._bind_item(t.value.id, t.slice, node)
                continue
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    self.bind(n.id, node.lineno, node.value if n is t else None)
        self.generic_visit(node)

    def _bind_item(self, name: str, key: ast.Constant, node: ast.Assign) -> None:
        """`kw["k"] = v` as kw = {**kw, "k": v}. Under `if v is not None:` the test is dropped: a
        keyword passed as None is the keyword absent for the calls this reads (FSDP's
        auto_wrap_policy=None), and the value keeps its own branches (PRISM's distributed.py)."""
        conds = list(self.conds)
        test = conds[-1][0] if conds and conds[-1][1] else None
        if (
            isinstance(test, ast.Compare)
            and isinstance(node.value, ast.Name)
            and isinstance(test.left, ast.Name)
            and test.left.id == node.value.id
            and isinstance(test.ops[0], ast.IsNot)
            and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value is None
        ):
            conds.pop()
        merged = ast.Dict(keys=[None, key], values=[ast.Name(id=name, ctx=ast.Load()), node.value])
        ast.copy_location(merged, node)
        self.assigns.setdefault((self.scope, name), []).append(
            Assignment(line=node.lineno, value=merged, conds=tuple(conds))
        )

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if isinstance(node.target, ast.Name) and node.value is not None:
            self.bind(node.target.id, node.lineno, node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name):
            self.bind(node.target.id, node.lineno, None)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = self.dotted(node.func)
        if name:
            self.calls.append(
                Call(name=name, node=node, scope=self.scope, in_loop=self.loops > 0, conds=tuple(self.conds))
            )
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        self.words.add(node.id.lower())

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.words.add(node.attr.lower())
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and len(node.value) < 40:
            self.words.add(node.value.lower())

    def _note_decorator(self, d: ast.expr) -> None:
        target = d.func if isinstance(d, ast.Call) else d
        name = self.dotted(target)
        if name:
            fake = ast.Call(func=target, args=[], keywords=[], lineno=d.lineno, col_offset=0)
            self.calls.append(Call(name=name, node=fake, scope=self.scope, in_loop=False))

    def dotted(self, node: ast.expr) -> str:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return ""
        parts.append(self.aliases.get(node.id, node.id))
        return ".".join(reversed(parts))

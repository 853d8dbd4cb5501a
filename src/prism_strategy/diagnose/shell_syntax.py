"""Shell as bash's grammar reads it: tree-sitter with tree-sitter-bash (both on PyPI), and what
a word or a `[ ... ]` test says once the launcher's variables are known.

Values are strings, or None when the doctor cannot know them (a command substitution, `$1`, a
variable assigned something unknowable). A variable the script never assigns is *open*: the
job may be submitted with it set (`qsub -v`), so its value is unknown, but the script's own
default (`${X:-d}`, and `[ -z "$X" ]`) reads it as unset; `open_default=True` asks for that.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Callable

from prism_strategy.specs.errors import SpecError

MAX_BYTES = 4 * 1024 * 1024
"""Launchers above this are not read (no job script is that long)."""

Node = Any
"""A tree_sitter.Node."""


@cache
def _parser() -> Any:
    try:
        import tree_sitter_bash
        from tree_sitter import Language, Parser
    except ImportError:
        raise SpecError(
            "reading shell launchers needs tree-sitter and tree-sitter-bash: pip install 'prism-strategy[doctor]'"
        ) from None
    return Parser(Language(tree_sitter_bash.language()))


def parse(text: str) -> Node:
    """The root node of `text` (errors are kept as ERROR nodes: what parses is still read)."""
    data = text.encode("utf-8", errors="replace")
    if len(data) > MAX_BYTES:
        raise SpecError(
            f"launcher is {len(data) // 1024} KiB: too long for a job script (limit {MAX_BYTES // 1024} KiB)"
        )
    return _parser().parse(data).root_node


def node_text(node: Node) -> str:
    return node.text.decode("utf-8", errors="replace")


def line_of(node: Node, offset: int) -> int:
    """1-based file line of a node parsed with its first line at `offset` + 1."""
    return node.start_point[0] + 1 + offset


@dataclass(frozen=True, slots=True)
class Binding:
    """One value a variable may hold: a string, or None when unknown."""

    value: str | None
    exported: bool = False
    where: tuple[str, int] | None = None
    """(file, line) of the assignment; None for the submitting environment."""
    unset: bool = False
    raw: str = ""
    """The value as written, when the doctor cannot know it ($(...), an unknown variable)."""


Lookup = Callable[[str], "tuple[Binding, ...] | None"]
"""name -> the bindings it may hold; None when the script never assigned it (open)."""


_DEFAULT_OPS = frozenset({":-", "-", ":=", "=", ":?", "?", ":+", "+"})


@dataclass(frozen=True, slots=True)
class Expander:
    lookup: Lookup
    open_default: bool = False
    names: set[str] = field(default_factory=set)
    """Variables the expansions read (filled as a side effect)."""

    def var(self, name: str) -> str | None:
        self.names.add(name)
        bound = self.lookup(name)
        if bound is None:
            return "" if self.open_default else None
        values = {b.value for b in bound}
        return values.pop() if len(values) == 1 else None

    def word(self, node: Node) -> str | None:
        t = node.type
        if t in ("word", "number", "extglob_pattern", "regex", "test_operator", "variable_name"):
            return re.sub(r"\\(.)", r"\1", node_text(node))
        if t == "raw_string":
            return node_text(node)[1:-1]
        if t == "string":
            out = []
            for text, part in string_pieces(node):
                v = unescape_double(text) if part is None else self.word(part)
                if v is None:
                    return None
                out.append(v)
            return "".join(out)
        if t == "concatenation":
            return self._join(node.children, quoted=False)
        if t == "simple_expansion":
            name = node_text(node)[1:]
            return self.var(name) if re.fullmatch(r"[A-Za-z_]\w*", name) else None
        if t == "expansion":
            return self._expansion(node)
        if t == "string_content":
            return unescape_double(node_text(node))
        if t == "arithmetic_expansion":
            inner = node.named_children
            v = self.arith(inner[0]) if len(inner) == 1 else None
            return None if v is None else str(v)
        return None  # command/process substitution, $'...', arrays

    def arith(self, node: Node) -> int | None:
        """$(( ... )) over integers: + - * / % and parentheses; names are variables."""
        t = node.type
        if t == "number":
            try:
                return int(node_text(node), 0)
            except ValueError:
                return None
        if t in ("variable_name", "simple_expansion", "expansion"):
            v = self.var(node_text(node)) if t == "variable_name" else self.word(node)
            return int(v) if v is not None and re.fullmatch(r"-?\d{1,18}", v.strip()) else None
        if t == "parenthesized_expression" and len(node.named_children) == 1:
            return self.arith(node.named_children[0])
        if t == "unary_expression" and len(node.named_children) == 1 and node_text(node.children[0]) in "-+":
            v = self.arith(node.named_children[0])
            return None if v is None else (-v if node_text(node.children[0]) == "-" else v)
        if t == "binary_expression":
            op = node.child_by_field_name("operator")
            a = self.arith(node.child_by_field_name("left"))
            b = self.arith(node.child_by_field_name("right"))
            if a is None or b is None or op is None:
                return None
            o = node_text(op)
            if o in ("/", "%") and b == 0:
                return None
            ops = {"+": a + b, "-": a - b, "*": a * b}
            if o in ops:
                return ops[o] if abs(ops[o]) < 2**62 else None
            if o not in ("/", "%"):
                return None
            q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)  # C's division, as bash's
            return q if o == "/" else a - b * q
        return None

    def _join(self, parts: list[Node], *, quoted: bool) -> str | None:
        out = []
        for p in parts:
            if not p.is_named:  # quotes of a string
                if not quoted:
                    out.append(node_text(p))
                continue
            v = self.word(p)
            if v is None:
                return None
            out.append(v)
        return "".join(out)

    def _expansion(self, node: Node) -> str | None:
        """${X}, ${X:-d}, ${X-d}, ${X:=d}, ${X:?msg}; anything else (${#X}, ${X%%.*}) unknown."""
        named = node.named_children
        ops = [node_text(c) for c in node.children if not c.is_named and node_text(c) not in ("${", "}")]
        if not named or named[0].type != "variable_name" or len(ops) > 1 or (ops and ops[0] not in _DEFAULT_OPS):
            return None
        name = node_text(named[0])
        if not ops:
            return self.var(name) if len(named) == 1 else None
        rest = named[1:]
        default = self._join(rest, quoted=True) if rest else ""
        op = ops[0]
        self.names.add(name)
        bound = self.lookup(name)
        if op in (":+", "+"):
            if bound is None:
                return "" if self.open_default else None
            value = self.var(name)
            return None if value is None else (default if value or op == "+" else "")
        if bound is None:  # open: the script's own default is what runs unless the job sets it
            return None if "?" in op else default  # ${X:?msg}: set at run time, or the script stops
        value = self.var(name)
        if value is None:
            return None
        return default if value == "" and op.startswith(":") else value


def string_pieces(node: Node) -> list[tuple[str, Node | None]]:
    """A double-quoted string's body as (text, None) literal runs and (text, node) expansions,
    covering every byte (tree-sitter leaves newlines between its string_content children)."""
    raw = node.text
    base, pos, out = node.start_byte, 1, []
    for c in node.named_children:
        start, end = c.start_byte - base, c.end_byte - base
        if c.type == "string_content":
            continue
        if start > pos:
            out.append((raw[pos:start].decode("utf-8", errors="replace"), None))
        out.append((raw[start:end].decode("utf-8", errors="replace"), c))
        pos = end
    if len(raw) - 1 > pos:
        out.append((raw[pos : len(raw) - 1].decode("utf-8", errors="replace"), None))
    return out


def unescape_double(s: str) -> str:
    """Inside "...": backslash escapes only $ ` " \\ (a backslash-newline stays: it keeps lines)."""
    return re.sub(r"\\([$`\"\\])", r"\1", s)


def string_body(node: Node, ex: "Expander") -> tuple[str, int] | None:
    """(text, first row) of a `bash -c` argument read as the script it holds: single-quoted text
    as written, double-quoted text with its escapes undone and the outer shell's expansions of
    known one-line values done (unknown ones stay as written, for the rank to expand), and any
    concatenation of those ('...'"$X"'...'). Lines are kept, so the rank script's lines map back
    to the file. None for anything else (a variable holding the script, a substitution)."""
    t = node.type
    if t == "raw_string":
        return node_text(node)[1:-1], node.start_point[0]
    if t == "word":
        return node_text(node), node.start_point[0]
    if t == "string":
        out = []
        for text, part in string_pieces(node):
            if part is None:
                out.append(unescape_double(text))
            else:
                v = ex.word(part) if part.type in ("simple_expansion", "expansion") else None
                out.append(v if v is not None and "\n" not in v else text)
        return "".join(out), node.start_point[0]
    if t == "concatenation":
        parts = [string_body(c, ex) for c in node.named_children]
        if any(p is None for p in parts):
            return None
        return "".join(p[0] for p in parts if p), node.start_point[0]
    if t in ("simple_expansion", "expansion"):
        v = ex.word(node)
        return (v, node.start_point[0]) if v is not None and "\n" not in v else None
    return None


# --- [ ... ] / [[ ... ]] / test --------------------------------------------------------------
_UNARY_STR = {"-z": lambda v: v == "", "-n": lambda v: v != ""}
_BINARY = {
    "=": lambda a, b: fnmatch.fnmatchcase(a, b),
    "==": lambda a, b: fnmatch.fnmatchcase(a, b),
    "!=": lambda a, b: not fnmatch.fnmatchcase(a, b),
}
_NUMERIC = {
    "-eq": lambda a, b: a == b,
    "-ne": lambda a, b: a != b,
    "-gt": lambda a, b: a > b,
    "-lt": lambda a, b: a < b,
    "-ge": lambda a, b: a >= b,
    "-le": lambda a, b: a <= b,
}


def eval_test(node: Node, ex: Expander) -> bool | None:
    """The truth of a test_command's expression; None when it depends on what is unknown
    (a file test, a command's status, an unknown value)."""
    t = node.type
    if t == "test_command":
        inner = node.named_children
        return eval_test(inner[0], ex) if len(inner) == 1 else None
    if t == "parenthesized_expression":
        inner = node.named_children
        return eval_test(inner[0], ex) if len(inner) == 1 else None
    if t == "negated_command" or (t == "unary_expression" and node_text(node.children[0]) == "!"):
        inner = node.named_children
        v = eval_test(inner[-1], ex) if inner else None
        return None if v is None else not v
    if t == "unary_expression":
        op, arg = node_text(node.children[0]), node.children[-1]
        if op in _UNARY_STR:
            v = ex.word(arg)
            return None if v is None else _UNARY_STR[op](v)
        return None
    if t == "binary_expression":
        return _binary(node, ex)
    if t in ("word", "string", "raw_string", "simple_expansion", "expansion", "concatenation"):
        v = ex.word(node)  # [ "$X" ]: true when non-empty
        return None if v is None else v != ""
    return None


def _binary(node: Node, ex: Expander) -> bool | None:
    left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
    op_node = node.child_by_field_name("operator")
    op = node_text(op_node) if op_node is not None else ""
    if op in ("&&", "-a", "||", "-o"):
        a, b = eval_test(left, ex), eval_test(right, ex)
        if op in ("&&", "-a"):
            return False if a is False or b is False else (None if a is None or b is None else True)
        return True if a or b else (None if a is None or b is None else False)
    if left is None or right is None:
        return None
    a, b = ex.word(left), ex.word(right)
    if a is None or b is None:
        return None
    if op in _BINARY:
        return _BINARY[op](a, b)
    if op in _NUMERIC:
        try:
            return _NUMERIC[op](int(a), int(b))
        except ValueError:
            return None
    return None


def case_matches(value: str, pattern: str) -> bool:
    return any(fnmatch.fnmatchcase(value, p) for p in pattern.split("|"))

"""A small abstract interpreter over a launcher's syntax tree: what it exports, unsets and loads,
in order, on which branch, and what each rank runs.

It follows assignments and exports (values known or unknown), `module load` (what the module
is known to set, diagnose/modules.py), `source` of files beside the launcher or written by a
heredoc, functions, `if`/`case`/`&&` (a branch the script's own values decide is taken or
skipped; one it leaves open is read with its condition attached to every event on it) and the
MPI launch, whose `bash -c BODY` is read as the per-rank script with its own lines mapped back
to the file. Heredoc bodies are data; `ssh host "..."` is a command, not a rank script.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from prism_strategy.diagnose.launch_options import Cond, Event
from prism_strategy.diagnose.modules import ModuleFacts, facts_for, loaded_names
from prism_strategy.diagnose.shell_state import Group, Launch, State
from prism_strategy.diagnose.shell_syntax import (
    Binding,
    Expander,
    Node,
    case_matches,
    eval_test,
    line_of,
    node_text,
    parse,
    string_body,
)

MPI_LAUNCHERS = frozenset({"mpiexec", "mpirun", "srun", "aprun"})
PROGRAMS = frozenset({"torchrun", "deepspeed", "python", "python3", "accelerate"})
SHELLS = frozenset({"bash", "sh", "zsh", "dash"})
WRAPPERS = frozenset({"exec", "time", "nohup", "command", "builtin", "nice", "numactl", "stdbuf"})
BUILTINS = frozenset(
    {
        "cd",
        "echo",
        "printf",
        "set",
        "shopt",
        "true",
        "false",
        ":",
        "exit",
        "return",
        "shift",
        "wait",
        "trap",
        "ulimit",
        "umask",
        "sleep",
        "mkdir",
        "rm",
        "cp",
        "mv",
        "ls",
        "cat",
        "tee",
        "date",
        "hostname",
        "type",
        "which",
        "test",
        "[",
        "read",
        "pushd",
        "popd",
        "eval",
        "let",
        "ln",
        "touch",
        "chmod",
        "head",
        "tail",
        "wc",
        "grep",
        "sed",
        "awk",
        "cut",
        "sort",
        "uniq",
        "env",
    }
)
MAX_DEPTH = 4
STATEMENTS_SKIPPED = frozenset({"comment", "heredoc_body", "heredoc_start", "heredoc_end", "test_command"})


@dataclass(kw_only=True, slots=True)
class Interpreter:
    root: Path
    modules: tuple[ModuleFacts, ...] = ()
    events: list[Event] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    depth: int = 0
    final: State = field(default_factory=State)

    # --- entry points --------------------------------------------------------------------
    def run_text(self, text: str, file: str, state: State, offset: int = 0) -> None:
        self.block(parse(text), state, file, offset)

    def block(self, node: Node, state: State, file: str, offset: int) -> None:
        for child in node.named_children:
            self.statement(child, state, file, offset)

    def emit(self, state: State, **kw: Any) -> Event:
        e = Event(branch=state.branch, **kw)
        self.events.append(e)
        return e

    # --- statements ----------------------------------------------------------------------
    def statement(self, node: Node, state: State, file: str, offset: int) -> None:
        t = node.type
        if t in STATEMENTS_SKIPPED:
            return
        if t in ("program", "compound_statement", "do_group", "ERROR"):
            self.block(node, state, file, offset)
        elif t == "subshell":
            self.block(node, state.fork(), file, offset)
        elif t == "redirected_statement":
            self._redirected(node, state, file, offset)
        elif t == "pipeline":
            parts = node.named_children
            for part in parts[:-1]:
                self.statement(part, state.fork(), file, offset)
            if parts:
                self.statement(parts[-1], state.fork(), file, offset)
        elif t == "list":
            self._list(node, state, file, offset)
        elif t == "negated_command":
            for c in node.named_children:
                self.statement(c, state, file, offset)
        elif t == "if_statement":
            self._if(node, state, file, offset)
        elif t == "case_statement":
            self._case(node, state, file, offset)
        elif t in ("for_statement", "c_style_for_statement", "while_statement", "until_statement"):
            body = node.child_by_field_name("body")
            if body is not None:
                self.block(body, state, file, offset)
        elif t == "function_definition":
            name, body = node.child_by_field_name("name"), node.child_by_field_name("body")
            if name is not None and body is not None:
                state.functions[node_text(name)] = (body, offset, file)
        elif t in ("declaration_command", "unset_command"):
            self._declaration(node, state, file, offset)
        elif t in ("variable_assignment", "variable_assignments"):
            for a in [node] if t == "variable_assignment" else node.named_children:
                self._assign(a, state, file, offset, exported=None)
        elif t == "command":
            self._command(node, state, file, offset)

    def _redirected(self, node: Node, state: State, file: str, offset: int) -> None:
        body = node.child_by_field_name("body")
        heredoc = next((c for c in node.named_children if c.type == "heredoc_redirect"), None)
        target = next(
            (
                c.child_by_field_name("destination")
                for c in node.named_children
                if c.type == "file_redirect" and node_text(c).lstrip("0123456789").startswith(">")
            ),
            None,
        )
        if heredoc is not None and body is not None and body.type == "command" and target is not None:
            name = Expander(state.lookup).word(target)
            text = next((c for c in heredoc.named_children if c.type == "heredoc_body"), None)
            if name and text is not None and node_text(body.child_by_field_name("name") or body) in ("cat", "tee"):
                state.files[Path(name).name] = (node_text(text), text.start_point[0] + offset, file)
        if body is not None:
            self.statement(body, state, file, offset)

    def _list(self, node: Node, state: State, file: str, offset: int) -> None:
        left, right = node.named_children[0], node.named_children[-1]
        op = next((node_text(c) for c in node.children if not c.is_named), "&&")
        if left.type == "test_command":
            self._branches(
                [(left, right)] if op == "&&" else [(left, None)], right if op == "||" else None, state, file, offset
            )
            return
        self.statement(left, state, file, offset)
        if op == "&&":  # a command chain: read as if each step succeeds
            self.statement(right, state, file, offset)
            return
        cond = Cond(text=f"not {node_text(left)[:60]}", file=file, line=line_of(left, offset), names=(), default=None)
        side = state.fork(cond)  # `cmd || fallback`: the fallback runs when cmd fails
        self.statement(right, side, file, offset)
        state.merge([side])

    def _if(self, node: Node, state: State, file: str, offset: int) -> None:
        clauses: list[tuple[Node, Node]] = []
        else_body: Node | None = None
        cond: list[Node] = []
        body: list[Node] = []
        mode = "cond"
        for c in node.children:
            if c.type in ("if", "elif"):
                continue
            if c.type == "then":
                mode = "body"
            elif c.type in ("elif_clause", "else_clause"):
                break
            elif c.is_named and c.type != "comment":
                (cond if mode == "cond" else body).append(c)
        clauses.append((Group(cond), Group(body)))
        for c in node.named_children:
            if c.type == "elif_clause":
                cc, bb, m = [], [], "cond"
                for x in c.children:
                    if x.type == "then":
                        m = "body"
                    elif x.is_named and x.type != "comment":
                        (cc if m == "cond" else bb).append(x)
                clauses.append((Group(cc), Group(bb)))
            elif c.type == "else_clause":
                else_body = Group([x for x in c.named_children if x.type != "comment"])
        self._branches(clauses, else_body, state, file, offset)

    def _branches(self, clauses: list[tuple[Any, Any]], else_body: Any, state: State, file: str, offset: int) -> None:
        """Take the first clause the script decides true, skip those it decides false; an open
        one runs on a fork that carries its condition."""
        sides: list[State] = []
        negations: list[Cond] = []
        for test, body in clauses:
            value, default, names, text, line = self._decide(test, state, file, offset)
            if value is False:
                continue
            if value is True:
                here = state.fork()
                here.branch = state.branch + tuple(negations)
                self._run(body, here, file, offset)
                sides.append(here)
                break
            cond = Cond(text=text, file=file, line=line, names=names, default=default)
            here = state.fork()
            here.branch = state.branch + tuple(negations) + (cond,)
            self._run(body, here, file, offset)
            sides.append(here)
            negations.append(
                Cond(
                    text=f"not {text}",
                    file=file,
                    line=line,
                    names=names,
                    default=None if default is None else not default,
                )
            )
        else:
            here = state.fork()
            here.branch = state.branch + tuple(negations)
            self._run(else_body, here, file, offset)
            sides.append(here)
        if len(sides) == 1 and sides[0].branch == state.branch:
            state.env, state.functions, state.files = sides[0].env, sides[0].functions, sides[0].files
        else:
            first, rest = sides[0], sides[1:]
            first.merge(rest)
            state.env, state.functions, state.files = first.env, first.functions, first.files

    def _run(self, body: Any, state: State, file: str, offset: int) -> None:
        if body is None:
            return
        for n in body.nodes if isinstance(body, Group) else [body]:
            self.statement(n, state, file, offset)

    def _decide(
        self, test: Any, state: State, file: str, offset: int
    ) -> tuple[bool | None, bool | None, tuple[str, ...], str, int]:
        nodes = test.nodes if isinstance(test, Group) else [test]
        tests = [n for n in nodes if n.type in ("test_command", "negated_command")]
        text = " ".join(node_text(n) for n in nodes)[:80] or "?"
        line = line_of(nodes[0], offset) if nodes else 1
        if len(nodes) != 1 or len(tests) != 1:
            for n in nodes:  # a command as the test: it runs, its status is unknown
                if n.type not in ("test_command", "negated_command"):
                    self.statement(n, state.fork(), file, offset)
            return None, None, (), text, line
        ex = Expander(state.lookup)
        value = eval_test(tests[0], ex)
        if value is not None:
            return value, value, (), text, line
        opened = tuple(sorted(n for n in ex.names if state.lookup(n) is None))
        default = eval_test(tests[0], Expander(state.lookup, open_default=True)) if opened else None
        return None, default, opened, text, line

    def _case(self, node: Node, state: State, file: str, offset: int) -> None:
        word = node.child_by_field_name("value")
        ex = Expander(state.lookup)
        value = ex.word(word) if word is not None else None
        default = Expander(state.lookup, open_default=True).word(word) if word is not None else None
        opened = tuple(sorted(n for n in ex.names if state.lookup(n) is None))
        sides, matched = [], False
        for item in (c for c in node.named_children if c.type == "case_item"):
            pats = [Expander(state.lookup).word(v) for v in item.children_by_field_name("value")]
            body = [
                c for c in item.named_children if c not in item.children_by_field_name("value") and c.type != "comment"
            ]
            if value is not None:
                if any(p is not None and case_matches(value, p) for p in pats):
                    self._run(Group(body), state, file, offset)
                    return
                continue
            hit = None if default is None or None in pats else any(case_matches(default, p) for p in pats if p)
            text = f"case {node_text(word)} in {'|'.join(p or '?' for p in pats)})"
            here = state.fork(
                Cond(
                    text=text,
                    file=file,
                    line=line_of(item, offset),
                    names=opened,
                    default=None if hit is None else (hit and not matched),
                )
            )
            matched = matched or bool(hit)
            self._run(Group(body), here, file, offset)
            sides.append(here)
        if sides:
            state.merge(sides)

    # --- simple commands -----------------------------------------------------------------
    def _assign(self, node: Node, state: State, file: str, offset: int, *, exported: bool | None) -> None:
        name_node, value_node = node.child_by_field_name("name"), node.child_by_field_name("value")
        if name_node is None or name_node.type != "variable_name":
            return
        name = node_text(name_node)
        value = Expander(state.lookup).word(value_node) if value_node is not None else ""
        was = state.env.get(name)
        export = exported if exported is not None else bool(was and any(b.exported for b in was))
        line = line_of(node, offset)
        raw = _shown(value_node) if value_node is not None else ""
        state.env[name] = (Binding(value=value, exported=export, where=(file, line), raw=raw),)
        if export:
            self.emit(state, kind="export", name=name, value=value if value is not None else raw, file=file, line=line)

    def _declaration(self, node: Node, state: State, file: str, offset: int) -> None:
        keyword = node_text(node.children[0])
        flags = [node_text(c) for c in node.named_children if c.type == "word" and node_text(c).startswith("-")]
        line = line_of(node, offset)
        if keyword == "unset":
            for c in node.named_children:
                if c.type in ("variable_name", "word") and not node_text(c).startswith("-"):
                    name = node_text(c)
                    state.env[name] = (Binding(value="", unset=True, where=(file, line)),)
                    self.emit(state, kind="unset", name=name, file=file, line=line)
            return
        export = keyword == "export" or any("x" in f for f in flags if f.startswith("-"))
        if "f" in "".join(flags) and keyword in ("declare", "typeset"):
            return
        for c in node.named_children:
            if c.type == "variable_assignment":
                self._assign(c, state, file, offset, exported=export or None)
            elif c.type == "variable_name" and export:
                name = node_text(c)
                was = state.env.get(name)
                state.env[name] = (
                    tuple(replace(b, exported=True) for b in was) if was else (Binding(value=None, exported=True),)
                )
                values = {b.value for b in was} if was else set()
                if was and len(values) == 1 and None not in values:
                    self.emit(state, kind="export", name=name, value=values.pop(), file=file, line=line)

    def _command(self, node: Node, state: State, file: str, offset: int) -> None:
        name_node = node.child_by_field_name("name")
        line = line_of(node, offset)
        ex = Expander(state.lookup)
        for a in (c for c in node.named_children if c.type == "variable_assignment"):
            n, v = a.child_by_field_name("name"), a.child_by_field_name("value")
            if n is not None:
                value = ex.word(v) if v is not None else ""
                self.emit(
                    state,
                    kind="export",
                    name=node_text(n),
                    value=value if value is not None else node_text(v),
                    file=file,
                    line=line,
                )
        if name_node is None:
            return
        words = [
            name_node.named_children[0] if name_node.named_children else name_node,
            *node.children_by_field_name("argument"),
        ]
        values = [ex.word(w) for w in words]
        while values and values[0] in WRAPPERS:
            words, values = words[1:], values[1:]
        if not values or values[0] is None:
            return
        cmd = Path(values[0]).name
        args = tuple(v if v is not None else _shown(w) for v, w in zip(values[1:], words[1:]))
        if cmd in ("module", "ml"):
            self._module(
                ("load", *args) if cmd == "ml" and args and args[0] not in ("load", "swap") else args, state, file, line
            )
        elif cmd in ("source", ".") and args:
            self._source(args[0], state)
        elif cmd in state.functions and self.depth < MAX_DEPTH:
            body, off, where = state.functions[cmd]
            self.depth += 1
            try:
                self.statement(body, state, where, off)
            finally:
                self.depth -= 1
        elif cmd in BUILTINS and cmd != "env":
            return
        else:
            if cmd == "env":
                args = tuple(a for a in args if "=" not in a or a.startswith("-"))
                if not args:
                    return
                cmd, args = Path(args[0]).name, args[1:]
            event = self.emit(state, kind="launch", name=cmd, args=args, file=file, line=line)
            if cmd in MPI_LAUNCHERS:
                self.launches.append(self._rank_command(event, words, values, state, file, offset))
            elif cmd in PROGRAMS or cmd.startswith("python"):
                self.launches.append(Launch(event=event, per_rank=[], runs_python=True))

    def _module(self, args: tuple[str, ...], state: State, file: str, line: int) -> None:
        self.emit(state, kind="module", args=args, file=file, line=line)
        for loaded in loaded_names(args):
            facts = facts_for(loaded, self.modules)
            for var, value in facts.sets.items() if facts else ():
                state.env[var] = (Binding(value=value, exported=True, where=(file, line)),)

    def _source(self, target: str, state: State) -> None:
        name = Path(target.replace("\\", "/")).name
        path = self.root / name
        if self.depth >= MAX_DEPTH:
            return
        if name in state.files:  # written by a heredoc: its lines are the launcher's
            text, off, where = state.files[name]
        elif path.is_file():
            try:
                text, off, where = path.read_text(errors="replace"), 0, str(path)
            except OSError:
                return
        else:
            return
        self.depth += 1
        try:
            self.run_text(text, where, state, off)
        finally:
            self.depth -= 1

    def _rank_command(
        self, launch: Event, words: list[Node], values: list[str | None], state: State, file: str, offset: int
    ) -> Launch:
        """What each rank runs: a program, a `bash -c BODY` (read as a script in a copy of the
        job's state, the rank's inherited environment), or a script file beside the launcher."""
        for k in range(1, len(values)):
            base = Path(values[k]).name if values[k] else ""
            if base in SHELLS:
                return self._shell_rank(launch, words[k + 1 :], values[k + 1 :], state, file, offset)
            if base in PROGRAMS or base.startswith("python"):
                return Launch(event=launch, per_rank=[], runs_python=True)
            if base.endswith(".sh"):
                return self._file_rank(launch, base, state)
        return Launch(event=launch, per_rank=None, runs_python=False)

    def _shell_rank(
        self, launch: Event, words: list[Node], values: list[str | None], state: State, file: str, offset: int
    ) -> Launch:
        flags = [v for v in values if v and v.startswith("-")]
        rest = [(w, v) for w, v in zip(words, values) if not (v and v.startswith("-"))]
        if not rest:
            return Launch(event=launch, per_rank=None, runs_python=False)
        if not any("c" in f[1:] for f in flags if not f.startswith("--")):
            name = Path(rest[0][1] or "").name
            return (
                self._file_rank(launch, name, state) if name else Launch(event=launch, per_rank=None, runs_python=False)
            )
        body = string_body(rest[0][0], Expander(state.lookup))
        if body is None:
            return Launch(event=launch, per_rank=None, runs_python=False)
        text, row = body
        return self._rank_events(launch, lambda sub, rank: sub.run_text(text, file, rank, offset + row), state)

    def _file_rank(self, launch: Event, name: str, state: State) -> Launch:
        if name not in state.files and not (self.root / name).is_file():
            return Launch(event=launch, per_rank=None, runs_python=False)
        return self._rank_events(launch, lambda sub, rank: sub._source(name, rank), state)

    def _rank_events(self, launch: Event, read: Any, state: State) -> Launch:
        sub = Interpreter(root=self.root, modules=self.modules, depth=self.depth + 1)
        rank = state.fork()
        rank.env = {k: v for k, v in rank.env.items() if any(b.exported for b in v)}
        if self.depth < MAX_DEPTH:
            read(sub, rank)
        runs = any(e.kind == "launch" and (e.name in PROGRAMS or e.name.startswith("python")) for e in sub.events)
        return Launch(event=launch, per_rank=sub.events, runs_python=runs, rank_state=rank)


def _shown(word: Node) -> str:
    """An argument the doctor cannot evaluate, as written (outer quotes dropped: "$N" -> $N)."""
    text = node_text(word)
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'" else text


def read_events(text: str, file: str, root: Path, modules: tuple[ModuleFacts, ...] = ()) -> Interpreter:
    interp = Interpreter(root=root, modules=modules)
    interp.run_text(text, file, interp.final)
    return interp


def main_launch(interp: Interpreter) -> Launch | None:
    """The training launch: the first MPI launch whose ranks run Python, else the first MPI
    launch, else the first program launch (torchrun, deepspeed, python)."""
    mpi = [x for x in interp.launches if x.event.name in MPI_LAUNCHERS]
    return (
        next((x for x in mpi if x.runs_python), None)
        or (mpi[0] if mpi else None)
        or (interp.launches[0] if interp.launches else None)
    )

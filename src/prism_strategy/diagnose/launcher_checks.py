"""Launcher checks: read a PBS/Slurm/torchrun shell launcher into an ordered list of events
(exports, unsets, module loads, the launch command) for the job script and for the per-rank
command it ships to each rank, then check the order and values against the rules.

The reader is a line-level model of shell, not a shell: it follows `source` of files next to
the launcher, shell functions (called directly or shipped with `declare -f`), `bash -c` strings
and `--env NAME=VALUE` options. What it cannot follow, it leaves unknown rather than guess.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from prism_strategy.diagnose.doctor import (Context, DsConfigFile, Finding, StrategyTomlFile, check_rule, context_facts,
                                            parse_header)
from prism_strategy.diagnose.launch_options import (ASSIGN, Event, directives, is_module_load, launch_env_options,
                                                    option_int, option_str, resolve)
from prism_strategy.diagnose.live_checks import check_env_values, check_modules, load_known_bad
from prism_strategy.diagnose.site_checks import PbsDirectives, check_site
from prism_strategy.specs.errors import SpecError

MPI_LAUNCHERS = frozenset({"mpiexec", "mpirun", "srun", "aprun"})
PROGRAMS = frozenset({"torchrun", "deepspeed", "python", "python3", "accelerate"})
_FUNC_START = re.compile(r"^\s*(?:function\s+)?([A-Za-z_][\w-]*)\s*\(\s*\)\s*\{?\s*$|^\s*function\s+([A-Za-z_][\w-]*)\s*\{?\s*$")
_COMPILE_FLAG = re.compile(r"^--(?:torch[-_])?compile(?:=(?:1|true|True|yes))?$")
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", ";;"})
_KEYWORDS = frozenset({"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "for", "{", "}", "(", ")",
                       "!", "exec", "time", "nohup", "command", "builtin", "env"})


@dataclass(kw_only=True, slots=True)
class _Reader:
    """State while reading one launcher (and the files it sources)."""

    root: Path
    functions: dict[str, list[tuple[str, int, str]]] = field(default_factory=dict)
    depth: int = 0

    def read_text(self, text: str, file: str, first_line: int = 1) -> list[Event]:
        events: list[Event] = []
        lines = _logical_lines(text, first_line)
        i = 0
        while i < len(lines):
            lineno, line = lines[i]
            m = _FUNC_START.match(line)
            if m:
                body, i = _function_body(lines, i + 1)
                self.functions[m.group(1) or m.group(2)] = [(file, n, t) for n, t in body]
                continue
            for words in _commands(line):
                events += self._command(words, file, lineno)
            i += 1
        return events

    def _command(self, words: list[str], file: str, line: int) -> list[Event]:
        while words and words[0] in _KEYWORDS:
            words = words[1:]
        out: list[Event] = []
        while words and ASSIGN.match(words[0]):
            name, value = ASSIGN.match(words[0]).groups()
            out.append(Event(kind="export", name=name, value=value, file=file, line=line))
            words = words[1:]
        if not words:
            return out
        cmd, args = Path(words[0]).name, words[1:]
        if cmd in ("export", "declare", "typeset"):
            if cmd == "export" or any(a.startswith("-") and "x" in a for a in args):
                out += [Event(kind="export", name=a.split("=", 1)[0], value=a.split("=", 1)[1] if "=" in a else "",
                              file=file, line=line) for a in args if ASSIGN.match(a)]
        elif cmd == "unset":
            out += [Event(kind="unset", name=a, file=file, line=line) for a in args if not a.startswith("-")]
        elif cmd in ("module", "ml"):
            out.append(Event(kind="module", args=tuple(args), file=file, line=line))
        elif cmd in ("source", ".") and args:
            out += self._source(args[0])
        elif cmd in self.functions and self.depth < 3:
            out += self._inline_function(cmd)
        else:
            out.append(Event(kind="launch", name=cmd, args=tuple(args), file=file, line=line))
        return out

    def _source(self, target: str) -> list[Event]:
        path = self.root / Path(target.replace("\\", "/")).name
        if self.depth >= 3 or not path.is_file():
            return []
        self.depth += 1
        try:
            return self.read_text(path.read_text(errors="replace"), str(path))
        finally:
            self.depth -= 1

    def _inline_function(self, name: str) -> list[Event]:
        self.depth += 1
        try:
            out = []
            for file, n, text in self.functions[name]:
                for words in _commands(text):
                    out += self._command(words, file, n)
            return out
        finally:
            self.depth -= 1

    def per_rank(self, launch: Event) -> list[Event] | None:
        """Events of the command each rank runs; [] when it runs a program directly; None
        when it cannot be followed (a wrapper the doctor cannot read)."""
        args = list(launch.args)
        for k, word in enumerate(args):
            base = Path(word).name
            if base in ("bash", "sh", "zsh"):
                return self._shell_string(args[k + 1:], launch)
            if base in PROGRAMS or base.startswith("python"):
                return []
            if word.endswith(".sh") and (self.root / base).is_file():
                return self._source(word)
        return None

    def _shell_string(self, rest: list[str], launch: Event) -> list[Event] | None:
        flags = [w for w in rest if w.startswith("-")]
        strings = [w for w in rest if not w.startswith("-")]
        if strings and not any("c" in f for f in flags):  # bash rank.sh: read it when it sits beside us
            return self._source(strings[0]) if (self.root / Path(strings[0]).name).is_file() else None
        if not strings:
            return None
        text = strings[0]
        called = re.findall(r"(?:declare|typeset)\s+-f\s+([A-Za-z_][\w-]*)", text)
        events = []
        for name in called:
            if name in self.functions:
                events += self._inline_function(name)
        remainder = re.sub(r"\$\((?:declare|typeset)\s+-f\s+[\w-]+\)", "", text)
        for words in _commands(remainder):
            if words and words[0] not in called:
                events += self._command(words, launch.file, launch.line)
        return events


def _logical_lines(text: str, first_line: int) -> list[tuple[int, str]]:
    """Lines with backslash continuations joined, each with its first line number."""
    out, buf, start = [], "", first_line
    for n, raw in enumerate(text.splitlines(), start=first_line):
        if not buf:
            start = n
        if raw.endswith("\\") and not raw.lstrip().startswith("#"):
            buf += raw[:-1] + " "
            continue
        out.append((start, buf + raw))
        buf = ""
    if buf:
        out.append((start, buf))
    return out


def _function_body(lines: list[tuple[int, str]], i: int) -> tuple[list[tuple[int, str]], int]:
    body = []
    while i < len(lines) and lines[i][1].strip() not in ("}", "};"):
        if lines[i][1].strip() != "{":
            body.append(lines[i])
        i += 1
    return body, i + 1


def _commands(line: str) -> list[list[str]]:
    """Simple commands of one line, split at ; && || | & (quotes respected)."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    try:
        tokens = list(lex)
    except ValueError:
        return []
    out, cur = [], []
    for t in tokens:
        if t in _SEPARATORS:
            out.append(cur)
            cur = []
        else:
            cur.append(t)
    out.append(cur)
    return [c for c in out if c]


# --- what one launcher says --------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True, slots=True)
class LauncherFile:
    path: Path
    header: dict[str, str]
    outer: list[Event]
    per_rank: list[Event] | None
    """None: no MPI launch, or one the doctor cannot follow."""
    launch: Event | None
    directives: dict[str, int]
    """nodes / ranks_per_node read from #PBS / #SBATCH lines."""
    pbs: PbsDirectives

    @property
    def timeline(self) -> list[Event]:
        return self.outer + (self.per_rank or [])

    def refine(self, ctx: Context) -> Context:
        devices, engines = set(), set()
        for e in self.timeline:
            if e.kind == "module" and any("frameworks" in a for a in e.args):
                devices.add("xpu")
            if e.kind == "export" and e.name.startswith(("CCL_", "ZE_")):
                devices.add("xpu")
            if e.kind == "export" and e.name.startswith("NCCL_"):
                devices.add("cuda")
        if self._deepspeed_line():
            engines.add("deepspeed")
        nodes = int(self.header["nodes"]) if self.header.get("nodes", "").isdigit() else self.nodes()
        return ctx.refined(platform=self.header.get("platform"), strategy=self.header.get("strategy"), nodes=nodes,
                           devices=frozenset(devices), engines=frozenset(engines),
                           env_profile=self.header.get("env-profile"))

    def nodes(self) -> int | None:
        if "nodes" in self.directives:
            return self.directives["nodes"]
        n = option_int(self.launch, ("--nnodes", "--nodes", "-N"), self.outer) if self.launch else None
        total, rpn = option_int(self.launch, ("-n", "-np"), self.outer) if self.launch else None, self.ranks_per_node()
        return n or (total // rpn if total and rpn and total % rpn == 0 else None)

    def ranks_per_node(self) -> int | None:
        if self.launch is not None:
            rpn = option_int(self.launch, ("-ppn", "--ppn", "-npernode", "--ntasks-per-node", "--nproc-per-node",
                                            "--nproc_per_node"), self.outer)
            if rpn:
                return rpn
        return self.directives.get("ranks_per_node")

    def _deepspeed_line(self) -> int | None:
        for e in self.timeline:
            if e.kind == "launch" and (e.name == "deepspeed" or any(a.startswith("--deepspeed") for a in e.args)):
                return e.line
        return None

    def _compile_line(self) -> int | None:
        return next((e.line for e in self.timeline if e.kind == "launch" and any(_COMPILE_FLAG.match(a) for a in e.args)),
                    None)

    def check(self, ctx: Context) -> list[Finding]:
        lost = self._check_per_rank(ctx)  # every export lost: one finding, not one per variable
        return ((lost or self._check_module_order()) + self._check_ranks_per_node(ctx)
                + check_env_values(self.final_env(), ctx) + check_site(self, ctx)
                + check_modules([(" ".join(e.args), e.file, e.line) for e in self.timeline if e.kind == "module"])
                + self._check_compile(ctx))

    def _check_module_order(self) -> list[Finding]:
        kb, tl, out = load_known_bad(), self.timeline, []
        loads = [i for i, e in enumerate(tl) if is_module_load(e)]
        if not loads:
            return []
        seen: set[str] = set()
        for i, e in enumerate(tl):
            if e.kind != "export" or not kb.is_tracked(e.name) or e.name in seen or i > loads[-1]:
                continue
            seen.add(e.name)
            again = any(x.kind == "export" and x.name == e.name for x in tl[loads[-1] + 1:])
            if not again:
                out += check_rule("launcher-export-before-module-load", {"exported_before_module_load": (True,)},
                                  file=e.file, line=e.line, detail=f"{e.name} is exported before `module load` "
                                  f"({tl[loads[-1]].file}:{tl[loads[-1]].line}) and not again after it")
        return out

    def rank_timeline(self) -> list[Event]:
        """What each rank inherits, in order: the job script up to the launch, the variables the
        launch itself passes (--env / -genv), then the per-rank command."""
        if self.launch is None or self.launch not in self.outer:
            return self.timeline
        before = self.outer[: self.outer.index(self.launch)]
        passed = [Event(kind="export", name=n, value=v, file=f, line=ln)
                  for n, (v, f, ln) in launch_env_options(self.launch).items()]
        return before + passed + (self.per_rank or [])

    def _check_per_rank(self, ctx: Context) -> list[Finding]:
        """A module load that runs after the last CCL/FI export resets what the ranks get. ALCF's
        style (load once in the job script, export, let mpiexec pass the environment on) and
        PRISM's (each rank loads, then exports again) both end with the exports: no finding."""
        if self.launch is None or self.launch.name not in MPI_LAUNCHERS or self.per_rank is None:
            return []
        kb, tl = load_known_bad(), self.rank_timeline()
        exports = [i for i, e in enumerate(tl) if e.kind == "export" and kb.is_tracked(e.name)]
        loads = [i for i, e in enumerate(tl) if is_module_load(e)]
        if not exports or not loads or loads[-1] < exports[-1]:
            return []
        load, in_rank = tl[loads[-1]], loads[-1] >= len(tl) - len(self.per_rank)
        where = f"{load.file}:{load.line}"
        detail = (f"each rank runs `module {' '.join(load.args)}` ({where}) after the last CCL/FI export" if in_rank
                  else f"the CCL/FI exports come before `module {' '.join(load.args)}` ({where}) and none after it")
        return check_rule("launcher-no-per-rank-export", context_facts(ctx, per_rank_exports=False),
                          file=self.launch.file, line=self.launch.line, detail=detail)

    def _check_ranks_per_node(self, ctx: Context) -> list[Finding]:
        rpn = self.ranks_per_node()
        if ctx.platform is None or rpn is None:
            return []
        want = ctx.platform.devices_per_node
        line = self.launch.line if self.launch else 1
        return check_rule("launcher-ranks-per-node-mismatch", {"ranks_per_node_matches": (rpn == want,)},
                          file=str(self.path), line=line,
                          detail=f"{rpn} ranks per node, {ctx.platform.name} has {want} devices per node")

    def cpu_bind(self) -> str | None:
        """The launch's --cpu-bind as depth:D or list:..., variables resolved; None when absent."""
        if self.launch is None:
            return None
        raw = option_str(self.launch, ("--cpu-bind", "-cpu-bind", "--cpu_bind"))
        if raw is None:
            return None
        raw = resolve(raw, self.outer, self.launch.line)
        mode = re.sub(r"^verbose,", "", raw)
        if mode == "depth":
            depth = option_int(self.launch, ("-d", "--depth", "-depth"), self.outer)
            return f"depth:{depth}" if depth else None
        return mode

    def final_env(self) -> dict[str, tuple[str, str, int]]:
        env: dict[str, tuple[str, str, int]] = {}
        for e in self.timeline:
            if e.kind == "export":
                env[e.name] = (e.value, e.file, e.line)
            elif e.kind == "unset":
                env.pop(e.name, None)
            elif e.kind == "launch":
                env.update(launch_env_options(e))
        return env

    def _check_compile(self, ctx: Context) -> list[Finding]:
        line = self._compile_line()
        if line is None:
            return []
        facts = context_facts(ctx, compile=True)
        where = dict(file=str(self.path), line=line, detail="the launch passes a torch.compile flag")
        return check_rule("deepspeed-compile", facts, **where) + check_rule("xpu-multinode-compile", facts, **where)


def read_shell_launcher(path: Path, text: str) -> LauncherFile:
    reader = _Reader(root=path.parent)
    outer = reader.read_text(text, str(path))
    launch = next((e for e in outer if e.kind == "launch" and e.name in MPI_LAUNCHERS | PROGRAMS), None)
    per_rank = reader.per_rank(launch) if launch is not None and launch.name in MPI_LAUNCHERS else None
    return LauncherFile(path=path, header=parse_header(text), outer=outer, per_rank=per_rank, launch=launch,
                        directives=directives(text), pbs=PbsDirectives.read(text))


def read_launcher(path: Path) -> "LauncherFile | StrategyTomlFile | DsConfigFile":
    """A shell launcher, a strategy.toml or a ds_config.json (by suffix)."""
    path = Path(path)
    try:
        if path.is_dir() or not path.exists():
            raise SpecError(f"--launcher {path}: not a file")
        text = path.read_text(errors="replace")
    except OSError as e:  # unreadable, or a name too long
        raise SpecError(f"cannot read --launcher {str(path)[:120]}: {e.strerror}") from None
    if path.suffix == ".toml":
        return StrategyTomlFile.read(path, text)
    if path.suffix == ".json":
        return DsConfigFile.read(path, text)
    return read_shell_launcher(path, text)

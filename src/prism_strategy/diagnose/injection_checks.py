"""Launch parameters that run a command: what a value pasted raw into a job script leaves behind
(a platform file's `master_addr_suffix = '"; cmd; "'`, a `cpu_bind` or `filesystems` with a newline
in it; issue 38). Read from the launcher's text, lexed as bash quotes it:

- an option value of the launch command (mpiexec/srun/... before the program it starts) holding a
  command substitution (`$(...)` or backquotes), or a `;` / `&&` / `|` ending the launch command
  among its options (what follows runs as its own command, and the program is not launched);
- an assignment of a rendezvous or layout variable (MASTER_ADDR, NRANKS, ...) followed by `;` and
  another command on its line;
- a `#PBS` / `#SBATCH` value holding `$(`, a backquote or `;`, and a command inside the directive
  block (qsub and sbatch stop reading directives at the first command: a newline in a value).

The per-rank command (`bash -lc "...; ..."`) is the launched program's argument, not a launch
parameter: `;` and `$(declare -f f)` there are how launchers are written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prism_strategy.diagnose.findings import Context, Finding, check_observed

if TYPE_CHECKING:
    from prism_strategy.diagnose.launcher_checks import LauncherFile

LAUNCHERS = frozenset({"mpiexec", "mpirun", "srun", "aprun", "torchrun", "jsrun", "prun"})
VALUE_OPTIONS = frozenset(
    {
        *("-n", "-np", "-N", "-ppn", "--ppn", "-npernode", "-d", "--depth", "-depth", "-c"),
        *("--cpu-bind", "-cpu-bind", "--cpu_bind", "--gpu-bind", "--mem-bind", "--env", "-env", "-genv", "-x"),
        *("--hostfile", "-hostfile", "-f", "--hosts", "-hosts", "-host", "--nodes", "--ntasks", "-t", "-p"),
        *("--ntasks-per-node", "--cpus-per-task", "--gpus-per-node", "--gpus-per-task", "--partition"),
        *("--nnodes", "--nproc-per-node", "--nproc_per_node", "--rdzv-endpoint", "--rdzv_endpoint"),
        *("--rdzv-backend", "--rdzv_backend", "--master-addr", "--master_addr", "--master-port", "--master_port"),
    }
)
"""Launch options that take the next word as their value (the others are flags)."""
LAUNCH_VARS = re.compile(
    r"^(?:export\s+)?(MASTER_ADDR|MASTER_PORT|NNODES|NRANKS|RANKS_PER_NODE|NRANKS_PER_NODE|WORLD_SIZE|"
    r"CPU_BIND\w*|DEPTH)="
)
_DIRECTIVE = re.compile(r"^#(PBS|SBATCH)\s")


@dataclass(frozen=True, slots=True)
class Word:
    text: str
    executes: bool
    """Holds a command substitution the shell runs ($(...) or `...`, outside single quotes)."""


def lex(text: str) -> tuple[list[Word], bool]:
    """The words of one command line as bash splits them, up to the first unquoted `;`, `&` or
    `|`; and whether another command follows there."""
    words: list[Word] = []
    cur, executes, quote, i, started = [], False, "", 0, False
    while i < len(text):
        c = text[i]
        if quote == "'":
            quote = "" if c == "'" else quote
        elif c == "\\" and i + 1 < len(text):
            cur.append(text[i : i + 2])
            i += 2
            started = True
            continue
        elif c == '"':
            quote = "" if quote == '"' else '"'
        elif c == "'" and not quote:
            quote = "'"
        elif c == "`" or (text.startswith("$(", i) and not text.startswith("$((", i)):
            executes = True
        elif not quote and c in " \t":
            if started:
                words.append(Word("".join(cur), executes))
            cur, executes, started = [], False, False
            i += 1
            continue
        elif not quote and c in ";&|":
            if started:
                words.append(Word("".join(cur), executes))
            return words, bool(text[i:].strip(" \t;&|"))
        cur.append(c)
        started = True
        i += 1
    if started:
        words.append(Word("".join(cur), executes))
    return words, False


_HEREDOC = re.compile(r"<<(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) with backslash-newline continuations joined; heredoc bodies
    (data: a job script another script writes) left out."""
    out, buf, first, until = [], "", 0, None
    for n, line in enumerate(text.splitlines(), 1):
        if until is not None:
            if (line.lstrip("\t") if until[0] else line) == until[1]:
                until = None
            continue
        if not line.lstrip().startswith("#") and (m := _HEREDOC.search(line.replace("<<<", ""))):
            until = (m.group(1) == "-", m.group(3))
        if not buf:
            first = n
        if line.endswith("\\") and not line.lstrip().startswith("#"):
            buf += line[:-1] + " "
            continue
        out.append((first, buf + line))
        buf = ""
    if buf:
        out.append((first, buf))
    return out


def _launch_problem(words: list[Word], more: bool) -> str | None:
    """What runs among a launch command's options (None: nothing)."""
    i = 1
    while i < len(words):
        w = words[i].text
        if not w.startswith("-"):
            return None  # the program the launcher starts, with its own arguments
        name, eq, _ = w.partition("=")
        if (
            eq
            and words[i].executes
            or (not eq and name in VALUE_OPTIONS and i + 1 < len(words) and words[i + 1].executes)
        ):
            return f"{words[0].text} option {name} runs a command substitution"
        i += 2 if not eq and name in VALUE_OPTIONS else 1
    if more:
        return f"a ';' or '&&' ends the {words[0].text} command among its options: what follows runs as its own command"
    return None


def scan(text: str) -> list[tuple[int, str]]:
    """(line, what) of every launch parameter that runs a command."""
    out: list[tuple[int, str]] = []
    lines = _logical_lines(text)
    last_directive = max((n for n, t in lines if _DIRECTIVE.match(t)), default=0)
    for n, line in lines:
        body = line.strip()
        if _DIRECTIVE.match(body):
            if re.search(r"\$\(|`|;", body):
                out.append((n, f"the directive {body[:60]!r} holds $(, ` or ;"))
            continue
        if not body or body.startswith("#"):
            continue
        if n < last_directive:
            out.append((n, f"a command inside the directive block ({body[:40]!r}): a newline in a directive value"))
            continue
        words, more = lex(body)
        start = 1 if words and words[0].text == "exec" else 0
        if len(words) > start and words[start].text.rsplit("/", 1)[-1] in LAUNCHERS:
            problem = _launch_problem(words[start:], more)
            if problem:
                out.append((n, problem))
        elif LAUNCH_VARS.match(body) and more:
            out.append((n, f"the {LAUNCH_VARS.match(body).group(1)} assignment is followed by ';' and a command"))
    return out


def check_injection(lf: "LauncherFile", ctx: Context) -> list[Finding]:
    try:
        text = lf.path.read_text(errors="replace")
    except OSError:
        return []
    out: list[Finding] = []
    for line, detail in scan(text):
        out += check_observed({"launch_parameter_executes": True}, ctx, file=str(lf.path), line=line, detail=detail)
    return out

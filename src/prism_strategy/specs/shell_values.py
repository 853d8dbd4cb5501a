"""The one layer every value passes before it reaches an emitted shell script (launch.pbs,
launch.slurm, torchrun.sh, commbench jobs, env.sh), whatever its source: a flag, a platform file's
[launch] table or [[queues]], an env profile, a plan file, a stored row.

Two kinds of value:
- free text (paths, job names, script arguments, model names, profile values) is written as one
  shell word by `quote` (Python's shlex.quote: single quotes, inside which the shell expands nothing);
- fields a scheduler or launcher reads with a grammar of its own (PBS `-l filesystems=a:b`, queues,
  walltimes, mpiexec --cpu-bind lists, host-name suffixes, accounts, `#PBS -k`) are checked against
  that grammar by `check_field`: directive lines (#PBS, #SBATCH) are comments to the shell, so
  quoting cannot protect them, and a value the grammar refuses is a mistake whatever it holds.

Control characters (a newline ends a directive block or a comment) are refused everywhere. It
lives in specs/ so that loading a platform file (specs/platform_file.py) refuses a bad [launch]
field as emit does: `plan` says so too.
"""

from __future__ import annotations

import re
import shlex

from prism_strategy.specs.errors import SpecError

CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")

_RANGE = r"\d+(?:-\d+)?"
GRAMMARS: dict[str, tuple[re.Pattern[str], str]] = {
    "filesystems": (
        re.compile(r"^[A-Za-z0-9_]+(?::[A-Za-z0-9_]+)*$"),
        "filesystem names joined by ':' (e.g. flare:home; ALCF's `-l filesystems=`)",
    ),
    "queue": (
        re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@,-]{0,127}$"),
        "a queue or partition name: letters, digits, _ . @ - (a Slurm list joined by ','; e.g. prod)",
    ),
    "walltime": (re.compile(r"^\d{1,3}:[0-5]\d:[0-5]\d$"), "HH:MM:SS (e.g. 01:00:00)"),
    "queue walltime": (re.compile(r"^(?:\d{1,3}:)?(?:[0-5]?\d:)?[0-5]?\d$"), "HH:MM:SS, H:MM:SS or MM:SS"),
    "cpu_bind": (
        re.compile(
            rf"^(?:verbose,)?(?:none|core|depth|numa|socket|list(?::{_RANGE}(?:,{_RANGE})*)+"
            r"|mask(?::(?:0x)?[0-9A-Fa-f]+)+"
            r"|cores|threads|sockets|ldoms|rank|rank_ldom"
            r"|(?:map_cpu|map_ldom):\d+(?:,\d+)*|(?:mask_cpu|mask_ldom):(?:0x)?[0-9A-Fa-f]+(?:,(?:0x)?[0-9A-Fa-f]+)*)$"
        ),
        "an mpiexec --cpu-bind value (core, depth, numa, socket, none, list:1-8:9-16, mask:0x3:0xc) or an srun "
        "one (cores, threads, sockets, rank, map_cpu:1,9, mask_cpu:0xfe,0xfe00)",
    ),
    "master_addr_suffix": (
        re.compile(r"^[A-Za-z0-9.-]{0,253}$"),
        "host-name characters (letters, digits, . -), e.g. .hsn.cm.aurora.alcf.anl.gov",
    ),
    "account": (
        re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$"),
        "a project (account) name: letters, digits, _ . + - (e.g. AuroraGPT)",
    ),
    "keep_output": (re.compile(r"^(?:n|[deo]{1,3})$"), "a `#PBS -k` value: n, or d e o combined (e.g. doe)"),
}
"""Each field with a grammar: the pattern and the words that say what it accepts."""


SHELLCHECK_LITERAL = "# shellcheck disable=SC2016  # values are single-quoted on purpose: nothing in them expands"
"""Line 3 of every emitted shell file (a directive before the first command covers the file)."""


def check_text(label: str, text: str) -> str:
    """Free text may contain anything printable; control characters (newlines) are refused because
    they would end a comment or a directive line."""
    if CONTROL_CHARS.search(text):
        raise SpecError(f"{label} {text!r} contains a control character (newline, tab, ...); remove it")
    return text


def quote(text: str, label: str = "value") -> str:
    """One shell word that expands to exactly `text` (bare when shlex finds it plain)."""
    return shlex.quote(check_text(label, text))


def check_field(field: str, value: object, where: str, *, required: bool = False) -> str:
    """`value` when it fits `field`'s grammar; else SpecError naming the field, where it was read
    and what the field accepts. An empty value means "not set" and passes unless `required`."""
    pattern, accepts = GRAMMARS[field]
    named = where if where.startswith("--") else f"{where}: {field}"  # a flag names itself
    if not isinstance(value, str):
        raise SpecError(f"{named} must be a string ({accepts}), got {value!r}")
    if required and not value:
        raise SpecError(f"{named} is empty; give {accepts}")
    if value and not pattern.match(value):
        raise SpecError(f"{named} {value!r} is not {accepts}; fix it")
    return value


LAUNCH_FIELDS = ("filesystems", "keep_output", "master_addr_suffix", "cpu_bind")
"""The string fields of a platform file's [launch] table that reach a job script."""


def check_launch(table: object, where: str) -> None:
    """A platform file's [launch] table as it reaches a job script: each field with a grammar
    checked (SpecError naming the first one that fails)."""
    if not isinstance(table, dict):
        raise SpecError(f"{where}: [launch] must be a table")
    for key in LAUNCH_FIELDS:
        if key in table:
            check_field(key, table[key], f"{where} [launch]")


def check_queues(queues: object, where: str) -> None:
    """Each [[queues]] entry's name and walltimes against their grammars."""
    if not isinstance(queues, list) or not all(isinstance(q, dict) for q in queues):
        raise SpecError(f"{where}: [[queues]] must be a list of tables")
    for q in queues:
        check_field("queue", q.get("name", ""), f"{where} [[queues]]")
        for key in ("max_walltime", "min_walltime"):
            if key in q:
                check_field("queue walltime", q[key], f"{where} [[queues]] {q.get('name')}: {key}")

"""The one edge every file the user hands us goes through: opened only if it is a regular file
(a FIFO, a device such as /dev/zero or a folder is refused without blocking or reading), read up to
a size cap, parsed (JSON, TOML, YAML) into plain data whose nesting depth, node count (YAML aliases
expanded) and numbers are checked, and the numbers a reader takes from it checked again against the
field's declared type and bounds (`finite_int`, `finite_float`). Every refusal is a SpecError of
one line naming the file, the field and the fix (the CLI's exit 2).

Why each bound (issue 38): a 975-level nesting parses, then overflows the recursion of whatever
walks it (json.dumps for --json); a 681-byte YAML alias bomb (PyYAML shares the aliased node, so
loading is cheap, but every walk of the result expands it: 9**9 leaves, 40-80 s and 3-4 GB);
`NaN`, `Infinity`, `1e309` are valid JSON/TOML/YAML floats that `int()` turns into a traceback.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomllib

from prism_strategy.specs.errors import SpecError

MAX_BYTES = 16 * 2**20
"""The largest config, model or platform file read (16 MiB): the largest real ones are a few
hundred KiB (an HF config.json with its id2label table; a ds_config is ~1 KiB)."""
MAX_DEPTH = 32
"""Deepest nesting of tables/lists accepted: real configs nest 4-5 levels (DeepSpeed's
zero_optimization.offload_optimizer.device is 3); Python's recursion limit is ~1,000."""
MAX_NODES = 1_000_000
"""Values in one parsed file, aliases expanded: 16 MiB of JSON holds at most ~8M, a real config a few
thousand; a YAML alias bomb of 9 levels expands to 9**9."""
ALIAS_BUDGET = 10_000
"""Values a YAML file may add through aliases (`*name`) beyond those it writes out: an anchor reused
a few times in a real file adds tens."""
MAX_INT = 2**63 - 1
"""No field of a config means a number past int64 (a count, a size in bytes, a degree)."""


_NOT_A_CONFIG = "no config nests so deep: pass the right file, or flatten that value"


def _where(path: Path | str, label: str) -> str:
    return f"{label} {path}" if label else str(path)


def require_regular(path: Path | str, label: str = "") -> None:
    """SpecError unless `path` is a regular file, checked by stat (nothing opened: a FIFO would
    block); for readers that stream a file too large to read whole (logs)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError) as e:
        raise SpecError(f"{_where(path, label)}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    if not stat.S_ISREG(mode):
        raise SpecError(
            f"{_where(path, label)}: cannot read it: {_kind(mode)}, not a regular file; pass the path of a file"
        )


def _kind(mode: int) -> str:
    return "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"


def read_bytes_capped(path: Path | str, label: str = "", cap: int = MAX_BYTES) -> bytes:
    """The file's bytes: refused (one line) if missing, not a regular file or over `cap` bytes.
    Opened non-blocking, so a FIFO without a writer is refused instead of waited on."""
    where = _where(path, label)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise SpecError(f"{where}: cannot read it: no such file; pass the path of an existing file") from None
    except (OSError, ValueError) as e:
        raise SpecError(
            f"{where}: cannot open it ({getattr(e, 'strerror', None) or e}); pass a readable file"
        ) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise SpecError(f"{where}: cannot read it: {_kind(mode)}, not a regular file; pass the path of a file")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(cap + 1)
        except OSError as e:
            raise SpecError(f"{where}: cannot read it ({e.strerror}); pass a readable file") from None
    if len(data) > cap:
        raise SpecError(
            f"{where}: cannot read it: larger than {cap // 2**20} MiB, not a file of this kind; pass the right file"
        )
    return data


def read_text_capped(path: Path | str, label: str = "", cap: int = MAX_BYTES) -> str:
    """read_bytes_capped, as UTF-8 text; a binary file (NUL bytes, not UTF-8) is refused."""
    raw = read_bytes_capped(path, label, cap)
    where = _where(path, label)
    if b"\0" in raw[:8192]:
        raise SpecError(f"{where}: cannot read it: a binary file, not text; pass a text file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{where}: cannot read it: not UTF-8 text; pass a text file") from None


def check_tree(data: Any, where: str, aliases_budget: int | None = None) -> None:
    """Depth, size and numbers of parsed data, walked without recursion and with shared nodes (YAML
    aliases) counted once per use: past MAX_DEPTH or MAX_NODES, a float that is not finite or an
    integer past MAX_INT is refused naming its dotted path."""
    budget = MAX_NODES if aliases_budget is None else aliases_budget
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    nodes = 0
    while stack:
        v, name, depth = stack.pop()
        nodes += 1
        if nodes > budget:
            what = "aliases expand to" if aliases_budget is not None else "holds"
            raise SpecError(f"{where}: {what} more than {budget:,} values; not a config, write it out plainly")
        if depth > MAX_DEPTH:
            top = name.split(".")[0].split("[")[0] or "(top)"
            raise SpecError(f"{where}: {top} nests deeper than {MAX_DEPTH} levels; {_NOT_A_CONFIG}")
        if isinstance(v, dict):
            stack.extend((x, f"{name}.{k}" if name else str(k), depth + 1) for k, x in v.items())
        elif isinstance(v, list | tuple):
            stack.extend((x, f"{name}[{i}]", depth + 1) for i, x in enumerate(v))
        else:
            _check_number(v, name, where)


def _check_number(v: Any, name: str, where: str) -> None:
    if isinstance(v, float) and not math.isfinite(v):
        raise SpecError(f"{where}: {name} = {v}: not a finite number; write a finite value")
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_INT:
        raise SpecError(f"{where}: {name} = {_short(v)}: past any value a config holds (> 2**63); fix the value")


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 24 else f"{s[:12]}...({len(s)} digits)"


def _json(text: str) -> Any:
    return json.loads(text)


def _toml(text: str) -> Any:
    return tomllib.loads(text)


MAX_YAML_BYTES = 256 * 2**10
"""YAML parses in pure Python (PyYAML's scanner: 1 MiB took 17.6 s on this loaded 2-core machine): a
YAML config over 256 KiB is refused unparsed (an Accelerate config is under 1 KiB)."""


def flow_depth(text: str) -> int:
    """The deepest nesting of [ and { in `text`, quoted strings and comments skipped: one linear
    pass, since PyYAML's scanner is quadratic in flow depth (1,200 levels: seconds)."""
    depth = deepest = 0
    quote, comment, prev = "", False, "\n"
    for ch in text:
        if comment:
            comment = ch != "\n"
        elif quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and prev in " \t\n":
            comment = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
        prev = ch
    return deepest


def _yaml(text: str) -> Any:
    """PyYAML's safe loader (no tag runs code); parse() bounds its time first (size, flow depth)
    and checks the tree with the alias budget after."""
    import yaml

    return yaml.load(text, Loader=yaml.SafeLoader)


PARSERS: dict[str, Callable[[str], Any]] = {"json": _json, "toml": _toml, "yaml": _yaml}


def parse(text: str, syntax: str, where: str) -> Any:
    """Text parsed as `syntax` and checked (check_tree); a parser's own error propagates (callers
    say which syntaxes they tried), nesting past the recursion limit is refused here."""
    if syntax == "yaml" and len(text) > MAX_YAML_BYTES:
        raise SpecError(
            f"{where}: larger than {MAX_YAML_BYTES // 2**10} KiB of YAML, not a config; pass the right file"
        )
    if syntax == "yaml" and flow_depth(text) > MAX_DEPTH:
        raise SpecError(f"{where}: nests deeper than {MAX_DEPTH} levels; {_NOT_A_CONFIG}")
    try:
        data = PARSERS[syntax](text)
    except RecursionError:
        raise SpecError(f"{where}: nests deeper than {MAX_DEPTH} levels; {_NOT_A_CONFIG}") from None
    unique = len(text) // 2 + 1
    check_tree(data, where, unique + ALIAS_BUDGET if syntax == "yaml" else None)
    return data


def load_file(path: Path | str, syntax: str, label: str = "", cap: int = MAX_BYTES) -> Any:
    """A JSON, TOML or YAML file read (read_text_capped) and parsed (parse); a syntax error is one line."""
    where = _where(path, label)
    text = read_text_capped(path, label, cap)
    try:
        return parse(text, syntax, where)
    except SpecError:
        raise
    except Exception as e:  # each parser's own error class; its first line says where
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SpecError(f"{where}: not valid {syntax.upper()} ({first}); fix the syntax") from None


def load_json(path: Path | str, label: str = "") -> Any:
    return load_file(path, "json", label)


def load_toml(path: Path | str, label: str = "") -> Any:
    return load_file(path, "toml", label)


def load_yaml(path: Path | str, label: str = "") -> Any:
    return load_file(path, "yaml", label)


def finite_int(v: Any, field: str, where: str, minimum: int = 0, maximum: int = MAX_INT) -> int:
    """An integer field: an int (or a float with an integral, finite value) in [minimum, maximum];
    a bool, a string, NaN, inf or a value out of bounds is refused naming the field."""
    ok = not isinstance(v, bool) and (
        isinstance(v, int) or (isinstance(v, float) and math.isfinite(v) and v.is_integer())
    )
    if not ok or not minimum <= v <= maximum:
        bounds = f">= {minimum}" if maximum == MAX_INT else f"in {minimum}..{maximum}"
        raise SpecError(f"{where}: {field} must be an integer {bounds}, got {_short(v)}; fix the value in the file")
    return int(v)


def finite_float(v: Any, field: str, where: str, minimum: float = 0.0, maximum: float = 1e15) -> float:
    """A number field: an int or finite float in [minimum, maximum], refused naming the field otherwise."""
    ok = not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(float(v))
    if not ok or not minimum <= v <= maximum:
        raise SpecError(
            f"{where}: {field} must be a finite number in {minimum:g}..{maximum:g}, got {_short(v)}; "
            "fix the value in the file"
        )
    return float(v)


def check_writable_folder(folder: Path, label: str = "") -> None:
    """SpecError unless `folder` is a folder this process can write, or can be made under its nearest
    existing parent; nothing is created (issue 38: StepMonitor on an unwritable folder failed only at
    its first step, mid-training)."""
    where = _where(folder, label)
    probe = Path(folder).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise SpecError(f"{where}: {probe} is a file, not a folder; pass a folder to write in")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise SpecError(f"{where}: {probe} is not writable by this process; pass a folder it can write")

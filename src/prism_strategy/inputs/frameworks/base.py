"""What every framework reader shares: the file loaded by content, the fields it read (used, or
ignored with the reason), and one-line errors naming the file, the field and the fix."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prism_strategy.emit.frameworks.models import framework_fields, renames
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.safe_files import finite_float, finite_int, parse, read_text_capped

FORMATS = ("torchtitan", "deepspeed", "accelerate", "hf-trainer", "peft")
"""What `plan --from` reads: torchtitan job TOML, DeepSpeed JSON, Accelerate YAML, HF
TrainingArguments JSON (a `to_json_string()` dump)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ConfigField:
    field: str
    """Dotted path in the file, e.g. `training.seq_len`, `zero_optimization.stage`."""
    value: Any
    keyword: str | None = None
    """The plan() keyword it sets (None: it sets the strategy, or is ignored)."""
    planned: Any = None
    """What the keyword was set to."""
    note: str = ""
    """Used: how it was read; ignored: why it does not reach the plan."""
    default: bool = False
    """Absent from the file: the framework's own default, which the framework runs with."""

    def to_dict(self) -> dict[str, Any]:
        d = {"field": self.field, "value": self.value}
        if self.keyword is not None:
            d |= {"keyword": self.keyword, "planned": self.planned}
        if self.default:
            d["default"] = True
        return d | ({"note": self.note} if self.note else {})


@dataclass(frozen=True, kw_only=True, slots=True)
class ConfigInputs:
    """One framework config, read: plan() keywords, the strategy it runs, and every field's fate."""

    path: Path
    format: str
    options: dict[str, Any]
    """plan() / build_scenario() keywords the file sets."""
    stated: frozenset[str]
    """The keywords the file states (the others are the framework's defaults: a flag wins silently)."""
    strategy: str | None
    """The strategy the config runs (its engine and stage), None where it leaves it open."""
    used: tuple[ConfigField, ...]
    ignored: tuple[ConfigField, ...]
    dp_fields: str = ""
    """The fields that set dp_degrees, for the error when they do not fit the layout."""
    offload: frozenset[str] = frozenset()
    """What the config offloads to host memory: "optimizer" (states + fp32 master), "params"."""
    offload_engine: str = ""
    """Whose offload: "deepspeed" or "fsdp" (their host-memory needs differ)."""
    dp_degrees: tuple[int, int] | None = None
    """(replicate, shard) data-parallel degrees the file fixes (shard -1: the ranks left), checked
    against the layout the plan gets."""
    assumed: tuple[str, ...] = ()
    """Values the plan needs that the file does not say: what was assumed, and the flag that says it."""
    content: dict[str, Any]
    """The parsed file, kept so `emit --format` can write it back with only the plan's fields changed."""

    def source_of(self, keyword: str) -> ConfigField:
        return next(f for f in self.used if f.keyword == keyword)


@dataclass(kw_only=True)
class Collector:
    """What a reader fills in as it walks the file."""

    path: Path
    options: dict[str, Any] = field(default_factory=dict)
    stated: set[str] = field(default_factory=set)
    used: list[ConfigField] = field(default_factory=list)
    ignored: list[ConfigField] = field(default_factory=list)
    strategy: str | None = None
    dp_degrees: tuple[int, int] | None = None
    dp_fields: str = ""
    offload: set[str] = field(default_factory=set)
    offload_engine: str = ""
    renamed: dict[str, tuple[str, str]] = field(default_factory=dict)
    """new dotted name -> (the file's older name, since when), filled by `renamed()`."""
    moved: list[tuple[str, str]] = field(default_factory=list)
    """(old, new) names `renamed()` moved, for a writer to move back (emit/frameworks/models.file_names)."""
    assumed: list[str] = field(default_factory=list)
    """Values the plan needs that the file does not say, with what was assumed and the flag to say it."""

    def named(self, name: str) -> tuple[str, str]:
        """(the field as the file names it, a note on the rename; "" when not renamed)."""
        parts = [self.renamed.get(n.strip(), (n.strip(), "")) for n in name.split(", ")]
        notes = [
            f"`{old}` is read as `{new.strip()}`: {since}"
            for (old, since), new in zip(parts, name.split(", "))
            if since
        ]
        return ", ".join(p[0] for p in parts), "; ".join(notes)

    def use(
        self,
        name: str,
        value: Any,
        keyword: str | None = None,
        planned: Any = None,
        *,
        note: str = "",
        default: bool = False,
    ) -> None:
        name, renamed = self.named(name)
        note = "; ".join(n for n in (note, renamed) if n)
        self.used.append(
            ConfigField(field=name, value=value, keyword=keyword, planned=planned, note=note, default=default)
        )
        if keyword is not None:
            self.options[keyword] = planned
            if not default:
                self.stated.add(keyword)

    def ignore(self, name: str, value: Any, reason: str) -> None:
        name, renamed = self.named(name)
        self.ignored.append(ConfigField(field=name, value=value, note="; ".join(n for n in (reason, renamed) if n)))

    def assume(self, what: str) -> None:
        """A value the plan needs that the file does not say: `seq_len: not in the file, assumed 1024 - pass --seq-len`."""
        self.assumed.append(what)

    def result(self, fmt: str, content: dict[str, Any]) -> ConfigInputs:
        self.account(content)
        return ConfigInputs(
            path=self.path,
            format=fmt,
            options=dict(self.options),
            stated=frozenset(self.stated),
            strategy=self.strategy,
            dp_degrees=self.dp_degrees,
            dp_fields=self.dp_fields,
            offload=frozenset(self.offload),
            offload_engine=self.offload_engine,
            used=tuple(self.used),
            ignored=tuple(self.ignored),
            assumed=tuple(self.assumed),
            content=content,
        )

    def account(self, content: dict[str, Any], prefix: str = "") -> None:
        """Every leaf of the file is used or ignored: one a reader did not name is ignored as unread."""
        named = {n for f in (*self.used, *self.ignored) for n in f.field.split(", ")}
        for path, value in leaves(content, prefix):
            if not any(path == n or path.startswith(n + ".") or path.startswith(n + ":") for n in named):
                self.ignore(path, value, UNREAD)

    def bad(self, name: str, problem: str, fix: str) -> SpecError:
        return bad(self.path, name, problem, fix)


UNREAD = "unknown: not a field this reader knows (a typo, a newer version's, or a custom module's); not modelled"


def known_fields(fmt: str, table: str) -> tuple[frozenset[str], str]:
    """(the fields of `table` the framework defines that do not change the plan, their reason):
    data/framework_fields.toml [<fmt>.known]."""
    entry = framework_fields().get(fmt, {}).get("known", {}).get(table, {})
    return frozenset(entry.get("fields", ())), entry.get("reason", "")


def rest(c: "Collector", fmt: str, sec: dict[str, Any], table: str, read_keys: set[str]) -> None:
    """The section's fields the reader did not read: a known one ignored with its true reason,
    any other listed as unknown."""
    known, reason = known_fields(fmt, table)
    for k, v in sec.items():
        if k not in read_keys:
            c.ignore(f"{table}.{k}", v, reason if k in known else UNREAD)


def renamed(c: "Collector", fmt: str, data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A copy of `data` with each older field name of data/framework_fields.toml moved to its
    current name (its value mapped where the meaning changed); the file's names stay in what is
    listed (Collector.named). Both names in one file: SpecError naming both."""
    out = copy.deepcopy(data)
    for entry in renames(fmt):
        old, new = entry["old"].split("."), entry["new"].split(".")
        src = _table(out, old[:-1])
        if src is None or old[-1] not in src:
            continue
        dst = _table(out, new[:-1], create=True)
        if dst is None:
            raise c.bad(".".join(new[:-1]), "must be a table/object", "write it as a section of keys")
        if new[-1] in dst:
            raise c.bad(
                entry["old"], f"and {entry['new']} are both set ({entry['since']})", f"keep {entry['new']} only"
            )
        value = src.pop(old[-1])
        mapped = entry.get("values", {})
        dst[new[-1]] = mapped.get(str(value).lower(), value) if mapped else value
        c.renamed[prefix + entry["new"]] = (prefix + entry["old"], entry["since"])
        c.moved.append((entry["old"], entry["new"]))
    return {k: v for k, v in out.items() if v != {} or data[k] == {}}  # a table emptied by the moves is gone


def _table(d: dict[str, Any], path: list[str], create: bool = False) -> dict[str, Any] | None:
    for k in path:
        if create and k not in d:
            d[k] = {}
        d = d.get(k)  # type: ignore[assignment]
        if not isinstance(d, dict):
            return None
    return d


def leaves(d: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in d.items():
        path = f"{prefix}{k}"
        out += leaves(v, path + ".") if isinstance(v, dict) and v else [(path, v)]
    return out


def bad(path: Path | str, name: str, problem: str, fix: str) -> SpecError:
    """The one line for a field that cannot be read: file, field, problem, fix."""
    return SpecError(f"--from {path}: {name} {problem}; {fix}")


def integer(c: Collector, name: str, v: Any, minimum: int) -> int:
    return finite_int(v, name, f"--from {c.path}", minimum)


def number(c: Collector, name: str, v: Any, minimum: float) -> float:
    return finite_float(v, name, f"--from {c.path}", minimum)


def boolean(c: Collector, name: str, v: Any) -> bool:
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    if not isinstance(v, bool):
        raise c.bad(name, f"must be true or false, got {v!r}", "fix the value in the file")
    return v


def refuse_non_dp(c: Collector, above: dict[str, Any]) -> None:
    """Degrees above 1 of tensor, pipeline, context or expert parallelism: bad input naming each."""
    if above:
        said = ", ".join(f"{k} = {v}" for k, v in above.items())
        keys = " and ".join(k.rsplit(".", 1)[-1] for k in above)
        raise SpecError(
            f"--from {c.path}: {said}: tensor/pipeline/context/expert parallelism is outside data parallelism, "
            f"and a plan of the data-parallel part alone would mislead; set {keys} to 1 to plan data parallelism alone"
        )


def section(c: Collector, data: dict[str, Any], name: str) -> dict[str, Any]:
    v = data.get(name, {})
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise c.bad(name, f"must be a table/object, got {type(v).__name__}", "write it as a section of keys")
    return v


def load(path: Path) -> tuple[str, Any]:
    """(syntax, parsed data) by the file's suffix, else by trying JSON, TOML and YAML in turn; read
    and checked by specs/safe_files.py (a regular file under its size cap, nesting, aliases, numbers)."""
    where = f"--from {path}"
    text = read_text_capped(path, "--from")
    suffix = path.suffix.lower()
    order = {".toml": ("toml",), ".json": ("json",), ".yaml": ("yaml",), ".yml": ("yaml",)}.get(
        suffix, ("json", "toml", "yaml")
    )
    errors = []
    for syntax in order:
        try:
            return syntax, parse(text, syntax, where)
        except SpecError:
            raise
        except Exception as e:  # each parser's own error class; the first line says where
            errors.append(f"{syntax}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    raise SpecError(f"{where}: not valid {' / '.join(order).upper()} ({'; '.join(errors)}); fix the syntax")

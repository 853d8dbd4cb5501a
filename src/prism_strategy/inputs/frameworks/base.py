"""What every framework reader shares: the file loaded by content, the fields it read (used, or
ignored with the reason), and one-line errors naming the file, the field and the fix."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.safe_files import finite_float, finite_int, parse, read_text_capped

FORMATS = ("torchtitan", "deepspeed", "accelerate", "hf-trainer")
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
        self.used.append(
            ConfigField(field=name, value=value, keyword=keyword, planned=planned, note=note, default=default)
        )
        if keyword is not None:
            self.options[keyword] = planned
            if not default:
                self.stated.add(keyword)

    def ignore(self, name: str, value: Any, reason: str) -> None:
        self.ignored.append(ConfigField(field=name, value=value, note=reason))

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


UNREAD = "not a field this reader knows: not modelled"


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

"""Load the data files: model presets, platforms, any HF config.json, a live nn.Module."""

from __future__ import annotations

import os
import sys
from difflib import get_close_matches
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import pydantic

from prism_strategy.specs.cluster import PlatformSpec, with_library
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.hf import load_hf_config, spec_from_hf_dict
from prism_strategy.specs.model import TransformerSpec
from prism_strategy.specs.platform_file import check_required, defaulted_fields, fill_not_read, flatten, with_base
from prism_strategy.specs.safe_files import load_toml

if sys.version_info >= (3, 11):
    pass
else:  # pragma: no cover
    pass

T = TypeVar("T")
DATA = resources.files("prism_strategy") / "data"


def read_toml(path: Any) -> dict:
    """A TOML file as a table, read through specs/safe_files.py (regular file, size cap, nesting,
    finite numbers); one line naming the file otherwise."""
    return load_toml(Path(str(path)))


@lru_cache(maxsize=64)
def type_adapter(cls: type) -> pydantic.TypeAdapter:
    """One validator per spec class: building a TypeAdapter generates its whole schema (~30 ms for
    a platform), which a calibration grid paid on every stored row it re-read."""
    return pydantic.TypeAdapter(cls)


def build(cls: type[T], data: dict, where: str) -> T:
    """Validate a data-file table into a spec dataclass, one clear line on failure."""
    try:
        return type_adapter(cls).validate_python(data, strict=False)
    except pydantic.ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or "(file)"
        raise SpecError(f"{where}: field {loc}: {err['msg']}") from None
    except TypeError as e:
        raise SpecError(f"{where}: {e}") from None


def _names(folder: str) -> list[str]:
    return sorted(p.name[:-5] for p in (DATA / folder).iterdir() if p.name.endswith(".toml"))


def model_names() -> list[str]:
    return _names("models")


def platform_names() -> list[str]:
    return _names("platforms")


def _looks_like_path(name: str) -> bool:
    """A name meant as a file (a suffix or a folder in it), not a mistyped preset name."""
    return name.endswith((".json", ".toml")) or "/" in name or name.startswith(".")


def _kind(p: Path, what: str) -> str:
    """'dir', 'file' or 'missing'; a name the file system refuses (too long) is bad input."""
    try:
        return "dir" if p.is_dir() else "file" if p.exists() else "missing"
    except (OSError, ValueError) as e:
        raise SpecError(
            f"unknown {what} {str(p)[:60]!r}...: neither a preset nor a usable path "
            f"({getattr(e, 'strerror', None) or e})"
        ) from None


_ORIGIN: dict[str, list[str]] = {}
"""What each loaded model (by name) and platform ("platform:<name>") was loaded from, every argument
in the order first loaded: what a printed follow-up command passes to load it again
(model_argument, platform_argument). Several: a user's file may carry a preset's name."""


def _remember(key: str, argument: str) -> None:
    seen = _ORIGIN.setdefault(key, [])
    if argument not in seen:
        seen.append(argument)


def _origin(key: str, loads_it: Any) -> str | None:
    """The newest argument that loads the same spec again (None when none does)."""
    for argument in reversed(_ORIGIN.get(key, [])):
        try:
            if loads_it(argument):
                return argument
        except SpecError:  # the file moved or went since it was loaded (a stored run keeps the architecture)
            continue
    return None


def forget_loaded() -> None:
    """Every model and platform loaded so far, and where each came from, forgotten: as in a fresh
    process (a test of what a new command sees, a benchmark's cold start)."""
    _cached_model.cache_clear()
    _cached_platform.cache_clear()
    _ORIGIN.clear()


def load_model(name_or_path: str) -> TransformerSpec:
    """A preset name, a path to a preset .toml, or a path to an HF config.json (or its folder)."""
    spec = _cached_model(name_or_path)
    _remember(spec.name, name_or_path)
    return spec


@cache
def _cached_model(name_or_path: str) -> TransformerSpec:
    return _load_model(name_or_path)


def nearest(given: str, names: list[str]) -> str:
    """'did you mean X? ' for the closest valid name (difflib), '' when none is close."""
    near = get_close_matches(given, names, n=1)
    return f"did you mean {near[0]!r}? " if near else ""


def _load_model(name_or_path: str) -> TransformerSpec:
    p = Path(name_or_path)
    if name_or_path in model_names():
        path = DATA / "models" / f"{name_or_path}.toml"
        return build(TransformerSpec, read_toml(path), f"model preset {name_or_path}")
    kind = _kind(p, "model")
    if kind == "missing" and _looks_like_path(name_or_path):
        raise SpecError(
            f"model file {_path_text(p)} does not exist; give the path to a config.json "
            "(or its folder), a preset .toml, or a preset name (`prism-strategy models`)"
        )
    if p.suffix == ".toml" and kind == "file":
        return build(TransformerSpec, read_toml(p), str(p))
    if kind == "dir" and (p / "config.json").exists():
        return load_hf_config(p / "config.json")
    if kind == "dir":
        raise SpecError(
            f"model folder {_path_text(p)} has no config.json; give the folder of a Hugging Face model "
            "(its config.json), the config.json itself, or a preset .toml"
        )
    if p.suffix == ".json" and kind == "file":
        return load_hf_config(p)
    raise SpecError(
        f"unknown model {name_or_path!r}; {nearest(name_or_path, model_names())}use a preset "
        f"({', '.join(model_names())}) or a path to a config.json"
    )


def load_platform(name_or_path: str) -> PlatformSpec:
    """A preset name or a platform TOML; a user's file may inherit from a preset (`base = ...`)."""
    spec = _cached_platform(name_or_path)
    _remember(f"platform:{spec.name}", name_or_path)
    return spec


@cache
def _cached_platform(name_or_path: str) -> PlatformSpec:
    p = Path(name_or_path)
    if name_or_path in platform_names():
        raw, where, user = preset_raw(name_or_path), f"platform {name_or_path}", False
    else:
        kind = _kind(p, "platform")
        if kind == "missing" and _looks_like_path(name_or_path):
            raise SpecError(
                f"platform file {_path_text(p)} does not exist; give the path to a platform "
                "TOML or a preset name (`prism-strategy platforms`)"
            )
        if p.suffix != ".toml" or kind != "file":
            raise SpecError(
                f"unknown platform {name_or_path!r}; {nearest(name_or_path, platform_names())}use one of "
                f"{', '.join(platform_names())} "
                "or a path to a platform .toml"
            )
        raw, where, user = with_base(flatten(read_toml(p), str(p)), str(p), preset_raw), str(p), True
    raw = with_library(raw, where)
    check_required(raw, where)
    raw = fill_not_read(raw)
    defaulted = defaulted_fields(raw) if user else ()
    return PlatformSpec.from_flat(raw | {"defaulted": defaulted}, where)


@cache
def preset_raw(name: str) -> dict[str, Any]:
    """A preset's table, its own base (if any) merged in."""
    if name not in platform_names():
        raise SpecError(f"base {name!r} is not a platform preset; use one of {', '.join(platform_names())}")
    where = f"platform {name}"
    return with_library(
        with_base(flatten(read_toml(DATA / "platforms" / f"{name}.toml"), where), where, preset_raw), where
    )


def _path_text(p: Path) -> str:
    """The path once, absolute and normalised ('..' folded; links kept, as the user named them)."""
    return repr(os.path.abspath(p))


def model_argument(spec: TransformerSpec) -> str:
    """The --model value that loads `spec` again (what a printed follow-up command passes): the
    preset name or path it was loaded from, else its name (a live module has no file)."""
    return _origin(spec.name, lambda a: _cached_model(a) == spec) or spec.name


def platform_argument(platform: PlatformSpec) -> str:
    """The --platform value that loads this platform again: its preset name or the file it came from."""
    return _origin(f"platform:{platform.name}", lambda a: _cached_platform(a) == platform) or platform.name


def spec_from_module(module: Any, *, name: str = "module") -> TransformerSpec:
    """A live nn.Module: read its HF config when it has one, else count its parameters and
    infer the block structure from the largest repeated child ModuleList."""
    cfg = getattr(module, "config", None)
    if cfg is not None and hasattr(cfg, "to_dict"):
        return spec_from_hf_dict(cfg.to_dict(), name=name, source=f"live module {type(module).__name__}")
    raise SpecError(
        f"module {type(module).__name__} has no Hugging Face config; pass a TransformerSpec or use --traced, "
        "which measures the real module"
    )

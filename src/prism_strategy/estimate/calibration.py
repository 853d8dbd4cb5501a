"""Calibration files: platform values fitted to measurements (see bench/fit/calibrate.py), applied
to a PlatformSpec so every later estimate uses them and says so in its provenance."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from prism_strategy.specs.cluster import PlatformSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.presets import read_toml

FITTED = (
    "achievable_fraction",
    "peak_tflops_bf16",
    "peak_tflops_fp32",
    "intra_bw_gbps",
    "intra_ring_bw_gbps",
    "nic_bw_gbps",
    "intra_latency_us",
    "inter_latency_us",
    "collective_overhead_us",
    "scaleout_overhead_us",
    "per_tensor_overhead_us",
    "kernel_launch_us",
    "activation_factor",
    "framework_reserve_gib",
    "allocator_cache_factor",
    "grad_path_us_per_tensor.ddp",
    "grad_path_us_per_tensor.fsdp2",
    "grad_path_us_per_tensor.deepspeed",
    "nccl_scale.base_latency",
    "nccl_scale.intra_latency",
    "nccl_scale.net_latency",
    "nccl_scale.intra_bw",
    "nccl_scale.inter_bw",
)
"""Dotted names are entries of a platform table (grad_path_us_per_tensor.<engine>, nccl_scale.<factor>)."""


def platform_value(p: PlatformSpec, name: str) -> float | None:
    """A fitted value of the platform; a dotted name is an entry of a table, None when absent."""
    if "." in name:
        table, key = name.split(".", 1)
        return p.value(table).get(key)
    return float(p.value(name))


def with_value(p: PlatformSpec, name: str, v: float) -> PlatformSpec:
    if "." in name:
        table, key = name.split(".", 1)
        return p.with_values(**{table: p.value(table) | {key: v}})
    return p.with_values(**{name: v})


def default_calibration_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "prism-strategy" / "calibration"


def write_calibration(
    path: Path,
    *,
    platform: str,
    fingerprint: dict[str, Any],
    values: dict[str, float],
    runs: int,
    errors: dict[str, float],
    terms: list[str] | tuple[str, ...] = (),
) -> None:
    """TOML written by hand (strings JSON-escaped, which TOML basic strings accept); atomic rename.
    terms: what the fit set (the others in [values] are the preset's, held)."""
    lines = [f"platform = {json.dumps(platform)}", f"runs = {runs}", f"terms = {json.dumps(list(terms))}"]
    lines += ["", "[fingerprint]"]
    lines += [
        f"{k} = {json.dumps(str(v))}"
        for k, v in fingerprint.items()
        if k in ("host", "torch", "backend", "platform", "date", "code")
    ]
    lines += ["", "[values]"] + [f"{json.dumps(k) if '.' in k else k} = {float(v)!r}" for k, v in values.items()]
    lines += ["", "[error_pct]"] + [f"{k} = {float(v)!r}" for k, v in errors.items()]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)


def load_calibration(path: str | Path) -> dict[str, Any]:
    data = read_toml(path)
    if not isinstance(data.get("values"), dict) or "platform" not in data:
        raise SpecError(
            f"{path} is not a calibration file (needs `platform` and a [values] table); "
            "write one with `prism-strategy calibrate`"
        )
    unknown = set(data["values"]) - set(FITTED)
    if unknown:
        raise SpecError(f"{path}: unknown calibrated values {sorted(unknown)}")
    return data


def calibration_note(data: dict[str, Any], source: str) -> str:
    """Which terms, when, which file (last: the plan's caption names it): what provenance and
    compare's caption say of a calibration."""
    fp = data.get("fingerprint", {})
    terms = data.get("terms")
    what = ", ".join(terms) if isinstance(terms, list) and terms else "every [values] entry"
    date = fp.get("date") or "undated"
    return (
        f"calibrated: {what} fitted to {data.get('runs', '?')} runs on {fp.get('host', '?')} "
        f"(torch {fp.get('torch', '?')}) on {date}, {source}"
    )


def apply_calibration(platform: PlatformSpec, data: dict[str, Any], source: str) -> PlatformSpec:
    if data["platform"] != platform.name:
        raise SpecError(f"calibration {source} is for platform {data['platform']!r}, not {platform.name!r}")
    values = {k: float(v) for k, v in data["values"].items()}
    note = calibration_note(data, source)
    sources = dict(platform.sources) | {k: note for k in values}
    tables: dict[str, dict[str, float]] = {}
    for k in [k for k in values if "." in k]:
        table, key = k.split(".", 1)
        tables.setdefault(table, dict(platform.value(table)))[key] = values.pop(k)
    return platform.with_values(**values, **tables, sources=sources)


def same_setup(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """A calibration applies automatically only to the same platform, torch and backend (host names
    differ between the nodes of one cluster, so they are recorded, not matched)."""
    return all(a.get(k) == b.get(k) for k in ("platform", "torch", "backend"))


def find_calibration(platform: PlatformSpec, current: dict[str, Any]) -> Path | None:
    """The cached calibration for this platform when its fingerprint matches `current`."""
    path = default_calibration_dir() / f"{platform.name}.toml"
    if not path.exists():
        return None
    try:
        data = load_calibration(path)
    except SpecError:
        return None
    return path if same_setup(data.get("fingerprint", {}) | {"platform": data["platform"]}, current) else None


def calibrated_platform(platform: PlatformSpec, calibration: str | None) -> PlatformSpec:
    """calibration: a file, "auto" (the cached one when its fingerprint matches), or None / "none"."""
    if calibration in (None, "none"):
        return platform
    if calibration == "auto":
        from importlib import metadata

        try:
            torch_version = metadata.version("torch")
        except metadata.PackageNotFoundError:
            return platform
        found = find_calibration(
            platform, {"platform": platform.name, "torch": torch_version, "backend": platform.backend}
        )
        return platform if found is None else apply_calibration(platform, load_calibration(found), str(found))
    return apply_calibration(platform, load_calibration(calibration), str(calibration))

"""Where and with what a measurement was made: host, platform, versions, env, code revision."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from prism_strategy.specs.libraries import collective_prefixes, runtime_prefixes

ENV_PREFIXES = (*collective_prefixes(), "TORCH_", *runtime_prefixes(), "OMP_", "MASTER_", "I_MPI_", "DS_")


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def code_revision() -> str:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if out.returncode == 0:
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return f"prism-strategy {_version('prism-strategy') or 'unknown'}"


def fingerprint(*, platform: str, backend: str, strategy_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything that decides whether two measurements are comparable."""
    return {
        "host": socket.gethostname(),
        "platform": platform,
        "backend": backend,
        "torch": _version("torch"),
        "deepspeed": _version("deepspeed"),
        "oneccl": _version("oneccl_bind_pt") or os.environ.get("CCL_ROOT", "").rstrip("/").split("/")[-1] or None,
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
        "strategy_config": strategy_config or {},
        "code": code_revision(),
        "date": time.strftime("%Y-%m-%d"),
    }

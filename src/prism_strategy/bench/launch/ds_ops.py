"""DeepSpeed's JIT-built ops, built once before ranks start, in this project's own extensions
folder, and a build lock a killed build left behind named instead of waited on.

DeepSpeed on CPU (DS_ACCELERATOR=cpu) builds its shared-memory comm op (ShareMemCommBuilder,
deepspeed/ops/op_builder/cpu/comm.py) with torch.utils.cpp_extension.load on first use, under a
torch FileBaton lock: `<TORCH_EXTENSIONS_DIR>/<op>/lock`, created with O_CREAT | O_EXCL and held
open by the building process until it removes it (torch/utils/file_baton.py). A build killed
midway leaves the file with no process holding it, and every later build waits on it forever:
every rank of a ZeRO run then never reports. Here: one build in one process before the launch
(its own timeout), and a lock no process holds is reported with its path and the fix.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from prism_strategy.specs.errors import SpecError

BUILD = (
    "from deepspeed.accelerator import get_accelerator\n"
    "b = get_accelerator().create_op_builder('ShareMemCommBuilder')\n"
    "b is None or b.load()\n"
)
BUILD_TIMEOUT_S = 900.0
"""A first build takes ~30 s, minutes on a busy machine."""


def extensions_dir(env: dict[str, str] | os._Environ = os.environ) -> Path:
    """TORCH_EXTENSIONS_DIR when set (the Makefile exports one), else this project's folder in
    the user cache: never torch's shared ~/.cache/torch_extensions, which other projects lock."""
    if env.get("TORCH_EXTENSIONS_DIR"):
        return Path(env["TORCH_EXTENSIONS_DIR"])
    cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "prism-strategy" / "torch_extensions"


def _held_paths() -> set[str]:
    """Every file some process on this machine holds open (Linux /proc; empty where unreadable)."""
    held = set()
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            for fd in fd_dir.iterdir():
                try:
                    held.add(os.readlink(fd))
                except OSError:
                    continue
        except OSError:
            continue
    return held


def stale_locks(ext_dir: Path) -> list[Path]:
    """Build locks under ext_dir that no process holds open: left by a build that was killed."""
    locks = sorted(ext_dir.glob("*/lock")) if ext_dir.is_dir() else []
    if not locks:
        return []
    held = _held_paths()
    return [p for p in locks if str(p.resolve()) not in held]


def stale_lock_error(locks: list[Path]) -> SpecError:
    paths = " ".join(str(p) for p in locks)
    return SpecError(
        f"DeepSpeed's op build lock {paths} is stale: no process holds it (a build killed midway left it), "
        f"and every ZeRO rank would wait on it until its timeout; remove it: rm {paths}"
    )


def prepare_deepspeed_ops(env: dict[str, str]) -> None:
    """Before ranks start: refuse a stale lock, then build the CPU op once in one process."""
    if env.get("DS_ACCELERATOR") != "cpu" or importlib.util.find_spec("deepspeed") is None:
        return
    ext = extensions_dir(env)
    if stale := stale_locks(ext):
        raise stale_lock_error(stale)
    before = set(ext.glob("*/lock")) if ext.is_dir() else set()
    try:
        done = subprocess.run(
            [sys.executable, "-c", BUILD], env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        for lock in set(ext.glob("*/lock")) - before:  # our build's lock: not left to block the next run
            lock.unlink(missing_ok=True)
        raise SpecError(
            f"building DeepSpeed's CPU comm op in {ext} took over {BUILD_TIMEOUT_S:.0f} s; "
            "run it again on a less busy machine"
        ) from None
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SpecError(f"building DeepSpeed's CPU comm op in {ext} failed: {last[:300]}")

"""What the collapse capture (runtime/forensics.py) reads from the process besides the
collectives: the caching allocator's state (device-only branch), the CCL / NCCL / libfabric /
allocator environment, and the training thread's run-queue wait (Linux schedstat)."""

from __future__ import annotations

import os
import resource
from typing import Any

import torch

from prism_strategy.specs.libraries import collective_prefixes, runtime_prefixes, torch_prefixes

ENV_PREFIXES = (*collective_prefixes(), "MPICH_", *torch_prefixes(), *runtime_prefixes())
"""The collective libraries', their torch wrappers' and device runtimes' variables
(specs/libraries.py), and Cray MPICH's."""
ENV_NAMES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_XPU_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "OMP_NUM_THREADS")


def comm_env() -> dict[str, str]:
    env = os.environ
    return {k: env[k] for k in sorted(env) if k.startswith(ENV_PREFIXES) or k in ENV_NAMES}


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return None


def _largest_free_block(mod: Any) -> int | None:
    snap = getattr(mod, "memory_snapshot", None)
    if snap is None:
        return None
    try:
        blocks = [b for seg in snap() for b in seg.get("blocks", ()) if b.get("state") == "inactive"]
    except (RuntimeError, TypeError, AttributeError):
        return None
    return max((int(b.get("size", 0)) for b in blocks), default=0)


def allocator_state(device: torch.device) -> dict[str, Any]:
    """The caching allocator's state now (device-only branch); on CPU what is not available."""
    if device.type == "cpu":
        return {
            "available": False,
            "why": "CPU tensors use the system allocator: no caching-allocator statistics "
            "(allocated, reserved, num_alloc_retries, segments, free blocks); process RSS instead",
            "rss_bytes": _rss_bytes(),
        }
    mod = getattr(torch, device.type, None)
    stats_fn = getattr(mod, "memory_stats", None)
    if stats_fn is None:
        return {"available": False, "why": f"torch.{device.type} has no memory_stats"}
    st = stats_fn(device)
    return {
        "available": True,
        "allocated_bytes": st.get("allocated_bytes.all.current"),
        "reserved_bytes": st.get("reserved_bytes.all.current"),
        "num_alloc_retries": st.get("num_alloc_retries"),
        "num_ooms": st.get("num_ooms"),
        "segments": st.get("segment.all.current"),
        "largest_free_block_bytes": _largest_free_block(mod),
    }


class RunQueue:
    """Seconds the training thread has waited runnable for a core (Linux schedstat; None
    elsewhere). The file is opened once per window, in the training thread, and re-read with pread."""

    def __init__(self) -> None:
        try:
            self.fd: int | None = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self.fd = None

    def wait_s(self) -> float | None:
        if self.fd is None:
            return None
        try:
            return int(os.pread(self.fd, 128, 0).split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

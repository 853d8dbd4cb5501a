"""What `StepMonitor` keeps besides its file: who this rank is (rank, world, device, node), the
CPUs it may run on, and the gathered rows it detects on (the warm-up baseline and a bounded
recent window)."""

from __future__ import annotations

import os
from collections import deque
from typing import Any

import numpy as np
import torch

from prism_strategy.analysis.detect import Series


def _identity(ctx: Any) -> tuple[int, int, torch.device]:
    """rank, world size and device from ctx, else the process group, else the launcher env."""
    device = getattr(ctx, "device", None) if ctx is not None else None
    if ctx is not None:
        rank, world = int(ctx.rank), int(ctx.world_size)
    elif torch.distributed.is_available() and torch.distributed.is_initialized():
        rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    else:
        env = os.environ
        rank = int(env.get("RANK", env.get("PMI_RANK", env.get("PALS_RANKID", "0"))))
        world = int(env.get("WORLD_SIZE", env.get("PMI_SIZE", "1")))
    return rank, world, torch.device(device) if device is not None else torch.device("cpu")


def _placement(ctx: Any) -> dict[str, int]:
    """local rank, ranks per node and node index where ctx knows them (what forensics groups by)."""
    out: dict[str, int] = {}
    for key in ("local_rank", "ranks_per_node"):
        val = getattr(ctx, key, None) if ctx is not None else None
        if isinstance(val, int):
            out[key] = val
    if "ranks_per_node" in out and out["ranks_per_node"] > 0 and ctx is not None:
        out["node"] = int(ctx.rank) // out["ranks_per_node"]
    return out


def _cpus() -> int:
    """CPUs this process may run on (what an oversubscribed host is measured against)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class _History:
    """Gathered rows: the first `keep_first` steps (the baseline) and the last `keep_last`."""

    def __init__(self, keep_first: int, keep_last: int) -> None:
        self.keep_first, self.keep_last = keep_first, keep_last
        self.first: np.ndarray | None = None
        self.recent: deque[np.ndarray] = deque()

    def add(self, block: np.ndarray) -> None:
        n_first = 0 if self.first is None else self.first.shape[1]
        take = max(0, min(self.keep_first - n_first, block.shape[1]))
        if take:
            head = block[:, :take]
            self.first = head if self.first is None else np.concatenate([self.first, head], axis=1)
            block = block[:, take:]
        if block.shape[1]:
            self.recent.append(block)
        while self.recent and sum(b.shape[1] for b in self.recent) - self.recent[0].shape[1] >= self.keep_last:
            self.recent.popleft()

    def series(self, ranks: tuple[int, ...]) -> Series:
        parts = ([self.first] if self.first is not None else []) + list(self.recent)
        return Series.from_block(ranks, np.concatenate(parts, axis=1))

"""`init_distributed()`: one call that sets up the process group from whatever launched this
process, the same way on XPU (xccl), CUDA (nccl) and CPU (gloo), and returns a `DistContext`.

Order matters and is fixed: read the launcher's variables -> pick the device and set it as
this process's device -> init the process group (with a timeout; `device_id` only on CUDA,
never on XPU: DOMAIN 4) -> learn ranks per node. Meshes are built on first use, so DataLoader
workers created before touching `ctx.mesh_*` are forked before any mesh communicator exists.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from typing import Any

import torch
import torch.distributed as dist

from prism_strategy.runtime.launch_env import (
    LaunchEnv,
    Launcher,
    master_address,
    parse_launch_env,
    resolve_ranks_per_node,
)
from prism_strategy.specs.cluster import Layout
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.libraries import device_names, library_of_device
from prism_strategy.strategies import MeshAxis

DEVICE_ENV = "PRISM_DEVICE"
"""Force the device kind (xpu, cuda or cpu), e.g. gloo tests on a GPU machine."""
_BACKENDS = {d: library_of_device(d).torch_backend for d in device_names()}
"""torch's backend per device type, from the collective library registry (specs/libraries.py)."""


@dataclass(frozen=True, kw_only=True)
class DistContext:
    """Where this process sits in the job. Meshes are built on first use."""

    rank: int
    local_rank: int
    world_size: int
    nodes: int
    ranks_per_node: int
    device: torch.device
    backend: str
    launcher: Launcher

    @property
    def layout(self) -> Layout:
        return Layout(nodes=self.nodes, ranks_per_node=self.ranks_per_node)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    @cached_property
    def mesh_1d(self) -> Any:
        """All ranks on one shard axis (FSDP)."""
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh(self.device.type, (self.world_size,), mesh_dim_names=(str(MeshAxis.SHARD),))

    @cached_property
    def mesh_2d(self) -> Any:
        """replicate = nodes, shard = ranks per node (HSDP); ranks are node-contiguous."""
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh(
            self.device.type,
            (self.nodes, self.ranks_per_node),
            mesh_dim_names=(str(MeshAxis.REPLICATE), str(MeshAxis.SHARD)),
        )

    def barrier(self) -> None:
        dist.barrier()

    def destroy(self) -> None:
        """Tear down the process group (idempotent)."""
        if dist.is_initialized():
            dist.destroy_process_group()

    def __enter__(self) -> "DistContext":
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        """A block that ended normally waits for every rank first (end_group); one that raised
        only tears down (its peers may never arrive)."""
        if exc_type is None:
            end_group()
        self.destroy()

    def __str__(self) -> str:
        return (
            f"RANK({self.rank}/{self.world_size})-NODES({self.nodes})-RPN({self.ranks_per_node}) "
            f"{self.device}/{self.backend} via {self.launcher}"
        )


def end_group() -> None:
    """End the process group on every rank: a barrier, then destroy it, so no rank's interpreter
    exits while a peer still talks to it and with gloo's threads still joinable (`terminate called
    without an active exception`, an abort after the results were written)."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def pick_device_kind(env: dict[str, str] | os._Environ) -> str:
    """xpu, then cuda, then cpu; PRISM_DEVICE overrides."""
    forced = env.get(DEVICE_ENV, "").strip().lower()
    if forced:
        if forced not in _BACKENDS:
            raise SpecError(f"{DEVICE_ENV}={forced!r} is not a device kind; choose xpu, cuda or cpu")
        return forced
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        return "xpu"
    if torch.cuda.is_available():
        return "cuda"
    return "cpu"


def _device_index(local_rank: int, count: int, kind: str) -> int:
    """Device for this rank: local_rank, or 0 when the launcher gives each rank its own single
    visible device (ZE_AFFINITY_MASK / CUDA_VISIBLE_DEVICES per rank)."""
    if count < 1:
        raise SpecError(f"no {kind} device is visible to local rank {local_rank}; check the affinity mask")
    if count == 1:
        return 0
    if local_rank >= count:
        raise SpecError(
            f"local rank {local_rank} but only {count} {kind} devices are visible; launch at most one rank per device"
        )
    return local_rank


def set_local_device(kind: str, local_rank: int) -> torch.device:
    """Make this rank's device current *before* the process group exists."""
    if kind == "xpu":  # device-only: XPU (Aurora); torch.xpu.set_device before init_process_group
        index = _device_index(local_rank, torch.xpu.device_count(), kind)
        torch.xpu.set_device(index)
        return torch.device("xpu", index)
    if kind == "cuda":  # device-only: CUDA
        index = _device_index(local_rank, torch.cuda.device_count(), kind)
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def _export_torchrun_env(le: LaunchEnv, addr: str, rpn: int | None) -> None:
    """Mirror the launcher's answer as the torchrun contract (RANK, WORLD_SIZE, ...) for libraries
    that read it (DeepSpeed, Accelerate). Never overrides a variable already set."""
    values = {
        "RANK": le.rank,
        "LOCAL_RANK": le.local_rank,
        "WORLD_SIZE": le.world_size,
        "MASTER_ADDR": addr,
        "MASTER_PORT": le.master_port,
    }
    if rpn is not None:
        values["LOCAL_WORLD_SIZE"] = le.local_world_size or rpn
    for key, value in values.items():
        os.environ.setdefault(key, str(value))


def _init_group(le: LaunchEnv, backend: str, device: torch.device, timeout: timedelta) -> None:
    if dist.is_initialized():
        raise SpecError(
            "a process group already exists; call init_distributed() once per process (or ctx.destroy() first)"
        )
    kw: dict[str, Any] = dict(backend=backend, timeout=timeout, rank=le.rank, world_size=le.world_size)
    if device.type == "cuda":  # device-only: CUDA binds the group to the device; never on XPU (DOMAIN 4)
        kw["device_id"] = device
    if le.world_size == 1:
        kw["store"] = dist.HashStore()
    else:
        kw["init_method"] = "env://"
    dist.init_process_group(**kw)


def _ranks_per_node_from_hosts() -> int:
    """Ranks per node from every rank's hostname, when the launcher does not say."""
    hosts: list[str | None] = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, socket.gethostname())
    counts = {hosts.count(h) for h in set(hosts)}
    if len(counts) != 1:
        raise SpecError(
            f"nodes run different numbers of ranks ({sorted(counts)}); run the same number of ranks on every node"
        )
    return counts.pop()


def init_distributed(*, ranks_per_node: int | None = None, timeout_s: float = 600) -> DistContext:
    """Set up the process group from the launcher's environment; return where this rank sits.

    ranks_per_node: override what the launcher says (a 2x2 mesh on one CPU machine stands in
    for 2 nodes x 2 devices). timeout_s: collective timeout, so a hang ends in an error.
    """
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
        raise SpecError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    le = parse_launch_env(os.environ)
    rpn = resolve_ranks_per_node(le, ranks_per_node)
    addr = master_address(le, rpn)
    kind = pick_device_kind(os.environ)
    device = set_local_device(kind, le.local_rank)
    backend = _BACKENDS[kind]
    _export_torchrun_env(le, addr, rpn)
    _init_group(le, backend, device, timedelta(seconds=timeout_s))
    if rpn is None:
        rpn = _ranks_per_node_from_hosts()
    return DistContext(
        rank=le.rank,
        local_rank=le.local_rank,
        world_size=le.world_size,
        nodes=le.world_size // rpn,
        ranks_per_node=rpn,
        device=device,
        backend=backend,
        launcher=le.launcher,
    )


def destroy() -> None:
    """Tear down the default process group, if any."""
    if dist.is_initialized():
        dist.destroy_process_group()

"""Read who-am-I from whatever launched this process: torchrun, mpiexec (PALS/PMI on Aurora),
OpenMPI's mpirun, Slurm's srun, or nothing (a plain single-process run).

Pure functions over an env mapping: no torch import, so they are unit-tested directly. One
launcher is chosen by priority (torchrun > OpenMPI > PALS/PMI > Slurm, most specific first:
Slurm variables leak from an allocation into everything started inside it); inside that
launcher missing or contradictory variables raise a SpecError naming them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from prism_strategy.specs.errors import SpecError

Launcher = Literal["torchrun", "pals", "openmpi", "slurm", "single"]
DEFAULT_MASTER_PORT = 29500


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchEnv:
    """What the launcher said about this process."""

    launcher: Launcher
    rank: int
    local_rank: int
    """Index of this rank among the ranks of its node (picks the device)."""
    world_size: int
    local_world_size: int | None
    """Ranks on this node; None when the launcher does not say (found later from hostnames)."""
    master_addr: str | None
    master_port: int


def _int(env: Mapping[str, str], key: str, launcher: str) -> int:
    raw = env[key].strip()
    if not re.fullmatch(r"\d+", raw):
        raise SpecError(
            f"{launcher} launch: {key}={env[key]!r} is not a non-negative integer; fix the launcher environment"
        )
    return int(raw)


def _first(env: Mapping[str, str], keys: tuple[str, ...], launcher: str) -> tuple[str, int] | None:
    """The first key present, with its value; every other present key must agree with it."""
    found = [(k, _int(env, k, launcher)) for k in keys if k in env]
    for k, v in found[1:]:
        if v != found[0][1]:
            raise SpecError(
                f"{launcher} launch: contradictory {found[0][0]}={found[0][1]} and {k}={v}; "
                "they must name the same rank/size: fix the launcher environment"
            )
    return found[0] if found else None


def _need(env: Mapping[str, str], keys: tuple[str, ...], launcher: str, what: str) -> int:
    hit = _first(env, keys, launcher)
    if hit is None:
        raise SpecError(
            f"{launcher} launch: missing {' or '.join(keys)} ({what}); "
            "launch with the full launcher environment or run without any launcher variables"
        )
    return hit[1]


def _maybe(env: Mapping[str, str], keys: tuple[str, ...], launcher: str) -> int | None:
    hit = _first(env, keys, launcher)
    return None if hit is None else hit[1]


def _slurm_tasks_per_node(env: Mapping[str, str]) -> int | None:
    """SLURM_NTASKS_PER_NODE ('4'), else a uniform SLURM_TASKS_PER_NODE ('4(x2)' or '4,4')."""
    if "SLURM_NTASKS_PER_NODE" in env:
        return _int(env, "SLURM_NTASKS_PER_NODE", "slurm")
    raw = env.get("SLURM_TASKS_PER_NODE", "")
    counts = {int(m.group(1)) for m in re.finditer(r"(\d+)(?:\(x\d+\))?", raw)}
    return counts.pop() if len(counts) == 1 else None


# launcher -> (trigger keys, rank keys, size keys, local-rank keys, local-size keys)
_LAUNCHERS: tuple[
    tuple[Launcher, tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]], ...
] = (
    ("torchrun", ("RANK", "WORLD_SIZE"), ("RANK",), ("WORLD_SIZE",), ("LOCAL_RANK",), ("LOCAL_WORLD_SIZE",)),
    (
        "openmpi",
        ("OMPI_COMM_WORLD_RANK",),
        ("OMPI_COMM_WORLD_RANK",),
        ("OMPI_COMM_WORLD_SIZE",),
        ("OMPI_COMM_WORLD_LOCAL_RANK",),
        ("OMPI_COMM_WORLD_LOCAL_SIZE",),
    ),
    (
        "pals",
        ("PALS_RANKID", "PMI_RANK", "PMIX_RANK"),
        ("PALS_RANKID", "PMI_RANK", "PMIX_RANK"),
        ("PMI_SIZE",),
        ("PALS_LOCAL_RANKID", "PMI_LOCAL_RANK", "MPI_LOCALRANKID"),
        ("PALS_LOCAL_SIZE", "PMI_LOCAL_SIZE", "MPI_LOCALNRANKS"),
    ),
    ("slurm", ("SLURM_PROCID",), ("SLURM_PROCID",), ("SLURM_NTASKS", "SLURM_NPROCS"), ("SLURM_LOCALID",), ()),
)


_LOCAL_RANK_FIX = {
    "torchrun": "launch with torchrun (it sets LOCAL_RANK), or export LOCAL_RANK with RANK and WORLD_SIZE",
    "pals": "launch with Aurora's mpiexec (PALS sets PALS_LOCAL_RANKID), or export LOCAL_RANK=$PALS_LOCAL_RANKID",
    "openmpi": "launch with OpenMPI's mpirun (it sets OMPI_COMM_WORLD_LOCAL_RANK)",
    "slurm": "launch with srun (it sets SLURM_LOCALID)",
}


def _local_rank(env: Mapping[str, str], keys: tuple[str, ...], launcher: str, world: int) -> int:
    """The rank's index on its node. Unknown with several ranks is an error, never a silent 0:
    every rank would take device 0."""
    hit = _first(env, keys, launcher)
    if hit is not None:
        return hit[1]
    if world == 1:
        return 0
    raise SpecError(
        f"{launcher} launch of {world} ranks: no local rank ({' or '.join(keys)}), so every rank would "
        f"take device 0; {_LOCAL_RANK_FIX[launcher]}"
    )


def _read(env: Mapping[str, str], spec: tuple) -> LaunchEnv:
    name, _, rank_k, size_k, lrank_k, lsize_k = spec
    rank = _need(env, rank_k, name, "this process's rank")
    world = _need(env, size_k, name, "the number of ranks")
    local_rank = _local_rank(env, lrank_k, name, world)
    local_size = _slurm_tasks_per_node(env) if name == "slurm" else _maybe(env, lsize_k, name)
    port = _int(env, "MASTER_PORT", name) if "MASTER_PORT" in env else DEFAULT_MASTER_PORT
    return _validated(
        LaunchEnv(
            launcher=name,
            rank=rank,
            local_rank=local_rank,
            world_size=world,
            local_world_size=local_size,
            master_addr=env.get("MASTER_ADDR") or None,
            master_port=port,
        ),
        rank_k[0],
        size_k[0],
    )


def _validated(le: LaunchEnv, rank_key: str, size_key: str) -> LaunchEnv:
    where = f"{le.launcher} launch"
    if le.world_size < 1:
        raise SpecError(f"{where}: {size_key}={le.world_size}; it must be >= 1")
    if le.rank >= le.world_size:
        raise SpecError(
            f"{where}: {rank_key}={le.rank} is not below {size_key}={le.world_size}; fix the launcher environment"
        )
    lws = le.local_world_size
    if lws is not None and (lws < 1 or le.local_rank >= lws):
        raise SpecError(
            f"{where}: local rank {le.local_rank} is not below the ranks per node {lws}; fix the launcher environment"
        )
    if lws is not None and le.world_size % lws:
        raise SpecError(
            f"{where}: {size_key}={le.world_size} is not a multiple of the ranks per node {lws}; "
            "run the same number of ranks on every node"
        )
    if le.master_port > 65535:
        raise SpecError(f"{where}: MASTER_PORT={le.master_port} is not a TCP port; choose one in 1024-65535")
    return le


def _check_agreement(chosen: LaunchEnv, env: Mapping[str, str]) -> None:
    """torchrun-style variables set beside an MPI launcher's (a wrapper exporting RANK=$PMI_RANK)
    must agree with it when both describe the same world."""
    if chosen.launcher != "torchrun":
        return
    for spec in _LAUNCHERS[1:3]:  # openmpi, pals; Slurm's leak from allocations, so it is not compared
        if not _triggered(spec, env):
            continue
        other = _first(env, spec[2], spec[0])
        size = _maybe(env, spec[3], spec[0])
        if other is not None and size == chosen.world_size and other[1] != chosen.rank:
            raise SpecError(
                f"contradictory launch environment: RANK={chosen.rank} but {other[0]}={other[1]} "
                f"(both with {chosen.world_size} ranks); unset RANK or export it from {other[0]}"
            )
        local = _first(env, spec[4], spec[0])
        if local is not None and size == chosen.world_size and local[1] != chosen.local_rank:
            raise SpecError(
                f"contradictory launch environment: LOCAL_RANK={chosen.local_rank} but {local[0]}={local[1]} "
                f"(a wrapper's fallback puts ranks on the wrong device); export LOCAL_RANK from {local[0]}"
            )


def _triggered(spec: tuple, env: Mapping[str, str]) -> bool:
    if spec[0] == "pals" and "SLURM_PROCID" in env and not any(k in env for k in ("PALS_RANKID", "PMI_RANK")):
        return False  # srun --mpi=pmix also sets PMIX_RANK: that is a Slurm launch
    return any(k in env for k in spec[1])


def parse_launch_env(env: Mapping[str, str]) -> LaunchEnv:
    """The launcher that started this process and what it says; single-process when none."""
    for spec in _LAUNCHERS:
        if _triggered(spec, env):
            chosen = _read(env, spec)
            _check_agreement(chosen, env)
            return chosen
    if "LOCAL_RANK" in env:
        raise SpecError(
            "LOCAL_RANK is set but RANK and WORLD_SIZE are not; launch with torchrun, "
            "or export RANK and WORLD_SIZE as well"
        )
    return LaunchEnv(
        launcher="single",
        rank=0,
        local_rank=0,
        world_size=1,
        local_world_size=1,
        master_addr=env.get("MASTER_ADDR") or None,
        master_port=DEFAULT_MASTER_PORT,
    )


def resolve_ranks_per_node(le: LaunchEnv, ranks_per_node: int | None) -> int | None:
    """The ranks per node the meshes use: the caller's value (it may differ from the launcher's,
    e.g. a 2x2 mesh on one CPU machine stands in for 2 nodes x 2 devices), else the launcher's,
    else None (found after init from hostnames)."""
    if ranks_per_node is None:
        return le.local_world_size
    if isinstance(ranks_per_node, bool) or not isinstance(ranks_per_node, int) or ranks_per_node < 1:
        raise SpecError(f"ranks_per_node must be a positive integer, got {ranks_per_node!r}")
    if le.world_size % ranks_per_node:
        raise SpecError(
            f"ranks_per_node={ranks_per_node} does not divide the world size {le.world_size}; "
            "choose a divisor of the number of ranks"
        )
    return ranks_per_node


def master_address(le: LaunchEnv, ranks_per_node: int | None) -> str:
    """MASTER_ADDR, or localhost when every rank is known to be on this node."""
    if le.master_addr:
        return le.master_addr
    if le.world_size == 1 or (le.local_world_size or ranks_per_node) == le.world_size:
        return "127.0.0.1"
    raise SpecError(
        f"{le.launcher} launch over several nodes: MASTER_ADDR is not set; export MASTER_ADDR "
        "as the first host's high-speed interface name (and MASTER_PORT) before launching"
    )

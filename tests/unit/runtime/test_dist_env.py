"""Launcher environments -> who am I; broken environments -> one clear error naming the variables."""

from __future__ import annotations

import pytest
import torch

from prism_strategy.runtime.dist import DistContext, pick_device_kind
from prism_strategy.runtime.launch_env import (
    LaunchEnv,
    master_address,
    parse_launch_env,
    resolve_ranks_per_node,
)
from prism_strategy.specs.cluster import Layout
from prism_strategy.specs.errors import SpecError

TORCHRUN = {
    "RANK": "5",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "8",
    "LOCAL_WORLD_SIZE": "4",
    "MASTER_ADDR": "node0",
    "MASTER_PORT": "29400",
}
# What Aurora's mpiexec (PALS) sets for rank 13 of 24 with -ppn 12.
PALS = {
    "PALS_RANKID": "13",
    "PALS_LOCAL_RANKID": "1",
    "PALS_LOCAL_SIZE": "12",
    "PMI_RANK": "13",
    "PMI_SIZE": "24",
    "PMI_LOCAL_RANK": "1",
    "PMI_LOCAL_SIZE": "12",
    "MASTER_ADDR": "x4000c0s0b0n0-hsn0",
}
OPENMPI = {
    "OMPI_COMM_WORLD_RANK": "3",
    "OMPI_COMM_WORLD_SIZE": "4",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    "MASTER_ADDR": "h0",
}
SLURM = {
    "SLURM_PROCID": "6",
    "SLURM_NTASKS": "8",
    "SLURM_LOCALID": "2",
    "SLURM_TASKS_PER_NODE": "4(x2)",
    "SLURM_NNODES": "2",
    "MASTER_ADDR": "n0",
}


def test_torchrun():
    le = parse_launch_env(TORCHRUN)
    assert le == LaunchEnv(
        launcher="torchrun",
        rank=5,
        local_rank=1,
        world_size=8,
        local_world_size=4,
        master_addr="node0",
        master_port=29400,
    )


def test_pals_on_aurora():
    le = parse_launch_env(PALS)
    assert (le.launcher, le.rank, le.local_rank, le.world_size, le.local_world_size) == ("pals", 13, 1, 24, 12)
    assert le.master_port == 29500  # the default when the launcher sets none


def test_pmi_without_local_size_leaves_ranks_per_node_to_hostnames():
    le = parse_launch_env({"PMI_RANK": "2", "PMI_SIZE": "4", "PALS_LOCAL_RANKID": "2", "MASTER_ADDR": "h"})
    assert (le.launcher, le.rank, le.world_size, le.local_world_size) == ("pals", 2, 4, None)


def test_pmix_rank_agrees_with_pmi_rank():
    le = parse_launch_env({"PMIX_RANK": "1", "PMI_RANK": "1", "PMI_SIZE": "2", "PMI_LOCAL_RANK": "1"})
    assert le.rank == 1


def test_openmpi():
    le = parse_launch_env(OPENMPI)
    assert (le.launcher, le.rank, le.local_rank, le.world_size, le.local_world_size) == ("openmpi", 3, 1, 4, 2)


def test_slurm():
    le = parse_launch_env(SLURM)
    assert (le.launcher, le.rank, le.local_rank, le.world_size, le.local_world_size) == ("slurm", 6, 2, 8, 4)


def test_slurm_ntasks_per_node_and_uneven_tasks():
    env = {**SLURM, "SLURM_NTASKS_PER_NODE": "4"}
    assert parse_launch_env(env).local_world_size == 4
    env = {**SLURM, "SLURM_TASKS_PER_NODE": "5,3"}
    assert parse_launch_env(env).local_world_size is None


def test_srun_with_pmix_is_slurm():
    assert parse_launch_env({**SLURM, "PMIX_RANK": "6"}).launcher == "slurm"


def test_slurm_leaking_into_torchrun_is_ignored():
    # torchrun inside an sbatch allocation: Slurm's batch-step variables describe something else.
    env = {**TORCHRUN, "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0"}
    assert parse_launch_env(env).launcher == "torchrun"


def test_single_process():
    le = parse_launch_env({"PATH": "/usr/bin"})
    assert (le.launcher, le.rank, le.world_size, le.local_world_size) == ("single", 0, 1, 1)


@pytest.mark.parametrize(
    "env, names",
    [
        ({"RANK": "0"}, "WORLD_SIZE"),
        ({"RANK": "0", "WORLD_SIZE": "2"}, "LOCAL_RANK"),
        ({"WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "RANK"),
        ({"LOCAL_RANK": "0"}, "RANK and WORLD_SIZE"),
        ({"PALS_RANKID": "0", "PALS_LOCAL_RANKID": "0"}, "PMI_SIZE"),
        ({"PMI_RANK": "0", "PMI_SIZE": "2"}, "PALS_LOCAL_RANKID or PMI_LOCAL_RANK or MPI_LOCALRANKID"),
        ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}, "OMPI_COMM_WORLD_SIZE"),
        ({"SLURM_PROCID": "0", "SLURM_LOCALID": "0"}, "SLURM_NTASKS or SLURM_NPROCS"),
    ],
)
def test_missing_variables_are_named(env, names):
    with pytest.raises(SpecError, match=names):
        parse_launch_env(env)


@pytest.mark.parametrize(
    "env, names",
    [
        ({**TORCHRUN, "RANK": "8"}, "RANK=8 is not below WORLD_SIZE=8"),
        ({**TORCHRUN, "LOCAL_RANK": "4"}, "local rank 4 is not below the ranks per node 4"),
        ({**TORCHRUN, "LOCAL_WORLD_SIZE": "3"}, "WORLD_SIZE=8 is not a multiple of the ranks per node 3"),
        ({**TORCHRUN, "RANK": "two"}, "RANK='two' is not a non-negative integer"),
        ({**TORCHRUN, "WORLD_SIZE": "0"}, "WORLD_SIZE=0"),
        ({**TORCHRUN, "MASTER_PORT": "70000"}, "MASTER_PORT=70000"),
        ({**PALS, "PMI_RANK": "12"}, "contradictory PALS_RANKID=13 and PMI_RANK=12"),
        (
            {
                **TORCHRUN,
                "RANK": "3",
                "WORLD_SIZE": "24",
                "LOCAL_WORLD_SIZE": "12",
                "LOCAL_RANK": "3",
                **{k: v for k, v in PALS.items() if k != "MASTER_ADDR"},
            },
            "RANK=3 but PALS_RANKID=13",
        ),
    ],
)
def test_contradictory_variables_are_named(env, names):
    with pytest.raises(SpecError, match=names):
        parse_launch_env(env)


def test_errors_are_one_line():
    with pytest.raises(SpecError) as e:
        parse_launch_env({"RANK": "0"})
    assert "\n" not in str(e.value)


def test_ranks_per_node_override_and_errors():
    le = parse_launch_env({**TORCHRUN, "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"})
    assert resolve_ranks_per_node(le, None) == 4
    assert resolve_ranks_per_node(le, 2) == 2  # a 2x2 mesh on one machine
    with pytest.raises(SpecError, match="does not divide the world size 4"):
        resolve_ranks_per_node(le, 3)
    for bad in (0, True, "2"):
        with pytest.raises(SpecError, match="positive integer"):
            resolve_ranks_per_node(le, bad)


def test_master_address():
    single_node = LaunchEnv(
        launcher="pals", rank=0, local_rank=0, world_size=4, local_world_size=4, master_addr=None, master_port=29500
    )
    assert master_address(single_node, None) == "127.0.0.1"
    two_nodes = LaunchEnv(
        launcher="pals", rank=0, local_rank=0, world_size=8, local_world_size=4, master_addr=None, master_port=29500
    )
    with pytest.raises(SpecError, match="MASTER_ADDR is not set"):
        master_address(two_nodes, None)
    assert master_address(parse_launch_env(PALS), None) == "x4000c0s0b0n0-hsn0"


def test_device_kind_override():
    assert pick_device_kind({"PRISM_DEVICE": "cpu"}) == "cpu"
    with pytest.raises(SpecError, match="PRISM_DEVICE='tpu'"):
        pick_device_kind({"PRISM_DEVICE": "tpu"})


def test_context_layout_and_text():
    ctx = DistContext(
        rank=3,
        local_rank=1,
        world_size=4,
        nodes=2,
        ranks_per_node=2,
        device=torch.device("cpu"),
        backend="gloo",
        launcher="torchrun",
    )
    assert ctx.layout == Layout(nodes=2, ranks_per_node=2)
    assert ctx.multi_node and not ctx.is_main
    assert str(ctx) == "RANK(3/4)-NODES(2)-RPN(2) cpu/gloo via torchrun"

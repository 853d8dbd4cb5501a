"""init_distributed() under the environments OpenMPI's mpirun and Slurm's srun give each rank:
real processes, a real gloo group; ranks_per_node=1 makes a 2 'nodes' x 1 mesh."""

from __future__ import annotations

import pytest
from _harness import run_ranks

pytestmark = pytest.mark.distributed


@pytest.mark.parametrize("launcher", ["openmpi", "slurm"])
def test_group_from_launcher_env(tmp_path, launcher):
    results, _ = run_ranks(launcher, ["env", str(tmp_path)], world=2, out=tmp_path)
    for rank, res in enumerate(results):
        c = res["ctx"]
        assert (c["rank"], c["local_rank"], c["world_size"], c["launcher"]) == (rank, rank, 2, launcher)
        assert (c["nodes"], c["ranks_per_node"]) == (2, 1)
        assert c["mesh_2d"] == [2, 1]
        assert c["all_reduce"] == [3.0, 2.0]
        assert c["str"] == f"RANK({rank}/2)-NODES(2)-RPN(1) cpu/gloo via {launcher}"

"""init_distributed's launcher detection never guesses a local rank: with several ranks and no
local-rank variable it stops with the fix (every rank would otherwise take device 0)."""

import pytest

from prism_strategy.runtime.launch_env import parse_launch_env
from prism_strategy.specs.errors import SpecError


@pytest.mark.parametrize(
    ("env", "names", "fix"),
    [
        ({"RANK": "3", "WORLD_SIZE": "24"}, "LOCAL_RANK", "torchrun"),
        ({"PMI_RANK": "3", "PMI_SIZE": "24"}, "PALS_LOCAL_RANKID or PMI_LOCAL_RANK", "PALS_LOCAL_RANKID"),
        ({"PALS_RANKID": "3", "PMI_SIZE": "24"}, "PALS_LOCAL_RANKID", "mpiexec"),
        ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, "OMPI_COMM_WORLD_LOCAL_RANK", "mpirun"),
        ({"SLURM_PROCID": "1", "SLURM_NTASKS": "2"}, "SLURM_LOCALID", "srun"),
    ],
)
def test_several_ranks_without_a_local_rank_stop_with_the_fix(env, names, fix):
    with pytest.raises(SpecError, match=names) as err:
        parse_launch_env(env)
    msg = str(err.value)
    assert "device 0" in msg and fix in msg and "\n" not in msg


@pytest.mark.parametrize(
    "env",
    [{"RANK": "0", "WORLD_SIZE": "1"}, {"PMI_RANK": "0", "PMI_SIZE": "1"}, {"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}],
)
def test_one_rank_needs_no_local_rank(env):
    le = parse_launch_env(env)
    assert (le.rank, le.local_rank, le.world_size) == (0, 0, 1)


def test_a_wrapper_fallback_local_rank_contradicting_mpiexec_is_caught():
    # a wrapper exported LOCAL_RANK=${PALS_LOCAL_RANKID:-0} from a shell that did not see it
    env = {
        "RANK": "13",
        "WORLD_SIZE": "24",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "12",
        "PALS_RANKID": "13",
        "PALS_LOCAL_RANKID": "1",
        "PMI_SIZE": "24",
    }
    with pytest.raises(SpecError, match="LOCAL_RANK=0 but PALS_LOCAL_RANKID=1"):
        parse_launch_env(env)
    assert parse_launch_env({**env, "LOCAL_RANK": "1"}).local_rank == 1

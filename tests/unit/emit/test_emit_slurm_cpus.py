"""Issue #26 finding 11: the emitted sbatch asks for the node's cores split over its ranks
(`--cpus-per-task`), and srun passes it on (Slurm 22.05+ srun does not inherit it from sbatch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from prism_strategy.emit.launch import EmitRequest, emit_files
from prism_strategy.specs.presets import load_platform


@pytest.mark.parametrize(("rpn", "name"), [(8, "launch.slurm"), (4, "launch.slurm"), (8, "commbench.sbatch")])
def test_sbatch_asks_for_cores_per_rank(tmp_path, rpn, name):
    req = EmitRequest(strategy="hsdp_full_shard", platform="dgx-h100", nodes=2, ranks_per_node=rpn)
    text = next(f.text for f in emit_files(req, Path(tmp_path / "out")).files if f.name == name)
    cpus = load_platform("dgx-h100").hardware.cpu_cores_per_node // rpn
    assert f"#SBATCH --cpus-per-task={cpus}" in text.splitlines()
    srun = next(x for x in text.splitlines() if x.startswith("srun "))
    assert f"--cpus-per-task={cpus}" in srun

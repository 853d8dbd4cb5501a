"""Issue 37 item 3: the AMD platforms' Slurm jobs as the sites document them, from the platform
files' [launch] tables (emit/site.py): Frontier's srun -c 7 --gpus-per-task=1 --gpu-bind=closest
--threads-per-core=1 (OLCF Frontier User Guide), LUMI's --cpu-bind=mask_cpu:... (LUMI docs), and
the RCCL env profile (OLCF's NCCL_/FI_ settings, the aws-ofi-rccl plugin on LD_LIBRARY_PATH)."""

import shlex

import pytest

from prism_strategy.emit.files import write_files_atomically
from prism_strategy.emit.launch import EmitRequest, emit_files
from prism_strategy.emit.site import load_site
from prism_strategy.specs.env_profile import load_env_profile


def _srun(tmp_path, platform: str, nodes: int) -> tuple[list[str], str]:
    folder = tmp_path / platform
    write_files_atomically(
        folder,
        emit_files(EmitRequest(strategy="fsdp_full_shard", platform=platform, nodes=nodes, account="p"), folder).files,
    )
    text = (folder / "launch.slurm").read_text()
    line = next(x for x in text.splitlines() if x.startswith("srun "))
    return shlex.split(line.rstrip("\\")), text


def test_frontier_launches_one_rank_per_gcd_as_olcf_documents(tmp_path):
    words, text = _srun(tmp_path, "frontier", 16)
    site = load_site("frontier")
    assert "--cpus-per-task=7" in words and "#SBATCH --cpus-per-task=7" in text
    assert all(w in words for w in shlex.split(site.srun_options))
    assert {"--gpus-per-task=1", "--gpu-bind=closest", "--threads-per-core=1"} <= set(words)
    assert "#SBATCH --nodes=16" in text and "#SBATCH --ntasks-per-node=8" in text


def test_frontier_job_exports_olcfs_rccl_settings_and_the_plugin_path(tmp_path):
    _, text = _srun(tmp_path, "frontier", 2)
    for v in load_env_profile("frontier-rccl").var:
        assert f"export {v.name}={v.value}" in text
    assert "export NCCL_NET_GDR_LEVEL=3" in text and "export FI_CXI_ATS=0" in text
    assert "aws-ofi-rccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" in text


def test_lumi_binds_each_rank_to_the_ccd_nearest_its_gcd(tmp_path):
    words, _ = _srun(tmp_path, "lumi", 4)
    bind = next(w for w in words if w.startswith("--cpu-bind="))
    masks = bind.removeprefix("--cpu-bind=mask_cpu:").split(",")
    assert len(masks) == 8  # one mask per GCD rank
    cores = [{i for i in range(64) if int(m, 16) >> i & 1} for m in masks]
    assert all(len(c) == 7 for c in cores) and not set.intersection(*cores)
    assert all(min(c) % 8 == 1 for c in cores)  # the first core of each CCD is left to the system


@pytest.mark.parametrize("platform", ["mi300x", "mi325x"])
def test_mi300x_class_nodes_bind_gpus_with_srun(tmp_path, platform):
    words, _ = _srun(tmp_path, platform, 2)
    assert {"--gpus-per-task=1", "--gpu-bind=closest"} <= set(words)
    assert not any(w.startswith("--cpu-bind") for w in words)

"""Issue 37 item 3 end to end: `plan --platform frontier --nodes 16` and `--platform mi300x`
plan, emit, and the doctor finds nothing in what emit wrote; the ROCm rules fire on the one
change each guards against (diagnose/rocm_checks.py, data/rules.toml)."""

import pytest

from prism_strategy import plan
from prism_strategy.diagnose.doctor import DoctorRequest, diagnose
from prism_strategy.emit.files import write_files_atomically
from prism_strategy.emit.launch import EmitRequest, emit_files


def _emit(tmp_path, platform: str, nodes: int):
    folder = tmp_path / platform
    p = plan(model="qwen3-1.7b", platform=platform, nodes=nodes, seq_len=1024)
    assert p.recommended is not None
    req = EmitRequest(strategy=p.recommended, platform=platform, nodes=nodes, account="proj")
    write_files_atomically(folder, emit_files(req, folder).files)
    return folder


def _rules(*launchers, **kw) -> set[str]:
    return {f.rule for f in diagnose(DoctorRequest(launchers=tuple(launchers), **kw)).findings}


@pytest.mark.parametrize(("platform", "nodes"), [("frontier", 16), ("mi300x", 2)])
def test_plan_emit_doctor_end_to_end(tmp_path, platform, nodes):
    folder = _emit(tmp_path, platform, nodes)
    assert _rules(*sorted(folder.iterdir())) == set()


def test_the_frontier_job_without_its_plugin_runs_rccl_over_sockets(tmp_path):
    job = _emit(tmp_path, "frontier", 16) / "launch.slurm"
    text = job.read_text()
    job.write_text("\n".join(x for x in text.splitlines() if "export LD_LIBRARY_PATH=" not in x) + "\n")
    assert _rules(job) == {"rocm-slingshot-no-ofi-plugin"}


def test_an_rdma_node_needs_no_plugin(tmp_path):
    """mi300x's profile loads no network plugin (RCCL drives RoCE/IB itself): nothing to miss."""
    job = _emit(tmp_path, "mi300x", 2) / "launch.slurm"
    assert "aws-ofi-rccl" not in job.read_text() and _rules(job) == set()


def test_hip_visible_devices_under_srun_gpu_binding(tmp_path):
    job = _emit(tmp_path, "frontier", 16) / "launch.slurm"
    text = job.read_text().replace(
        "    exec python3", "    export HIP_VISIBLE_DEVICES=$SLURM_LOCALID\n    exec python3"
    )
    job.write_text(text)
    assert _rules(job) == {"rocm-visible-devices-under-gpu-bind"}

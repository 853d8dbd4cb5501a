"""doctor on launchers and scripts that public projects ship (issue 36): no ERROR on any file run as
its project documents (accelerate, pytorch/examples, torchtitan, Megatron-DeepSpeed, ezpz,
DeepSpeedExamples), the launch helpers each starts read for what they spawn, and the new rules
firing on the mistakes they name. Truth: the files themselves (tests/fixtures/doctor/official,
each with its .source.txt) and the projects' documented launch lines quoted in expected.toml."""

import sys
from pathlib import Path

import pytest

from prism_strategy.diagnose.doctor import DoctorRequest, diagnose
from prism_strategy.diagnose.launcher_checks import read_launcher

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

OFFICIAL = Path(__file__).resolve().parents[2] / "fixtures" / "doctor" / "official"
MANIFEST = tomllib.loads((OFFICIAL / "expected.toml").read_text())
CASES = [(group, name, spec) for group in ("official", "bad") for name, spec in MANIFEST[group].items()]


def _diagnose(name: str, spec: dict):
    opts = dict(zip(spec["args"][::2], spec["args"][1::2]))
    files = [OFFICIAL / n for n in (name, *spec.get("with", ()))]
    return diagnose(
        DoctorRequest(
            launchers=tuple(p for p in files if p.suffix != ".py"),
            scripts=tuple(p for p in files if p.suffix == ".py"),
            platform=opts.get("--platform"),
            nodes=int(opts["--nodes"]) if "--nodes" in opts else None,
            live=False,
        )
    )


def test_every_file_has_its_source_and_a_manifest_entry():
    files = {p.name for p in OFFICIAL.iterdir() if p.suffix not in (".txt", ".toml")}
    listed = {n for _, name, spec in CASES for n in (name, *spec.get("with", ()))}
    assert files == listed
    for f in files:
        source = (OFFICIAL / f"{f}.source.txt").read_text()
        assert "repo: " in source and "commit: " in source


def test_official_files_come_from_five_projects_or_more():
    repos = {
        line.split(": ", 1)[1]
        for p in OFFICIAL.glob("*.source.txt")
        if not p.name.startswith("derived_")
        for line in p.read_text().splitlines()
        if line.startswith("repo: ")
    }
    assert len(repos) >= 5 and len(MANIFEST["official"]) >= 10


@pytest.mark.parametrize(("group", "name", "spec"), CASES, ids=[f"{g}-{n}" for g, n, _ in CASES])
def test_file_yields_exactly_its_findings(group, name, spec):
    report = _diagnose(name, spec)
    assert {f.rule: f.severity for f in report.findings} == spec["expect"]
    if group == "official":
        assert report.exit_code == 0


@pytest.mark.parametrize(
    ("name", "tasks", "ranks", "held"),
    [
        # srun 1 task per node x accelerate launch --num_processes $((SLURM_NNODES * 4)) --num_machines $SLURM_NNODES
        ("accelerate_submit_multinode_fsdp.sh", 1, 4, 4),
        # srun --ntasks=4 --nodes=4 x torchrun --nproc_per_node 1, --gpus-per-task=1
        ("pytorch_examples_ddp_sbatch_run.sh", 1, 1, 1),
        # srun --ntasks=4 --nodes=4 x torchrun --nproc_per_node 8, --gpus-per-task=8
        ("torchtitan_multinode_trainer.slurm", 1, 8, 8),
    ],
)
def test_ranks_per_node_are_tasks_times_what_the_helper_spawns(name, tasks, ranks, held):
    lf = read_launcher(OFFICIAL / name)
    assert (lf.tasks_per_node(), lf.ranks_per_node(), lf.devices_allocated()) == (tasks, ranks, held)


def test_a_job_holding_fewer_devices_than_the_node_says_so_and_is_no_error():
    report = _diagnose("pytorch_examples_ddp_sbatch_run.sh", {"args": ["--platform", "dgx-a100-40"]})
    (f,) = [f for f in report.findings if f.rule == "launcher-ranks-per-node-mismatch"]
    assert f.severity == "info" and "1 devices per node the job asks Slurm for (dgx-a100-40 has 8)" in f.message


def test_more_ranks_than_the_job_holds_is_still_an_error(tmp_path):
    text = (OFFICIAL / "pytorch_examples_ddp_sbatch_run.sh").read_text()
    path = tmp_path / "two_per_gpu.sh"
    path.write_text(text.replace("--nproc_per_node 1", "--nproc_per_node 2"))
    report = diagnose(DoctorRequest(launchers=(path,), platform="dgx-a100-40", live=False))
    (f,) = [f for f in report.findings if f.rule == "launcher-ranks-per-node-mismatch"]
    assert f.severity == "error" and "2 ranks per node on the 1 devices" in f.message


def test_qsub_options_on_the_command_line_are_a_check_not_an_error():
    report = _diagnose("megatron_deepspeed_train_aGPT_7B.sh", {"args": ["--platform", "aurora"]})
    (f,) = report.findings
    assert f.severity == "warning" and "qsub" in f.fix and "command line" in f.message


def test_the_bare_torchrun_rule_names_the_helper_and_the_node_count():
    spec = MANIFEST["bad"]["derived_bare_torchrun_2_nodes.sh"]
    (f,) = [f for f in _diagnose("derived_bare_torchrun_2_nodes.sh", spec).findings if f.severity == "error"]
    assert "`torchrun`" in f.message and "2-node job" in f.message and f.line == 17


def test_cuda_hard_coded_is_reported_on_each_line_that_fixes_it():
    spec = MANIFEST["bad"]["pytorch_examples_ddp_multinode.py"]
    lines = sorted(f.line for f in _diagnose("pytorch_examples_ddp_multinode.py", spec).findings)
    assert lines == [14, 15]  # torch.cuda.set_device(...), init_process_group(backend="nccl")


def test_the_same_cuda_script_on_a_cuda_platform_is_clean():
    spec = {"args": ["--platform", "dgx-a100-40"]}
    assert _diagnose("pytorch_examples_ddp_multinode.py", spec).findings == []


def test_the_deepspeed_batch_names_the_numbers_and_holds_where_it_divides():
    """DeepSpeed runtime/config.py: train_batch_size = micro x accumulation x world size; the
    cifar config gives only train_batch_size=16: 16 ranks divide it, 24 do not."""
    bad = _diagnose("deepspeedexamples_cifar10_deepspeed.py", {"args": ["--platform", "aurora", "--nodes", "2"]})
    (f,) = bad.findings
    assert "train_batch_size=16" in f.message and "24 ranks" in f.message
    ok = _diagnose("deepspeedexamples_cifar10_deepspeed.py", {"args": ["--platform", "dgx-a100-40", "--nodes", "2"]})
    assert ok.findings == []


def test_srun_given_cpus_per_task_is_clean(tmp_path):
    text = (OFFICIAL / "torchtitan_multinode_trainer.slurm").read_text()
    path = tmp_path / "with_c.slurm"
    path.write_text(text.replace("srun torchrun", "srun --cpus-per-task=96 torchrun"))
    assert diagnose(DoctorRequest(launchers=(path,), platform="dgx-h100", live=False)).findings == []

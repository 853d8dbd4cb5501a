"""Hostile names and arguments stay literal: the emitted launchers are run for real, with stub
`module`, `mpiexec`, `srun`, `scontrol`, `torchrun` and `python3` on PATH that record what they
were given, and nothing the user typed is executed."""

import os
import subprocess
from pathlib import Path

import pytest

from prism_strategy.emit.files import write_files_atomically
from prism_strategy.emit.launch import EmitRequest, emit_files

HOSTILE_ARGS = (
    "$(touch pwned_a)",
    "`touch pwned_b`",
    "'; touch pwned_c; '",
    '"; touch pwned_d; "',
    "a b",
    "*",
    "${HOME}",
    "\\",
    "!x",
    "--flag=1;touch pwned_e",
    "",
    "$((1+1))",
    "> pwned_f",
)
HOSTILE_SCRIPT = "my dir/$(touch pwned_g) `touch pwned_h`.py"

RECORD = """#!/bin/bash
# record argv (NUL-separated) and the environment, then stop
printf '%s\\0' "$@" > "$STUB_OUT/$(basename "$0").argv"
env > "$STUB_OUT/$(basename "$0").env"
"""
MODULE = """#!/bin/bash
echo "$*" >> "$STUB_OUT/module.log"
"""
RUN_RANK = """#!/bin/bash
# a launcher stand-in: skip options up to the rank command, then run it as one rank would
printf '%s\\0' "$@" > "$STUB_OUT/$(basename "$0").argv"
while [ "$#" -gt 0 ] && [ "$1" != bash ]; do shift; done
shift 2  # bash -lc
cmd="$1"; shift
# shellcheck disable=SC2086  # STUB_RANK_ENV: the rank variables this launcher stand-in sets
exec env ${STUB_RANK_ENV-PALS_RANKID=0 PALS_LOCAL_RANKID=0 SLURM_PROCID=0 SLURM_LOCALID=0} /bin/bash --noprofile --norc -c "$cmd" "$@"
"""
CONDA = """#!/bin/bash
echo "$*" >> "$STUB_OUT/conda.log"
"""
SCONTROL = """#!/bin/bash
echo node0001
"""


def _stubs(root: Path) -> Path:
    bin_dir = root / "bin"
    bin_dir.mkdir()
    for name, text in (
        ("python3", RECORD),
        ("torchrun", RECORD),
        ("module", MODULE),
        ("mpiexec", RUN_RANK),
        ("srun", RUN_RANK),
        ("scontrol", SCONTROL),
        ("conda", CONDA),
    ):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _emit(root: Path, platform: str, **kw) -> Path:
    out = root / "out $(touch pwned_out)"
    req = EmitRequest(
        strategy="fsdp_full_shard",
        platform=platform,
        nodes=2,
        job_name="j $(touch pwned_j) `x`",
        account="acct_1",  # a hostile account is refused: tests/unit/emit/test_emit_hostile_fields.py
        script=HOSTILE_SCRIPT,
        script_args=HOSTILE_ARGS,
        **kw,
    )
    return write_files_atomically(out, emit_files(req, out).files)


def _run(root: Path, launcher: Path, extra_env: dict, *, ok: bool = True) -> Path:
    work = root / "work"
    work.mkdir(exist_ok=True)
    stub_out = root / "stub_out"
    stub_out.mkdir(exist_ok=True)
    bin_dir = root / "bin" if (root / "bin").exists() else _stubs(root)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(root), "STUB_OUT": str(stub_out), **extra_env}
    res = subprocess.run(["bash", str(launcher)], cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert (res.returncode == 0) == ok, res.stderr
    (stub_out / "stderr").write_text(res.stderr)
    return stub_out


def _argv(path: Path) -> list[str]:
    return [a.decode() for a in path.read_bytes().split(b"\0")[:-1]]


def _no_pwned(root: Path) -> None:
    hits = [p for p in root.rglob("*") if p.name.startswith("pwned")]
    assert hits == [], hits
    assert not list(Path.cwd().glob("pwned*"))


@pytest.mark.parametrize(
    ("platform", "launcher", "extra"), [("aurora", "launch.pbs", "pbs"), ("dgx-h100", "launch.slurm", "slurm")]
)
def test_hostile_values_reach_the_script_literally_and_execute_nothing(tmp_path, platform, launcher, extra):
    out = _emit(tmp_path, platform)
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("x4000c0s0b0n0.hostmgmt.example\nx4000c0s1b0n0.hostmgmt.example\n")
    env = (
        {"PBS_NODEFILE": str(nodefile), "PBS_O_WORKDIR": str(tmp_path / "work")}
        if extra == "pbs"
        else {"SLURM_JOB_NODELIST": "node[0001-0002]"}
    )
    stub_out = _run(tmp_path, out / launcher, env)
    assert _argv(stub_out / "python3.argv") == [HOSTILE_SCRIPT, *HOSTILE_ARGS]
    rank_env = dict(line.split("=", 1) for line in (stub_out / "python3.env").read_text().splitlines() if "=" in line)
    assert rank_env["RANK"] == "0" and rank_env["LOCAL_RANK"] == "0"
    assert rank_env["WORLD_SIZE"] == str(2 * (12 if platform == "aurora" else 8))
    assert rank_env["MASTER_ADDR"] == ("x4000c0s0b0n0.hsn.cm.aurora.alcf.anl.gov" if extra == "pbs" else "node0001")
    assert rank_env["MASTER_PORT"] == "29500"
    assert rank_env["PRISM_STRATEGY_FILE"] == str(out / "strategy.toml")
    assert rank_env["PRISM_JOB_NAME"] == "j $(touch pwned_j) `x`"
    if platform == "aurora":
        assert rank_env["CCL_WORKER_COUNT"] == "1" and "CCL_REDUCE_SCATTER" not in rank_env
        assert (stub_out / "module.log").read_text() == "load frameworks/2025.3.1\n"
    _no_pwned(tmp_path)


def test_torchrun_script_sources_the_profile_and_passes_arguments_literally(tmp_path):
    out = _emit(tmp_path, "aurora")
    stub_out = _run(tmp_path, out / "torchrun.sh", {})
    argv = _argv(stub_out / "torchrun.argv")
    assert argv[:3] == ["--standalone", "--nnodes=1", "--nproc-per-node=12"]
    assert argv[3:] == [HOSTILE_SCRIPT, *HOSTILE_ARGS]
    env = (stub_out / "torchrun.env").read_text()
    assert "CCL_PROCESS_LAUNCHER=none" in env.splitlines()
    assert f"PRISM_STRATEGY_FILE={out / 'strategy.toml'}" in env.splitlines()
    _no_pwned(tmp_path)


def test_env_sh_can_be_sourced_with_hostile_paths_around(tmp_path):
    out = _emit(tmp_path, "polaris")
    stub_out = tmp_path / "stub_out"
    stub_out.mkdir()
    bin_dir = _stubs(tmp_path)
    res = subprocess.run(
        ["bash", "-c", 'source "$1" && env', "_", str(out / "env.sh")],
        capture_output=True,
        text=True,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "STUB_OUT": str(stub_out)},
        check=True,
    )
    lines = res.stdout.splitlines()
    assert "NCCL_NET=AWS Libfabric" in lines  # with the plugin ALCF's NCCL page puts on the library path:
    assert "LD_LIBRARY_PATH=/soft/libraries/hwloc/lib/:/soft/libraries/aws-ofi-nccl/v1.9.1-aws/lib" in lines
    assert (stub_out / "module.log").read_text() == "use /soft/modulefiles\nload conda\n"
    assert (stub_out / "conda.log").read_text() == "activate\n"
    _no_pwned(tmp_path)
    assert os.listdir(out)


@pytest.mark.parametrize(
    ("platform", "launcher", "rank_env", "missing"),
    [
        ("aurora", "launch.pbs", "PALS_RANKID=3 PMI_RANK=3", "PMI_LOCAL_RANK"),
        ("aurora", "launch.pbs", "PALS_LOCAL_RANKID=3", "PMI_RANK"),
        ("dgx-h100", "launch.slurm", "SLURM_PROCID=3", "SLURM_LOCALID"),
    ],
)
def test_a_rank_without_a_local_rank_stops_loudly(tmp_path, platform, launcher, rank_env, missing):
    """No silent fallback to local rank 0 (every rank on device 0): the rank stops and says why."""
    out = _emit(tmp_path, platform)
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("x4000c0s0b0n0\n")
    env = {"PBS_NODEFILE": str(nodefile), "SLURM_JOB_NODELIST": "node0001", "STUB_RANK_ENV": rank_env}
    stub_out = _run(tmp_path, out / launcher, env, ok=False)
    assert missing in (stub_out / "stderr").read_text()
    assert not (stub_out / "python3.argv").exists()


def test_torchrun_script_drops_mpiexec_only_settings(tmp_path):
    """ALCF's minimal set launches oneCCL through PMIx and MPI; torchrun starts neither."""
    out = _emit(tmp_path, "aurora", env_profile="aurora-alcf-minimal")
    stub_out = _run(tmp_path, out / "torchrun.sh", {})
    env = dict(line.split("=", 1) for line in (stub_out / "torchrun.env").read_text().splitlines() if "=" in line)
    assert env["CCL_PROCESS_LAUNCHER"] == "none" and env["CCL_ATL_TRANSPORT"] == "ofi"
    assert "CCL_KVS_MODE" not in env and env["FI_MR_CACHE_MONITOR"] == "userfaultfd"
    assert (stub_out / "module.log").read_text() == "load frameworks\n"
    launch = (out / "launch.pbs").read_text()
    assert "export CCL_PROCESS_LAUNCHER=pmix" in launch and "export CCL_KVS_MODE=mpi" in launch


def test_torchrun_script_defines_module_or_says_how(tmp_path):
    """bash torchrun.sh is not a login shell: without a module init to source it stops with the fix."""
    if any(
        Path(p).exists()
        for p in (
            "/etc/profile.d/lmod.sh",
            "/etc/profile.d/z00_lmod.sh",
            "/etc/profile.d/modules.sh",
            "/usr/share/lmod/lmod/init/bash",
        )
    ):
        pytest.skip("this machine has a module init: the missing-init path cannot be shown")
    out = _emit(tmp_path, "aurora")
    _stubs(tmp_path)
    (tmp_path / "bin" / "module").unlink()
    stub_out = _run(tmp_path, out / "torchrun.sh", {}, ok=False)
    assert "bash -l torchrun.sh" in (stub_out / "stderr").read_text()
    assert not (stub_out / "torchrun.argv").exists()

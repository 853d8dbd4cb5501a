"""Launch real multi-process runs for the distributed tests: torchrun, or the environment an
MPI launcher / srun gives each rank (PALS/PMI, OpenMPI, Slurm), on one machine over gloo.

Every launch gets its own free port, its own process group (session) per rank so a timeout
kills everything it started, and returns what each rank wrote as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("worker.py")
EXAMPLE = ROOT / "examples" / "train.py"
LAUNCH_TIMEOUT_S = 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RANK", "LOCAL_", "WORLD_SIZE", "MASTER_", "PMI", "PALS_", "OMPI_", "SLURM_"))
    }
    env.update(
        PRISM_DEVICE="cpu",
        DS_ACCELERATOR="cpu",
        OMP_NUM_THREADS="1",
        TORCH_EXTENSIONS_DIR=env.get("TORCH_EXTENSIONS_DIR", str(ROOT / ".torch_extensions")),
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT / "examples"), env.get("PYTHONPATH", "")]),
    )
    return env


def rank_env(launcher: str, rank: int, world: int, *, local_size: bool = True) -> dict[str, str]:
    """What mpiexec (PALS on Aurora), OpenMPI's mpirun or srun put in each rank's environment."""
    if launcher == "pals":
        env = {"PALS_RANKID": rank, "PALS_LOCAL_RANKID": rank, "PMI_RANK": rank, "PMI_SIZE": world}
        if local_size:
            env["PALS_LOCAL_SIZE"] = world
    elif launcher == "openmpi":
        env = {
            "OMPI_COMM_WORLD_RANK": rank,
            "OMPI_COMM_WORLD_SIZE": world,
            "OMPI_COMM_WORLD_LOCAL_RANK": rank,
            "OMPI_COMM_WORLD_LOCAL_SIZE": world,
        }
    elif launcher == "slurm":
        env = {
            "SLURM_PROCID": rank,
            "SLURM_NTASKS": world,
            "SLURM_LOCALID": rank,
            "SLURM_TASKS_PER_NODE": f"{world}(x1)",
            "SLURM_NNODES": 1,
        }
    else:
        raise ValueError(launcher)
    return {k: str(v) for k, v in env.items()}


def _wait_all(procs: list[subprocess.Popen], logs: list[Path], timeout: float) -> list[str]:
    """Wait for every process; when one fails or time runs out, kill the rest (no orphans)."""
    deadline = time.monotonic() + timeout
    try:
        while any(p.poll() is None for p in procs):
            if any(p.poll() for p in procs) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        timed_out = time.monotonic() > deadline
        for p in procs:
            _kill(p)
    texts = [log.read_text(errors="replace") for log in logs]
    if timed_out:
        raise AssertionError(f"launch timed out after {timeout}s; killed its processes:\n" + texts[0][-6000:])
    return texts


def _kill(p: subprocess.Popen) -> None:
    """Kill the process's whole session (torchrun's workers too), then reap it."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


def _popen(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "w") as f:
        return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


def _results(out: Path, world: int, logs: list[str], codes: list[int], wanted: bool = True) -> list[dict]:
    if any(codes):
        raise AssertionError(f"launch failed (exit codes {codes}):\n" + "\n".join(log[-6000:] for log in logs))
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)] if wanted else []


def run_torchrun(
    args: list[str], *, nproc: int, out: Path, script: Path = WORKER, timeout: float = LAUNCH_TIMEOUT_S
) -> tuple[list[dict], str]:
    """torchrun --nproc-per-node nproc script args; returns (per-rank results, log)."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        "--master-addr=127.0.0.1",
        f"--master-port={free_port()}",
        str(script),
        *args,
    ]
    log = out / "torchrun.log"
    p = _popen(cmd, base_env(), log)
    (text,) = _wait_all([p], [log], timeout)
    return _results(out, nproc, [text], [p.returncode]), text


def run_ranks(
    launcher: str,
    args: list[str],
    *,
    world: int,
    out: Path,
    script: Path = WORKER,
    local_size: bool = True,
    results: bool = True,
    timeout: float = LAUNCH_TIMEOUT_S,
) -> tuple[list[dict], str]:
    """Start `world` processes as an MPI launcher or srun would; returns (per-rank results, log)."""
    port = str(free_port())
    procs, logs = [], []
    for r in range(world):
        env = base_env() | rank_env(launcher, r, world, local_size=local_size)
        env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
        logs.append(out / f"{launcher}{r}.log")
        procs.append(_popen([sys.executable, str(script), *args], env, logs[-1]))
    texts = _wait_all(procs, logs, timeout)
    return _results(out, world, texts, [p.returncode for p in procs], results), "\n".join(texts)


def prebuild_deepspeed_ops(log: Path, timeout: float = 600) -> None:
    """Build DeepSpeed's CPU shm comm op once, in one process, before ranks start (its JIT build
    takes ~30 s, minutes on a busy machine). A lock left by a build killed midway makes every
    later build wait forever: a lock with no built module older than the timeout is removed."""
    ext = Path(base_env()["TORCH_EXTENSIONS_DIR"]) / "deepspeed_shm_comm"
    lock = ext / "lock"
    built = any(ext.glob("*.so"))
    if lock.exists() and not built and time.time() - lock.stat().st_mtime > timeout:
        lock.unlink()
    had_lock = lock.exists()
    code = (
        "from deepspeed.accelerator import get_accelerator\n"
        "b = get_accelerator().create_op_builder('ShareMemCommBuilder')\n"
        "b is None or b.load()\n"
    )
    p = _popen([sys.executable, "-c", code], base_env(), log)
    try:
        (text,) = _wait_all([p], [log], timeout)
    except AssertionError:
        if not had_lock and lock.exists():
            lock.unlink()  # our own build's lock: do not leave it to block the next run
        raise
    if p.returncode:
        raise AssertionError(f"building DeepSpeed's shm comm op failed:\n{text[-4000:]}")

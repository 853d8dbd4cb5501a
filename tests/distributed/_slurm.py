"""A one-host Slurm cluster for the tests: munge, slurmctld and slurmd from Debian's slurm-wlm
(22.05), with their own configuration, ports, spool and state in a temporary folder. The host is
declared with 4 CPUs (task slots) whatever it has (`SlurmdParameters=config_overrides`), so a job of
4 tasks runs on a 2-core machine. Stopped (SIGTERM to both daemons) when the fixture ends."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

CONF = """ClusterName=prism-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmUser=root
SlurmdUser=root
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmdSpoolDir={dir}/spool
StateSaveLocation={dir}/state
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
SlurmdParameters=config_overrides
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName={host} NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def missing() -> str | None:
    """What this machine lacks to run the cluster (None: nothing)."""
    for tool in ("munged", "slurmctld", "slurmd", "sbatch", "squeue"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "the one-host Slurm runs its daemons as root"
    return None


def _start_munge() -> None:
    if subprocess.run(["munge", "-n"], capture_output=True).returncode == 0:
        return  # a munged is already answering
    Path("/run/munge").mkdir(parents=True, exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    subprocess.run(["munged", "--force"], check=True, capture_output=True)


class OneHostSlurm:
    def __init__(self, folder: Path):
        self.dir = folder
        for sub in ("spool", "state"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        self.conf = folder / "slurm.conf"
        text = CONF.format(
            host=socket.gethostname().split(".")[0], dir=folder, ctld_port=_free_port(), d_port=_free_port()
        )
        self.conf.write_text(text)
        self.env = {"SLURM_CONF": str(self.conf)}

    def start(self, timeout_s: float = 60) -> None:
        _start_munge()
        env = os.environ | self.env
        subprocess.run(["slurmctld", "-f", str(self.conf)], check=True, env=env, capture_output=True)
        subprocess.run(["slurmd", "-f", str(self.conf)], check=True, env=env, capture_output=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            out = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True).stdout
            if out.strip() == "idle":
                return
            time.sleep(0.5)
        raise AssertionError("the one-host Slurm did not come up:\n" + self.logs())

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-2000:] for p in self.dir.glob("*.log"))

    def wait(self, job: str, timeout_s: float) -> None:
        """Until the job has left the queue."""
        deadline = time.monotonic() + timeout_s
        env = os.environ | self.env
        while time.monotonic() < deadline:
            if not subprocess.run(["squeue", "-h", "-j", job], env=env, capture_output=True, text=True).stdout.strip():
                return
            time.sleep(1)
        subprocess.run(["scancel", job], env=env, capture_output=True)
        raise AssertionError(f"Slurm job {job} still queued or running after {timeout_s:g} s")

    def stop(self) -> None:
        for pid_file in ("slurmd.pid", "slurmctld.pid"):
            try:
                os.kill(int((self.dir / pid_file).read_text()), signal.SIGTERM)
            except (OSError, ValueError):
                pass

"""doctor on the live environment: torch facts, variables against the profile and the known-bad
list, and leftover processes holding devices (a real dummy process holding a designated file)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prism_strategy.diagnose.doctor import DoctorRequest, diagnose
from prism_strategy.diagnose.live_checks import find_stale_processes

HOLD = "import sys, time; f = open(sys.argv[1]); time.sleep(120)"
SPAWN_DETACHED = """
import subprocess, sys
p = subprocess.Popen([sys.executable, "-c", sys.argv[3], sys.argv[1]], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
open(sys.argv[2], "w").write(str(p.pid))
"""
BAD_ENV = {
    "CCL_WORKER_COUNT": "4",
    "CCL_REDUCE_SCATTER": "ring",
    "TORCH_XPU_ALLOC_CONF": "expandable_segments:True",
    "LD_PRELOAD": "/usr/lib64/libpil4dfs.so",
}


def _no_devices(tmp_path) -> tuple[str, ...]:
    return (str(tmp_path / "no-such-device-*"),)


def _clear_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith(("CCL_", "FI_", "ZE_", "NCCL_", "TORCH_XPU")) or key in ("LD_PRELOAD", "LOADEDMODULES"):
            monkeypatch.delenv(key)


def test_environment_facts(tmp_path, monkeypatch):
    _clear_env(monkeypatch)
    report = diagnose(DoctorRequest(device_globs=_no_devices(tmp_path)))
    env = report.environment
    assert env["torch"].startswith("2.") and "gloo" in env["backends"]
    assert env["stale_processes"] == [] and report.findings == []
    assert report.to_dict()["summary"] == {"error": 0, "warning": 0, "info": 0}


def test_known_bad_variables_set_now(tmp_path, monkeypatch):
    _clear_env(monkeypatch)
    for k, v in BAD_ENV.items():
        monkeypatch.setenv(k, v)
    report = diagnose(DoctorRequest(platform="aurora", strategy="fsdp_full_shard", device_globs=_no_devices(tmp_path)))
    assert {f.rule: f.severity for f in report.findings} == {
        "env-ccl-worker-count": "error",
        "env-ccl-reduce-scatter-ring": "error",
        "env-torch-xpu-alloc-conf": "error",
        "daos-preload-fsdp": "error",
    }
    assert all(f.file == "<environment>" and f.line == 0 for f in report.findings)
    assert report.exit_code == 1


def test_known_bad_without_a_platform_is_a_warning_and_silent_on_cuda(tmp_path, monkeypatch):
    _clear_env(monkeypatch)
    monkeypatch.setenv("CCL_WORKER_COUNT", "8")
    assert [f.severity for f in diagnose(DoctorRequest(device_globs=_no_devices(tmp_path))).findings] == ["warning"]
    assert diagnose(DoctorRequest(platform="dgx-h100", device_globs=_no_devices(tmp_path))).findings == []


def test_variables_against_the_profile(tmp_path, monkeypatch):
    _clear_env(monkeypatch)
    monkeypatch.setenv("CCL_PROCESS_LAUNCHER", "pmix")
    monkeypatch.setenv("CCL_WORKER_COUNT", "1")
    monkeypatch.setenv("LOADEDMODULES", "gcc/13:frameworks/2025.2.0")
    report = diagnose(DoctorRequest(platform="aurora", device_globs=_no_devices(tmp_path)))
    profile = report.environment["profile"]
    assert profile["name"] == "aurora-prism-2026.11" and profile["set"] == ["CCL_WORKER_COUNT"]
    assert profile["differs"] == {"CCL_PROCESS_LAUNCHER": {"now": "pmix", "profile": "none"}}
    assert "FI_PROVIDER" in profile["missing"]
    assert {f.rule for f in report.findings} == {"env-differs-from-profile", "oneccl-2025.2-usm-pointers"}
    assert report.exit_code == 0
    alcf = diagnose(
        DoctorRequest(platform="aurora", env_profile="aurora-alcf-minimal", device_globs=_no_devices(tmp_path))
    )
    assert alcf.environment["profile"]["set"] == ["CCL_PROCESS_LAUNCHER"]


def _holder_pid(tmp_path: Path, device: Path) -> int:
    pidfile = tmp_path / "holder.pid"
    subprocess.run([sys.executable, "-c", SPAWN_DETACHED, str(device), str(pidfile), HOLD], check=True, timeout=30)
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(device) for fd in os.listdir(f"/proc/{pid}/fd")):
                return pid
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError("the dummy process never opened its device file")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture
def holder(tmp_path):
    device = tmp_path / "renderD128"
    device.write_text("")
    pid = _holder_pid(tmp_path, device)
    yield pid, device
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)


def test_leftover_process_is_listed_by_pid(holder, monkeypatch):
    pid, device = holder
    _clear_env(monkeypatch)
    report = diagnose(DoctorRequest(device_globs=(str(device),)))
    assert [(f.rule, f.severity, f.file) for f in report.findings] == [
        ("stale-device-processes", "error", f"<process {pid}>")
    ]
    assert f"PID {pid}" in report.findings[0].message and str(device) in report.findings[0].message
    assert report.environment["stale_processes"] == [pid] and _alive(pid)


def test_clean_ends_exactly_the_leftover_then_settles(holder, monkeypatch):
    pid, device = holder
    _clear_env(monkeypatch)
    bystander = subprocess.Popen([sys.executable, "-c", HOLD, str(device)])  # the doctor's own child: never touched
    try:
        time.sleep(0.3)
        assert [p.pid for p in find_stale_processes((str(device),))] == [pid]
        t0 = time.monotonic()
        report = diagnose(DoctorRequest(clean=True, settle_s=0.2, device_globs=(str(device),)))
        assert time.monotonic() - t0 >= 0.2
        assert [(f.rule, f.severity) for f in report.findings] == [("stale-device-processes", "info")]
        assert f"ended PID {pid}" in report.findings[0].message
        assert not _alive(pid) and bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()

"""Every test runs with its own cache dir (no user calibration or results store leaks in) and no
COLUMNS of the caller's; torch's extension builds (DeepSpeed's CPU shm op) stay in the caller's
folder, built once, and started in the background while the in-process tests run (a fresh checkout
builds it for ~40 s; unit/ and cli/ keep one core busy, the build takes the other). Tests marked
`gpu` run only where torch sees a CUDA or XPU device."""

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from prism_strategy.bench.launch.ds_ops import extensions_dir

EXTENSIONS = str(extensions_dir())
"""Where bench builds torch extensions (bench/launch/ds_ops.py), read before a test moves the cache:
otherwise every test that starts DeepSpeed rebuilds its shm op (~25 s). make test sets it."""


def _has_accelerator() -> bool:
    import torch

    return torch.cuda.is_available() or (hasattr(torch, "xpu") and torch.xpu.is_available())


DEEPSPEED_LAST = (
    "test_bench_loop",
    "test_census",
    "test_commbench",
    "test_emitted_runs",
    "test_followup",
    "test_strategies",
    "test_wrap_peft_lora",
)
"""tests/distributed files whose launches start DeepSpeed (its CPU op must be built first): they run
after the others, by when the background build (below) is done."""


def _distributed(item) -> bool:
    return "distributed" in item.path.parts


WAITING = (
    "test_launched_bench",
    "test_monitor_faults",
    "test_example_train",
    "test_device_validation",
    "test_monitor_exits",
)
"""tests/distributed files that wait more than they compute (hung ranks' timeouts, injected sleeps,
Slurm's daemons, one-process kits: 0.9-1.3 cores on average, the launches of the others ~1.7;
`tests/distributed` alone used 1.44 of the 2 cores, 2026-12-07), longest first (96, 95, 22, 18, 3 s
alone): each is a scope of its own at the end of the queue, taken by whichever worker is free, so
they run beside the launches instead of after them."""


def _waiting_index(path: Path) -> int | None:
    """The file's place in WAITING, None when it is not a waiting distributed file."""
    if "distributed" not in path.parts:
        return None
    return next((i for i, stem in enumerate(WAITING) if path.stem.startswith(stem)), None)


def _order(item) -> tuple[int, int]:
    """Launches first (the longest path), the files that start DeepSpeed last among them (after the
    background build); then unit/ and cli/; then the waiting files in WAITING's order."""
    if (waiting := _waiting_index(item.path)) is not None:
        return 2, waiting
    return (0 if _distributed(item) else 1), int(_distributed(item) and item.path.stem.startswith(DEEPSPEED_LAST))


def pytest_collection_modifyitems(config, items):
    """Sort by `_order` (stable: files keep their order); the xdist scheduler below keeps it."""
    items.sort(key=_order)
    gpu = [item for item in items if "gpu" in item.keywords]
    if gpu and not _has_accelerator():
        skip = pytest.mark.skip(reason="needs a CUDA or XPU device (none visible to torch here)")
        for item in gpu:
            item.add_marker(skip)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent without it
def pytest_xdist_make_scheduler(config, log):
    """`make test` runs two xdist workers: one takes the distributed launches as one scope (one at a
    time: two 4-rank launches at once on 2 cores double each), the other unit/ and cli/ file by file;
    then each WAITING file goes to whichever is free, in collection order (`_order`: no reordering
    by size).
    (xdist_group marks cannot do it under pytest 9.2: xdist 3.8 renames node ids through a field
    pytest no longer reads.)"""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False

    class LaunchesOnOneWorker(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if not nodeid.startswith("tests/distributed/"):
                return super()._split_scope(nodeid)
            path = nodeid.split("::")[0]
            return path if _waiting_index(Path(path)) is not None else "distributed"

    return LaunchesOnOneWorker(config, log)


SHM_OP = Path(EXTENSIONS) / "deepspeed_shm_comm"
"""DeepSpeed's CPU comm op's build folder (torch.utils.cpp_extension names it after the op)."""


def _start_deepspeed_build(session) -> None:
    """The op build the first ZeRO launch would wait for, begun now in one background process when
    a distributed test is collected and the op is not built yet. The launches' own prebuild
    (tests/distributed/_harness.py) then waits on its lock or finds it built."""
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0":
        return  # one build for the run: the first worker starts it, whichever runs the launches
    wanted = any(_distributed(item) for item in session.items)
    if not wanted or importlib.util.find_spec("deepspeed") is None or any(SHM_OP.glob("*.so")):
        return
    from prism_strategy.bench.launch.ds_ops import BUILD

    SHM_OP.parent.mkdir(parents=True, exist_ok=True)
    env = os.environ | {"DS_ACCELERATOR": "cpu", "TORCH_EXTENSIONS_DIR": EXTENSIONS}
    log = open(SHM_OP.parent / "background-build.log", "w")  # noqa: SIM115 - held by the child
    session.config._deepspeed_build = (
        subprocess.Popen(
            [sys.executable, "-c", BUILD], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        ),
        log,
        (SHM_OP / "lock").exists(),
    )


def pytest_collection_finish(session):
    _start_deepspeed_build(session)


def pytest_sessionfinish(session):
    """A run that stops early (-x) stops the build too; its lock is not left to block the next."""
    started = getattr(session.config, "_deepspeed_build", None)
    if started is None:
        return
    proc, log, had_lock = started
    if proc.poll() is None:  # the compiler's processes too: the build runs in its own session
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        if not had_lock and not any(SHM_OP.glob("*.so")):
            (SHM_OP / "lock").unlink(missing_ok=True)
    log.close()


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    # Tables take the width of the run's COLUMNS (report/console.py), which differs by caller (an
    # xdist worker has 80, a plain pipe none: 100); a test that wants a width sets it itself.
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", EXTENSIONS)
    cache = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("PRISM_STRATEGY_DB", str(cache / "results.db"))

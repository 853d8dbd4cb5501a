"""Launch real multi-process benchmark runs and turn them into stored results.

Each run is `torch.distributed.run` (torchrun) with the bench worker, in its own process
session, under a timeout: on timeout or interrupt the whole session is terminated (SIGTERM,
then SIGKILL), so no rank is left behind. A rank that crashes makes the run `failed` with the
rank named; a run that does not finish in time is `timeout`; an out-of-memory is `oom`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prism_strategy.bench.launch.ds_ops import extensions_dir, prepare_deepspeed_ops
from prism_strategy.bench.launch.fingerprint import fingerprint
from prism_strategy.bench.results.store import Result
from prism_strategy.inputs.stored import row_values
from prism_strategy.specs.errors import SpecError


@dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    status: str
    ranks: list[dict[str, Any]]
    seconds: float
    error: str = ""
    log_tail: str = ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_session(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


WORKER = "prism_strategy.bench.launch.worker"


def worker_command(configs: list[dict[str, Any]], out: Path, extra: list[str], module: str = WORKER) -> list[str]:
    nproc = int(configs[0]["nproc"])
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        "--nnodes=1",
        "--master-addr=127.0.0.1",
        f"--master-port={free_port()}",
        "-m",
        module,
        "--config",
        json.dumps(configs),
        "--out",
        str(out),
        *extra,
    ]


def launch(
    config: dict[str, Any],
    *,
    timeout_s: float,
    memory_limit_bytes: float | None = None,
    extra_args: list[str] | None = None,
) -> Outcome:
    return launch_many([config], timeout_s=timeout_s, memory_limit_bytes=memory_limit_bytes, extra_args=extra_args)[0]


def launch_many(
    configs: list[dict[str, Any]],
    *,
    timeout_s: float,
    memory_limit_bytes: float | None = None,
    extra_args: list[str] | None = None,
    module: str = WORKER,
) -> list[Outcome]:
    """One torchrun job running the configs in turn (same nproc); one Outcome per config.
    module: the worker each rank runs (the bench worker, or commbench's). The ranks run under the
    first config's "rank_env" (an env profile's variables: bench/launch/rank_env.py), if any."""
    if len({int(c["nproc"]) for c in configs}) != 1:
        raise SpecError("configs launched together must have the same nproc")
    extra = list(extra_args or [])
    if memory_limit_bytes:
        extra += ["--memory-limit-bytes", str(memory_limit_bytes)]
    rank_vars = configs[0].get("rank_env") or {}
    env = {k: v for k, v in os.environ.items() if k not in rank_vars.get("unset", ())} | rank_vars.get("set", {})
    env |= {"OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1")}
    env |= {"TORCH_EXTENSIONS_DIR": str(extensions_dir(env))}
    if configs[0].get("device", "cpu") == "cpu":
        env |= {"DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": "", "PRISM_DEVICE": "cpu"}
    if any(_builds_cpu_ops(c) for c in configs):
        prepare_deepspeed_ops(env)  # once, before the ranks: they would each build it, under one lock
    with tempfile.TemporaryDirectory(prefix="prism-bench-") as tmp:
        out, log = Path(tmp) / "ranks", Path(tmp) / "log.txt"
        t0 = time.perf_counter()
        with log.open("wb") as f:
            proc = subprocess.Popen(
                worker_command(configs, out, extra, module),
                stdout=f,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )
            try:
                rc = proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                rc = None
            finally:
                _kill_session(proc)
        seconds = time.perf_counter() - t0
        per_rank = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))] if out.exists() else []
        tail = log.read_text(errors="replace")[-3000:]
    nproc = int(configs[0]["nproc"])
    return [
        _outcome(rc, [r[i] for r in per_rank if i < len(r)], nproc, seconds / len(configs), tail, timeout_s)
        for i in range(len(configs))
    ]


def _builds_cpu_ops(config: dict[str, Any]) -> bool:
    """The config builds an engine that JIT-builds a CPU op (DeepSpeed); commbench replays its
    collectives without building one."""
    from prism_strategy.engines import engine_of
    from prism_strategy.strategies import get_strategy

    if config.get("collectives") is not None:  # a commbench replay: no engine is built
        return False
    name = config.get("strategy")
    return isinstance(name, str) and engine_of(get_strategy(name)).builds_cpu_ops


_KILLED = re.compile(r"rank\s*:\s*(\d+)[^\n]*\n\s*exitcode\s*:\s*-9\b")
"""torchrun's failure summary (torch/distributed/elastic/multiprocessing/errors: `rank : R
(local_rank: L)` then `exitcode : -9 (pid: P) SIGKILL`) for a rank the kernel killed."""


def sigkilled_ranks(tail: str) -> list[int]:
    """Ranks torchrun reports killed by SIGKILL (exit -9): on a host without a scheduler's limits,
    most likely the kernel's OOM killer."""
    return sorted({int(m.group(1)) for m in _KILLED.finditer(tail)})


def _outcome(rc: int | None, ranks: list[dict], nproc: int, seconds: float, tail: str, timeout_s: float) -> Outcome:
    missing = sorted(set(range(nproc)) - {r["rank"] for r in ranks})
    killed = [r for r in sigkilled_ranks(tail) if r in missing] if rc is not None else []
    if killed:
        return Outcome(
            status="oom",
            ranks=ranks,
            seconds=seconds,
            log_tail=tail,
            error=f"rank(s) {killed} killed by SIGKILL (exit -9): killed, most likely out of host memory "
            "(the kernel's OOM killer; `dmesg` says)",
        )
    if any(r["status"] == "oom" for r in ranks):
        bad = [r["rank"] for r in ranks if r["status"] == "oom"]
        return Outcome(
            status="oom", ranks=ranks, seconds=seconds, error=f"out of memory on rank(s) {bad}", log_tail=tail
        )
    if rc is None and missing:
        return Outcome(
            status="timeout",
            ranks=ranks,
            seconds=seconds,
            log_tail=tail,
            error=f"no result within {timeout_s:g} s; ranks that never reported: {missing}",
        )
    failed = [r for r in ranks if r["status"] != "ok"]
    if failed or missing:
        what = "; ".join(f"rank {r['rank']}: {r.get('error', '?')}" for r in failed)
        what += f"; ranks that died without a result: {missing}" if missing else ""
        return Outcome(
            status="failed", ranks=ranks, seconds=seconds, error=what.strip("; ") or f"exit code {rc}", log_tail=tail
        )
    return Outcome(status="ok", ranks=ranks, seconds=seconds)


def _spread(times: list[float]) -> float:
    """(max - min) / median of one rank's timed steps: how noisy the measurement was."""
    times = sorted(times)
    return (times[-1] - times[0]) / times[len(times) // 2] if times else 0.0


def rank_spread(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Who sets the pace: each rank's median step, the slowest rank, and (slowest - median) / median
    across ranks (a straggler's share; the step-to-step spread is `step_time_spread`)."""
    by_rank = sorted(ranks, key=lambda r: r["rank"])
    steps = [r["step_s"] for r in by_rank]
    middle = sorted(steps)[len(steps) // 2]
    slowest = max(by_rank, key=lambda r: r["step_s"])
    return {
        "step_s_per_rank": steps,
        "slowest_rank": slowest["rank"],
        "rank_spread": (slowest["step_s"] - middle) / middle if middle else 0.0,
    }


def measured(config: dict[str, Any], o: Outcome) -> dict[str, Any]:
    if o.status != "ok":
        return {
            "error": o.error,
            "log_tail": o.log_tail[-1500:],
            "seconds": o.seconds,
            "peak_memory_bytes": max((r.get("peak_memory_bytes") or 0 for r in o.ranks), default=None) or None,
        }
    step = max(r["step_s"] for r in o.ranks)  # the slowest rank sets the pace
    v = row_values(config)
    samples = int(v["micro_batch"]) * int(v["grad_accum"]) * int(v["nproc"])
    tokens_per_s = samples * int(v["seq_len"]) / step
    return {
        "step_time_s": step,
        "samples_per_s": samples / step,
        "tokens_per_s": tokens_per_s,
        "tokens_per_s_per_device": tokens_per_s / int(v["nproc"]),
        "forward_s": max(r["forward_s"] for r in o.ranks),
        "backward_s": max(r["backward_s"] for r in o.ranks),
        "optimizer_s": max(r["optimizer_s"] for r in o.ranks),
        "step_time_spread": max(_spread(r["step_times"]) for r in o.ranks),
        "peak_memory_bytes": max(r["peak_memory_bytes"] or 0 for r in o.ranks) or None,
        "peak_memory_per_rank": [r["peak_memory_bytes"] for r in sorted(o.ranks, key=lambda r: r["rank"])],
        **rank_spread(o.ranks),
        "device": o.ranks[0].get("device"),
        "backend": o.ranks[0].get("backend"),
        "seconds": o.seconds,
    }


def to_result(
    config: dict[str, Any], o: Outcome, *, platform: str, backend: str, predicted: dict[str, Any], kind: str = "bench"
) -> Result:
    return Result(
        kind=kind,
        status=o.status,
        strategy=config["strategy"],
        platform=platform,
        config=config,
        measured=measured(config, o),
        predicted=predicted,
        fingerprint=fingerprint(
            platform=platform,
            backend=backend,
            strategy_config={k: row_values(config)[k] for k in ("strategy", "precision", "ckpt_freq", "grad_accum")},
        ),
    )


def check_config(config: dict[str, Any]) -> None:
    """A launchable config: a strategy, and a layout whose world is the nproc torchrun starts."""
    if "strategy" not in config:
        raise SpecError("bench config misses 'strategy'")
    v = row_values(config)
    nproc, rpn = int(config.get("nproc", v["nproc"])), int(v["ranks_per_node"])
    if nproc < 1 or rpn < 1 or nproc % rpn or nproc != v["nproc"]:
        raise SpecError(f"--nproc ({nproc}) must be a positive multiple of --ranks-per-node ({rpn})")

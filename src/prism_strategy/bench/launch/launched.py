"""`bench --launched`: the candidates timed inside an allocation a scheduler launched (mpiexec
under PBS/PALS, MPICH or Open MPI, srun, or multi-node torchrun), every rank running this module
in-process, as `commbench --launched` does for the collectives alone.

Each rank builds the model, runs the candidates in the order given (the plan's), and rank 0
gathers every rank's row per candidate, stores it with its prediction and reports. What ends a
candidate and what ends the job:
- an out-of-memory (CUDA/XPU raise it and the rank carries on; on CPU the --memory-limit cap stands
  in) is recorded as "does not fit at micro-batch B" and the next candidate runs;
- any other failure (a crash, a collective that timed out: the process group's watchdog, the
  `--timeout-s`) is recorded with the ranks' errors and ends the job: a group that timed out
  cannot be trusted for the next candidate;
- the time budget (`--budget-min`) is checked before each candidate against the slowest rank's
  clock (rank 0 decides for all): a candidate not started is recorded as `skipped`, never half-run.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Any

from prism_strategy.bench.launch.harness import Outcome, to_result
from prism_strategy.bench.results.predict import predict
from prism_strategy.bench.results.store import Result, Store
from prism_strategy.inputs.stored import RowChange, row_values, row_with
from prism_strategy.specs.cluster import PlatformSpec
from prism_strategy.specs.errors import SpecError

LAUNCHER_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PALS_RANKID", "PMI_RANK", "SLURM_PROCID")
"""One of these says a launcher started this process (runtime/launch_env.py reads them in this order)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchedRun:
    """How a launched bench runs its candidates."""

    budget_s: float | None = None
    """Wall-clock seconds for the whole job; no candidate starts after it is spent."""
    memory_limit_bytes: float | None = None
    """CPU: a rank whose tracked peak goes above this counts as out of memory."""
    platform_ref: str = ""
    """How the store names the platform: the preset's name, or a platform file's absolute path (which
    compare and plan --db load again from any folder); empty: the platform's name."""

    def __post_init__(self) -> None:
        if self.budget_s is not None and not self.budget_s > 0:
            raise SpecError(f"--budget-min must be > 0, got {self.budget_s / 60:g}; leave it out for no budget")
        if self.memory_limit_bytes is not None and not self.memory_limit_bytes > 0:
            raise SpecError("--memory-limit must be > 0 GiB")


def check_launched(environ: dict[str, str] | None = None) -> None:
    """Bad input before anything is built: no launcher variables means nothing launched this rank."""
    env = os.environ if environ is None else environ
    if not any(k in env for k in LAUNCHER_VARIABLES):
        raise SpecError(
            "bench --launched: no launcher variables (" + ", ".join(LAUNCHER_VARIABLES) + "); start every rank "
            "with mpiexec, srun or torchrun (emit writes bench.pbs / bench.sbatch), or drop --launched to "
            "launch the ranks on this machine"
        )


FAULT_VARIABLE = "PRISM_BENCH_FAULT"
"""Testing: `hang:R:S` or `crash:R:S` (e.g. hang:1:2) makes rank R hang (or exit) at step S of every candidate, as the
local bench worker's --fault does."""


def injected_fault(env: Any) -> dict[str, Any]:
    raw = env.get(FAULT_VARIABLE, "")
    if not raw:
        return {"fault": None, "fault_rank": -1, "fault_step": -1}
    kind, _, rest = raw.partition(":")
    rank, _, step = rest.partition(":")
    if kind not in ("hang", "crash") or not rank.isdigit() or not step.isdigit():
        raise SpecError(
            f"{FAULT_VARIABLE}={raw!r}: give e.g. hang:1:2 (rank 1 hangs at step 2) or crash:1:2, or unset it"
        )
    return {"fault": kind, "fault_rank": int(rank), "fault_step": int(step)}


def _agree(value: Any) -> Any:
    """Rank 0's value, on every rank."""
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _gathered(row: dict[str, Any]) -> list[dict[str, Any]]:
    import torch.distributed as dist

    rows: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(rows, row)
    return rows


def _outcome(rows: list[dict[str, Any]], seconds: float, micro_batch: int) -> Outcome:
    bad = [r for r in rows if r["status"] != "ok"]
    if any(r["status"] == "oom" for r in bad):
        ranks = [r["rank"] for r in bad if r["status"] == "oom"]
        return Outcome(
            status="oom",
            ranks=rows,
            seconds=seconds,
            error=f"does not fit at micro-batch {micro_batch}: rank(s) {ranks}",
        )
    if bad:
        what = "; ".join(f"rank {r['rank']}: {r.get('error', '?')}" for r in bad)
        return Outcome(status="failed", ranks=rows, seconds=seconds, error=what)
    return Outcome(status="ok", ranks=rows, seconds=seconds)


def _predicted(config: dict[str, Any], platform: PlatformSpec) -> dict[str, Any]:
    try:
        return predict(config, platform)
    except SpecError as e:
        return {"error": str(e)}


def _store_ready(store: Store | None, rank: int) -> str:
    """Rank 0 opens the store (creating its schema) before any candidate runs: a path the ranks
    cannot write ends the job at once, not after the measurements."""
    if rank != 0 or store is None:
        return ""
    try:
        store.run(lambda con: None)
    except SpecError as e:
        return str(e)
    return ""


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchedReport:
    """Rank 0's view of a launched bench."""

    results: list[Result]
    """One per candidate that ran, stored (ok, oom, failed)."""
    skipped: list[tuple[str, str]]
    """(strategy, why) for each candidate not started: the budget was spent, or the job ended."""


def _measure(config: dict[str, Any], args: argparse.Namespace, rank: int) -> Outcome:
    """Every rank runs the candidate, then the ranks' rows are gathered. A rank that hung or died
    leaves the group unusable: the gather itself fails (after the group's timeout), and the row
    this rank has is the verdict."""
    from prism_strategy.bench.launch.worker import run_all

    started = time.perf_counter()
    row = run_all([config], args, rank)[0]
    try:
        rows = _gathered(row)
    except Exception as e:  # noqa: BLE001 - the group failed: the verdict is this rank's row and the error
        error = f"the process group failed while gathering the ranks' results ({type(e).__name__}: {e})"
        failed = row | {"status": "failed", "error": f"{row.get('error', '')} {error}".strip()}
        return Outcome(status="failed", ranks=[failed], seconds=time.perf_counter() - started, error=failed["error"])
    return _outcome(rows, time.perf_counter() - started, int(row_values(config)["micro_batch"]))


def _context(base: dict[str, Any], store: Store | None) -> Any:
    """The job's process group, checked: the rank count the flags name, a store rank 0 can write."""
    from prism_strategy.bench.launch.worker import worker_context

    ctx = worker_context(base)
    nproc = int(row_values(base)["nproc"])
    if ctx.world_size != nproc:
        raise SpecError(
            f"--launched --nproc {nproc}: the launcher started {ctx.world_size} ranks; give --nproc the job's rank count"
        )
    if problem := _agree(_store_ready(store, ctx.rank)):
        raise SpecError(problem)
    return ctx


def _result(config: dict[str, Any], outcome: Outcome, platform: PlatformSpec, ctx: Any, run: LaunchedRun) -> Result:
    stored_as = run.platform_ref or platform.name
    return to_result(config, outcome, platform=stored_as, backend=ctx.backend, predicted=_predicted(config, platform))


def run_launched_bench(
    base: dict[str, Any], strategies: list[str], platform: PlatformSpec, store: Store | None, run: LaunchedRun
) -> LaunchedReport | None:
    """Every rank runs the candidates in order; rank 0 stores them and returns the report (None
    on the other ranks)."""
    t0 = time.monotonic()
    ctx = _context(base, store)
    args = argparse.Namespace(memory_limit_bytes=run.memory_limit_bytes, **injected_fault(os.environ))
    results: list[Result] = []
    skipped: list[tuple[str, str]] = []
    for i, name in enumerate(strategies):
        if run.budget_s is not None and _agree(time.monotonic() - t0) >= run.budget_s:
            skipped = [(s, f"not started: the {run.budget_s / 60:g} min budget was spent") for s in strategies[i:]]
            break
        config = row_with(base, RowChange(strategy=name))
        outcome = _measure(config, args, ctx.rank)
        result = _result(config, outcome, platform, ctx, run)
        results.append(_stored(result, store) if ctx.rank == 0 else result)  # stored as measured: a kill keeps it
        if outcome.status == "failed":
            skipped = [(s, f"not started: {name} failed and ended the job") for s in strategies[i + 1 :]]
            break
    if not any(r.status == "failed" for r in results):  # a failed group cannot end cleanly: rank 0 ends the job
        from prism_strategy.bench.launch.worker import finish_group

        finish_group()
    return LaunchedReport(results=results, skipped=skipped) if ctx.rank == 0 else None


def _stored(r: Result, store: Store | None) -> Result:
    return r if store is None else dataclasses.replace(r, id=store.add(r))


def end_job() -> None:
    """After a failed candidate, rank 0 (its results stored and shown) ends the job: it stops itself
    with SIGTERM, which every launcher here treats as an abnormal end and answers by stopping the
    other ranks, a hung one included (MPICH's Hydra waits on a plain non-zero exit; Open MPI, srun
    with --kill-on-bad-exit and torchrun stop the job either way). The job's exit status is non-zero."""
    import signal

    os.kill(os.getpid(), signal.SIGTERM)


class _Stop(Exception):
    """Ends a launched tune before the search would: the budget is spent, or a candidate failed."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchedTune:
    """Rank 0's view of a launched tune."""

    tune: Any
    """bench/fit/tune.py TuneResult: what was measured, the best, why it stopped."""
    results: list[Result]
    """Every stored run, in the order measured."""
    failed: bool


def run_launched_tune(
    base: dict[str, Any], grid: list[Any], platform: PlatformSpec, store: Store | None, run: LaunchedRun
) -> LaunchedTune | None:
    """`tune --launched`: tune's search (most promising first, stop when none left can win, the
    prediction's error learned as it goes) with each candidate timed by every rank of the job. Every
    rank takes rank 0's measured throughput, so all of them walk the same search."""
    from prism_strategy.bench.fit.tune import TuneResult, tune

    t0 = time.monotonic()
    ctx = _context(base, store)
    args = argparse.Namespace(memory_limit_bytes=run.memory_limit_bytes, **injected_fault(os.environ))
    results: list[Result] = []
    done: list[tuple[Any, float]] = []

    def measure(c: Any) -> float:
        if run.budget_s is not None and _agree(time.monotonic() - t0) >= run.budget_s:
            raise _Stop(f"the {run.budget_s / 60:g} min budget was spent")
        config = row_with(base, RowChange(strategy=c.strategy, micro_batch=c.micro_batch, ckpt_freq=c.ckpt_freq))
        outcome = _measure(config, args, ctx.rank)
        result = _result(config, outcome, platform, ctx, run)
        results.append(_stored(result, store) if ctx.rank == 0 else result)
        if outcome.status == "failed":
            raise _Stop(f"{c.strategy} at micro-batch {c.micro_batch} failed and ended the job")
        got = _agree(float(result.measured.get("samples_per_s") or 0.0) if outcome.status == "ok" else 0.0)
        done.append((c, got))
        return got

    try:
        res, failed = tune(grid, measure), False
    except _Stop as e:
        best = max(done, key=lambda m: m[1], default=(None, 0.0))
        res = TuneResult(best=best[0] if best[1] > 0 else None, best_samples_per_s=best[1], measured=done)
        res.grid_size, res.stop_reason, failed = len(grid), str(e), "failed" in str(e)
    if not failed:
        from prism_strategy.bench.launch.worker import finish_group

        finish_group()
    return LaunchedTune(tune=res, results=results, failed=failed) if ctx.rank == 0 else None

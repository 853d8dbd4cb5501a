"""What the run commands ask of bench/, as the Scenario and RunLength their flag values become
(cli/bench_inputs.py, which keeps the checks in the order the CLI has always made them): the
last checks (bad input exits 2 before anything launches), then the runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prism_strategy.bench.launch.rank_env import RankEnv
from prism_strategy.bench.launch.run import RunLength, bench_config, check_memory, run_ceiling, run_tune
from prism_strategy.bench.results.store import Store
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.presets import load_platform
from prism_strategy.specs.scenario import Scenario


def strategy_names(strategies: str) -> list[str]:
    from prism_strategy.strategies import parse_strategies

    return [s.name for s in parse_strategies(strategies)]


def existing_store(db: str | None) -> Store:
    """The store a read-only command reads: an explicit --db that does not exist is bad input."""
    if db is not None:
        try:
            missing = not Path(db).is_file()
        except (OSError, ValueError):
            missing = True
        if missing:
            raise SpecError(
                f"--db {db[:200]}: no results store there; check the path, or store runs first with "
                "`prism-strategy bench` or `results import`"
            )
    return Store(db)


def bench_request(
    sc: Scenario, run: RunLength, names: list[str], platform: str, env: RankEnv | None = None
) -> dict[str, Any]:
    """`bench`'s base config: the Scenario run `run` long, with env (the ranks' environment,
    bench/launch/rank_env.py) kept in it; the host memory and DeepSpeed's build lock checked
    before anything launches."""
    cfg = bench_config(sc, run) | ({"rank_env": env.launch_env()} if env else {})
    check_memory(cfg, names, load_platform(platform))
    refuse_stale_build_lock(cfg, names)
    return cfg


def platform_ref(platform: str) -> str:
    """The name a stored row keeps for --platform: a preset's name as given, a platform file's
    absolute path (a relative one would not load again from another folder)."""
    path = Path(platform)
    return str(path.resolve()) if path.suffix == ".toml" and path.is_file() else platform


def launched_request(launched: bool, *, platform: str, budget_min: float | None, memory_limit: float | None) -> Any:
    """`bench --launched`'s run settings (None without --launched); bad input, and a process no
    launcher started, exit 2 before anything is built."""
    from prism_strategy.bench.launch.launched import LaunchedRun, check_launched
    from prism_strategy.specs.cluster import GiB

    if not launched:
        if budget_min is not None or memory_limit is not None:
            raise SpecError(
                "--budget-min and --memory-limit (or PRISM_BENCH_MEMORY_LIMIT) are for bench --launched; "
                "add --launched or drop them (unset the variable)"
            )
        return None
    run = LaunchedRun(
        budget_s=None if budget_min is None else budget_min * 60,
        memory_limit_bytes=None if memory_limit is None else memory_limit * GiB,
        platform_ref=platform_ref(platform),
    )
    check_launched()
    return run


def refuse_stale_build_lock(cfg: dict[str, Any], names: list[str]) -> None:
    """A stale DeepSpeed build lock is bad input found before any progress is shown (the launch
    checks again, bench/launch/harness.py): the one line, not a progress bar then the line."""
    import importlib.util
    import os

    from prism_strategy.bench.launch.ds_ops import extensions_dir, stale_lock_error, stale_locks
    from prism_strategy.engines import engine_of
    from prism_strategy.strategies import get_strategy

    if cfg.get("device", "cpu") != "cpu" or importlib.util.find_spec("deepspeed") is None:
        return
    if not any(engine_of(get_strategy(n)).builds_cpu_ops for n in names):
        return
    env = dict(os.environ) | (cfg.get("rank_env") or {}).get("set", {})
    if stale := stale_locks(extensions_dir(env)):
        raise stale_lock_error(stale)


def check_ceiling(strategy: str, memory_limit: float | None) -> None:
    """Refuse (SpecError) an unknown strategy or a memory limit that is not positive."""
    from prism_strategy.strategies import get_strategy

    get_strategy(strategy)
    if memory_limit is not None and memory_limit <= 0:
        raise SpecError(f"--memory-limit must be > 0 GiB, got {memory_limit}")


def ceiling_search(
    sc: Scenario,
    run: RunLength,
    strategy: str,
    *,
    memory_limit: float | None,
    max_micro_batch: int,
    platform: str,
    db: str | None,
) -> dict[str, Any]:
    """`ceiling`: the bisection's answer beside the planner's seed, from the Scenario at micro-batch
    1, each trial one step (memory_limit: GiB per rank, None for none)."""
    from prism_strategy.specs.cluster import GiB

    check_ceiling(strategy, memory_limit)
    c, r = run_ceiling(
        bench_config(sc, run),
        strategy,
        platform,
        Store(db),
        max_micro_batch=max_micro_batch,
        memory_limit_bytes=memory_limit * GiB if memory_limit else None,
    )
    return {
        "strategy": strategy,
        "ceiling": c.ceiling,
        "predicted": r.predicted["max_micro_batch"],
        "runs": c.runs,
        "trials": c.trials,
        "id": r.id,
    }


def tune_search(
    sc: Scenario,
    run: RunLength,
    names: list[str],
    micro_batches: list[int],
    ckpt_freqs: list[int],
    *,
    platform: str,
    db: str | None,
    calibration: str,
    launched: Any = None,
) -> dict[str, Any] | None:
    """`tune`: the grid of strategies x micro-batches x checkpointing from the Scenario, most
    promising measured first. launched: `launched_request`'s settings for a tune run by every rank
    of a job (None on the ranks other than 0), else None."""
    cfg = bench_config(sc, run)
    if launched is None:
        return run_tune(cfg, names, micro_batches, ckpt_freqs, platform, Store(db), calibration=calibration).as_dict()
    return launched_tune(
        cfg, names, micro_batches, ckpt_freqs, platform=platform, db=db, calibration=calibration, run=launched
    )


def launched_tune(
    cfg: dict[str, Any],
    names: list[str],
    mbs: list[int],
    ks: list[int],
    *,
    platform: str,
    db: str | None,
    calibration: str,
    run: Any,
) -> dict[str, Any] | None:
    """`tune --launched` on every rank; rank 0's summary (with `failed` when a candidate ended the job)."""
    from prism_strategy.bench.launch.launched import run_launched_tune
    from prism_strategy.bench.launch.run import tune_grid
    from prism_strategy.estimate.calibration import calibrated_platform

    plat = load_platform(platform)
    grid = tune_grid(cfg, names, mbs, ks, calibrated_platform(plat, calibration))
    out = run_launched_tune(cfg, grid, plat, Store(db), run)
    return None if out is None else out.tune.as_dict() | {"failed": out.failed}


def compare_rows(db: str | None, calibration: str, skipped: list[str] | None = None) -> list[dict[str, Any]]:
    """`compare`: every stored configuration's prediction (calibrated when one applies) beside it.
    A calibration file applies to the runs of its own platform; the others stay uncalibrated (a
    store holding runs of several platforms compares them all). A row the model cannot read is
    left out and named in `skipped` (bench/results/compare.py compare)."""
    from prism_strategy.bench.results.compare import compare
    from prism_strategy.estimate.calibration import calibrated_platform, load_calibration

    own = None if calibration in ("auto", "none") else load_calibration(calibration)["platform"]

    def platform_for(name: str):
        return calibrated_platform(load_platform(name), calibration if own in (None, name) else "none")

    return compare(existing_store(db).query(), platform_for=platform_for, skipped=skipped)

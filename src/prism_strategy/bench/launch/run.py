"""The bench / ceiling / tune workflows: configs in, real runs, results stored with predictions."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from prism_strategy.bench.fit.ceiling import Ceiling, search_ceiling
from prism_strategy.bench.fit.tune import Candidate, TuneResult, tune
from prism_strategy.bench.launch.harness import check_config, launch, launch_many, to_result
from prism_strategy.bench.results.predict import predict
from prism_strategy.bench.results.store import Result, Store
from prism_strategy.inputs.stored import RowChange, bench_row, row_values, row_with
from prism_strategy.specs.cluster import GiB, PlatformSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.presets import load_platform
from prism_strategy.specs.scenario import Scenario

OnResult = Callable[[int, int, Result], None]


@dataclass(frozen=True, kw_only=True, slots=True)
class RunLength:
    """How long one launch runs a configuration."""

    steps: int = 3
    """Timed optimizer steps (0 for a census: it records the step after the warm-up)."""
    warmup: int = 1
    """Untimed steps before them."""
    timeout_s: float = 600
    """Wall-clock limit of the launch, per configuration."""

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise SpecError(f"--steps must be >= 1, got {self.steps}")
        if self.warmup < 0:
            raise SpecError("--warmup must be >= 0")


def bench_config(sc: Scenario, run: RunLength, **facts: Any) -> dict[str, Any]:
    """The stored config of a bench launch: the Scenario serialised (inputs/stored.py bench_row)
    with the run's length and facts."""
    cfg = bench_row(sc, steps=run.steps, warmup=run.warmup, timeout_s=run.timeout_s, **facts)
    check_config(cfg | {"strategy": "ddp"})
    return cfg


def platform_with_limit(platform: PlatformSpec, memory_limit_bytes: float | None) -> PlatformSpec:
    if not memory_limit_bytes:
        return platform
    return platform.with_values(memory_gib=memory_limit_bytes / GiB, usable_fraction=1.0)


def _predicted(config: dict[str, Any], platform: PlatformSpec) -> dict[str, Any]:
    try:
        return predict(config, platform)
    except SpecError as e:
        return {"error": str(e)}


def run_one(
    config: dict[str, Any],
    platform: PlatformSpec,
    store: Store,
    *,
    memory_limit_bytes: float | None = None,
    kind: str = "bench",
    extra_args: list[str] | None = None,
) -> Result:
    o = launch(
        config, timeout_s=float(config["timeout_s"]), memory_limit_bytes=memory_limit_bytes, extra_args=extra_args
    )
    r = to_result(
        config,
        o,
        platform=platform.name,
        backend=platform.backend,
        kind=kind,
        predicted=_predicted(config, platform_with_limit(platform, memory_limit_bytes)),
    )
    rid = store.add(r)
    return dataclasses.replace(r, id=rid)


def run_many(
    configs: list[dict[str, Any]],
    platform: PlatformSpec,
    store: Store,
    *,
    memory_limit_bytes: float | None = None,
    kind: str = "bench",
) -> list[Result]:
    """Several configs in one launch (one process start); each stored as its own result."""
    outcomes = launch_many(
        configs, timeout_s=sum(float(c["timeout_s"]) for c in configs), memory_limit_bytes=memory_limit_bytes
    )
    out = []
    for c, o in zip(configs, outcomes):
        r = to_result(
            c,
            o,
            platform=platform.name,
            backend=platform.backend,
            kind=kind,
            predicted=_predicted(c, platform_with_limit(platform, memory_limit_bytes)),
        )
        out.append(dataclasses.replace(r, id=store.add(r)))
    return out


def scan_ceiling_runs(
    base: dict[str, Any], strategy: str, platform: str, store: Store, *, memory_limit_bytes: float | None, upto: int
) -> list[Result]:
    """The exhaustive reference: micro-batch 1..upto in one launch."""
    configs = [
        row_with(base, RowChange(strategy=strategy, micro_batch=mb, steps=1, warmup=1)) for mb in range(1, upto + 1)
    ]
    return run_many(
        configs, load_platform(platform), store, memory_limit_bytes=memory_limit_bytes, kind="ceiling-trial"
    )


def host_memory_available() -> float | None:
    """Bytes this host can still give (MemAvailable, /proc/meminfo: the kernel's estimate of what
    can be allocated without swapping); None where it is not known."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def memory_problem(config: dict[str, Any], platform: PlatformSpec, available: float | None) -> str | None:
    """Why this run cannot fit, with the figures; None when it fits. On CPU every rank shares this
    host's memory (`available` bytes, MemAvailable); on a device, each rank has the platform's."""
    p, v = predict(config, platform), row_values(config)
    need, nproc = float(p["memory_bytes"]), int(v["nproc"])
    what = f"{v['strategy']} at micro-batch {v['micro_batch']} needs {need / GiB:.1f} GiB per rank (predicted)"
    fix = "a smaller --model (tiny-llama and small-llama fit a CPU), --micro-batch, --seq-len or --nproc"
    if config.get("device", "cpu") == "cpu":
        if available is not None and need * nproc > available:
            return (
                f"{what} x {nproc} ranks = {need * nproc / GiB:.1f} GiB > {available / GiB:.1f} GiB available on "
                f"this host (MemAvailable); not launched: {fix}"
            )
        return None
    if need > platform.usable_bytes:
        return (
            f"{what} > {platform.usable_bytes / GiB:.1f} GiB usable per device on {platform.name}; not launched: {fix}"
        )
    return None


def check_memory(
    base: dict[str, Any], strategies: list[str], platform: PlatformSpec, available: float | None = None
) -> None:
    """Refuse (SpecError, exit 2) before anything is launched when a strategy's run cannot fit."""
    available = host_memory_available() if available is None else available
    for s in strategies:
        try:
            problem = memory_problem(row_with(base, RowChange(strategy=s)), platform, available)
        except SpecError:
            continue  # not modelled: the run itself will say
        if problem is not None:
            raise SpecError(f"{row_values(base)['model']}: {problem}")


def run_bench(
    base: dict[str, Any],
    strategies: list[str],
    platform: str,
    store: Store,
    on_result: OnResult | None = None,
    extra_args: list[str] | None = None,
) -> list[Result]:
    plat = load_platform(platform)
    check_memory(base, strategies, plat)
    out = []
    for i, s in enumerate(strategies):
        r = run_one(row_with(base, RowChange(strategy=s)), plat, store, extra_args=extra_args)
        out.append(r)
        if on_result:
            on_result(i + 1, len(strategies), r)
    return out


def run_ceiling(
    base: dict[str, Any],
    strategy: str,
    platform: str,
    store: Store,
    *,
    memory_limit_bytes: float | None,
    max_micro_batch: int = 1024,
    on_result: OnResult | None = None,
) -> tuple[Ceiling, Result]:
    plat = platform_with_limit(load_platform(platform), memory_limit_bytes)
    seed = int(predict(row_with(base, RowChange(strategy=strategy, micro_batch=1)), plat)["max_micro_batch"])
    trials: list[Result] = []

    def measure(mb: int) -> str:
        r = run_one(
            row_with(base, RowChange(strategy=strategy, micro_batch=mb, steps=1, warmup=1)),
            load_platform(platform),
            store,
            memory_limit_bytes=memory_limit_bytes,
            kind="ceiling-trial",
        )
        trials.append(r)
        if on_result:
            on_result(len(trials), 0, r)
        return r.status

    c = search_ceiling(measure, seed=max(seed, 1), max_micro_batch=max_micro_batch)
    summary = Result(
        kind="ceiling",
        status="ok",
        strategy=strategy,
        platform=platform,
        config=row_with(base, RowChange(strategy=strategy, micro_batch=max(c.ceiling, 1)))
        | {"memory_limit_bytes": memory_limit_bytes},
        measured={"ceiling": c.ceiling, "trials": c.trials, "runs": c.runs},
        predicted={"max_micro_batch": seed},
        fingerprint=trials[-1].fingerprint if trials else {},
    )
    return c, dataclasses.replace(summary, id=store.add(summary))


def tune_grid(
    base: dict[str, Any], strategies: list[str], micro_batches: list[int], ckpt_freqs: list[int], ranking: PlatformSpec
) -> list[Candidate]:
    """Every strategy x micro-batch x checkpointing, each with the throughput `ranking` predicts."""
    grid = []
    for s in strategies:
        for mb in micro_batches:
            for k in ckpt_freqs:
                p = _predicted(row_with(base, RowChange(strategy=s, micro_batch=mb, ckpt_freq=k)), ranking)
                grid.append(
                    Candidate(
                        strategy=s,
                        micro_batch=mb,
                        ckpt_freq=k,
                        predicted_samples_per_s=float(p.get("samples_per_s", 0.0)),
                    )
                )
    return grid


def run_tune(
    base: dict[str, Any],
    strategies: list[str],
    micro_batches: list[int],
    ckpt_freqs: list[int],
    platform: str,
    store: Store,
    on_result: OnResult | None = None,
    calibration: str | None = "auto",
) -> TuneResult:
    """Candidates are ranked with the calibrated platform when a calibration applies (`calibration`:
    a file, "auto" or "none"); results are stored with the uncalibrated prediction, as bench does."""
    from prism_strategy.estimate.calibration import calibrated_platform

    plat = load_platform(platform)
    grid = tune_grid(base, strategies, micro_batches, ckpt_freqs, calibrated_platform(plat, calibration))

    def measure(c: Candidate) -> float:
        r = run_one(
            row_with(base, RowChange(strategy=c.strategy, micro_batch=c.micro_batch, ckpt_freq=c.ckpt_freq)),
            plat,
            store,
        )
        if on_result:
            on_result(0, len(grid), r)
        return float(r.measured.get("samples_per_s") or 0.0) if r.status == "ok" else 0.0

    return tune(grid, measure)

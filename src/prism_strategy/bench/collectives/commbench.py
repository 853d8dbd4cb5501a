"""commbench: replay, on the real backend at the launched scale, the collectives each strategy
issues in one optimizer step of the scenario, without the model's compute; time each kind and
store it (bench/results/curves.py) beside the link model's prediction (estimate/comm.py `price`).

What is replayed is the engine model (engines' `step_collectives`: op, group, dtype, bytes per
call, calls, in the step's order), which `census` holds against the real engines in CI; each
replay is itself recorded like a census (bench/collectives/commbench_worker.py), so a collective that was
not issued as the model says is reported, not timed silently. All strategies run in one launch.
Per kind: the slowest rank's median seconds per call (after a barrier, every rank starts the
kind together), and the widest spread. Per strategy: comm_s = sum over kinds of calls x seconds
per call, measured and predicted: the collectives run back to back, nothing overlaps compute.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from prism_strategy.bench.collectives.census import census_config
from prism_strategy.bench.launch.fingerprint import fingerprint
from prism_strategy.bench.launch.harness import Outcome, launch_many
from prism_strategy.bench.launch.rank_env import RankEnv, priced_under, rank_env
from prism_strategy.bench.results.curves import Point, Run, write_run
from prism_strategy.engines import engine_of, step_collectives
from prism_strategy.estimate.comm import group_geometry, price
from prism_strategy.inputs.stored import row_values, scenario_from_row
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.parts import model_parts
from prism_strategy.specs.scenario import Scenario
from prism_strategy.strategies import get_strategy

WARMUP, REPETITIONS = 2, 5


@dataclass(frozen=True, kw_only=True, slots=True)
class Kind:
    op: str
    group: str
    ranks: int
    dtype: str
    bytes_per_call: float
    """The engine model's payload per call (mean over the step's calls)."""
    calls: int
    phase: str
    seconds_per_call_predicted: float
    bytes_per_call_replayed: float | None = None
    seconds_per_call_measured: float | None = None
    spread: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


@dataclass(frozen=True, kw_only=True, slots=True)
class StrategyBench:
    strategy: str
    engine: str
    collectives: tuple[Kind, ...]
    error: str = ""
    """Why nothing was measured, or where the replay differed from the engine model."""

    @property
    def measured(self) -> bool:
        return not self.error and all(k.seconds_per_call_measured is not None for k in self.collectives)

    @property
    def comm_s_predicted(self) -> float:
        return sum(k.calls * k.seconds_per_call_predicted for k in self.collectives)

    @property
    def comm_s_measured(self) -> float | None:
        if not self.measured:
            return None
        return sum(k.calls * (k.seconds_per_call_measured or 0.0) for k in self.collectives)

    def as_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "engine": self.engine,
            "ok": self.measured,
            "error": self.error,
            "comm_s_measured": self.comm_s_measured,
            "comm_s_predicted": self.comm_s_predicted,
            "collectives": [k.as_dict() for k in self.collectives],
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class CommbenchReport:
    world: int
    nodes: int
    ranks_per_node: int
    platform: str
    backend: str
    fingerprint: dict[str, Any]
    strategies: tuple[StrategyBench, ...]
    stored: int = 0
    run_key: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    environment: RankEnv | None = None
    """--env-profile's variables, set in the ranks' environment and stored with the curves."""

    @property
    def ok(self) -> bool:
        return all(s.measured for s in self.strategies)

    def as_dict(self) -> dict[str, Any]:
        return {
            "world": self.world,
            "nodes": self.nodes,
            "ranks_per_node": self.ranks_per_node,
            "platform": self.platform,
            "backend": self.backend,
            "run_key": self.run_key,
            "stored": self.stored,
            "fingerprint": self.fingerprint,
            "environment": None if self.environment is None else self.environment.as_dict(self.backend),
            "strategies": [s.as_dict() for s in self.strategies],
        }

    @property
    def environment_note(self) -> str:
        return "" if self.environment is None else self.environment.note(self.backend)


def check_commbench(nproc: int, env_profile: str | None) -> None:
    """Refuse (SpecError) a commbench no launch runs: fewer than 2 ranks, an unknown env profile."""
    if nproc < 2:
        raise SpecError(f"--nproc {nproc}: commbench times collectives between ranks; launch at least 2")
    rank_env(env_profile, "cpu")


def commbench_config(
    sc: Scenario, *, reduce_dtype: str | None = None, timeout_s: float = 300, env_profile: str | None = None
) -> dict[str, Any]:
    """One commbench launch's config: the census config of the Scenario (census_config; a
    projector-only scenario replays only the trainable part's collectives) and env_profile, the
    profile the ranks run under (bench/launch/rank_env.py), kept as a run fact."""
    base = census_config(sc, reduce_dtype=reduce_dtype, timeout_s=timeout_s)
    return base | ({"env_profile": env_profile} if env_profile is not None else {})


def predicted_kinds(base: dict[str, Any], strategy: str, platform: Any) -> tuple[Any, list[Kind]]:
    """The strategy's spec and its step's collectives, each priced by the link model."""
    sc = scenario_from_row(base)
    opts = {
        k: v
        for k, v in (("bucket_mb", sc.memory.bucket_mb), ("reduce_dtype", base.get("reduce_dtype")))
        if v is not None
    }
    spec = get_strategy(strategy)
    spec = spec.with_options(**opts) if opts else spec
    parts = model_parts(sc.model, sc.training)
    out = []
    for c in step_collectives(spec, parts, sc.training, sc.layout, grad_accum=int(sc.training.grad_accum or 1)):
        cost = price(c, sc.layout, platform)
        out.append(
            Kind(
                op=c.op,
                group=c.group,
                ranks=group_geometry(c.group, sc.layout)[0],
                dtype=c.dtype,
                bytes_per_call=c.bytes_per_call,
                calls=c.calls,
                phase=c.phase,
                seconds_per_call_predicted=cost.seconds_per_step / c.calls,
            )
        )
    return spec, out


def replay_mismatch(kinds: list[Kind], replayed: list[dict[str, Any]], census: list[dict[str, Any]]) -> str:
    """Where the profiler's record of the replay differs from the kinds asked for ("" when none)."""
    want: dict[tuple[str, int, str], list[float]] = {}
    for k, r in zip(kinds, replayed):
        w = want.setdefault((k.op, k.ranks, k.dtype), [0, 0.0])
        w[0] += k.calls
        w[1] += k.calls * r["bytes_replayed"]
    got = {(c["op"], int(c["group_size"]), c["dtype"]): [c["calls"], c["bytes"]] for c in census}
    bad = [
        f"{op}({n}, {dt}): asked {w[0]} calls / {w[1]:.0f} B, recorded {got.get((op, n, dt))}"
        for (op, n, dt), w in want.items()
        if got.get((op, n, dt)) != [w[0], w[1]]
    ]
    extra = [f"{k} recorded but not asked" for k in got if k not in want]
    return "; ".join(bad + extra)


def _measured(spec: Any, kinds: list[Kind], outcome: Any) -> StrategyBench:
    if outcome.status != "ok":
        return StrategyBench(
            strategy=spec.name, engine=spec.engine, collectives=tuple(kinds), error=f"{outcome.status}: {outcome.error}"
        )
    ranks = sorted(outcome.ranks, key=lambda r: r["rank"])
    rows = [r["kinds"] for r in ranks]
    done = tuple(
        replace(
            k,
            bytes_per_call_replayed=float(rows[0][i]["bytes_replayed"]),
            seconds_per_call_measured=max(r[i]["median_s"] for r in rows),
            spread=max(r[i]["spread"] for r in rows),
        )
        for i, k in enumerate(kinds)
    )
    error = replay_mismatch(kinds, rows[0], ranks[0]["census"])
    return StrategyBench(
        strategy=spec.name,
        engine=spec.engine,
        collectives=done,
        error=f"the replay differs from the engine model: {error}" if error else "",
    )


def _points(s: StrategyBench, layout: Any) -> list[Any]:
    out = []
    for k in s.collectives:
        ranks, nodes, conc = group_geometry(k.group, layout)
        out.append(
            Point(
                op=k.op,
                group_ranks=ranks,
                group_nodes=nodes,
                concurrent=conc,
                dtype=k.dtype,
                bytes=float(k.bytes_per_call_replayed or 0.0),
                seconds=float(k.seconds_per_call_measured or 0),
                spread=k.spread,
                repetitions=REPETITIONS,
                source=f"commbench {s.strategy} {k.group}",
            )
        )
    return out


def _fingerprint(
    platform: Any, base: dict[str, Any], ranks: list[dict[str, Any]], env: RankEnv | None
) -> dict[str, Any]:
    first = ranks[0] if ranks else {}
    fp = fingerprint(platform=platform.name, backend=first.get("backend") or platform.backend)
    v = row_values(base)
    rpn = int(v["ranks_per_node"])
    return fp | {
        "nodes": int(v["nproc"]) // rpn,
        "ranks_per_node": rpn,
        "env_profile": platform.env_profile if env is None else env.profile,
        "env": first.get("collective_env") or ({} if env is None else env.collective),
        "backend_version": first.get("backend_version"),
        "device": first.get("device"),
    }


def _configs(base: dict[str, Any], strategies: list[str], platform: Any) -> tuple[list[Any], list[dict[str, Any]]]:
    if not strategies:
        raise SpecError("--strategies is empty; give a comma-separated list or 'all'")
    layout = scenario_from_row(base).layout
    planned = [predicted_kinds(base, s, platform) for s in strategies]
    empty = [spec.name for spec, kinds in planned if not kinds]
    if empty:
        raise SpecError(
            f"{', '.join(empty)} issue no collective at {layout.nodes}x{layout.ranks_per_node} ranks; nothing to time"
        )
    env = rank_env(base.get("env_profile"), platform.name)
    configs = [
        {
            **({"rank_env": env.launch_env()} if env else {}),
            "nproc": layout.world,
            "ranks_per_node": layout.ranks_per_node,
            "timeout_s": base["timeout_s"],
            "strategy": spec.name,
            "engine": spec.engine,
            "world_on_mesh": engine_of(spec).world_on_mesh,
            "warmup": WARMUP,
            "repetitions": REPETITIONS,
            "collectives": [
                {"op": k.op, "group": k.group, "dtype": k.dtype, "bytes_per_call": k.bytes_per_call, "calls": k.calls}
                for k in kinds
            ],
        }
        for spec, kinds in planned
    ]
    return planned, configs


def _report(
    base: dict[str, Any], planned: list[Any], outcomes: list[Any], platform: Any, store: Any
) -> CommbenchReport:
    """Measured kinds beside the prediction; stored as one run when any strategy was measured."""
    layout = scenario_from_row(base).layout
    results = tuple(_measured(spec, kinds, o) for (spec, kinds), o in zip(planned, outcomes))
    env = rank_env(base.get("env_profile"), platform.name)
    fp = _fingerprint(platform, base, next((o.ranks for o in outcomes if o.status == "ok"), []), env)
    key = f"commbench:{uuid.uuid4().hex[:16]}"
    points = [p for s in results if s.measured for p in _points(s, layout)]
    stored = 0
    if points:
        stored, _ = write_run(
            store,
            Run(
                run_key=key,
                format="commbench",
                platform=platform.name,
                nodes=layout.nodes,
                ranks_per_node=layout.ranks_per_node,
                backend=fp["backend"],
                points=tuple(points),
                fingerprint=fp,
                source="commbench",
            ),
        )
    return CommbenchReport(
        world=layout.world,
        nodes=layout.nodes,
        ranks_per_node=layout.ranks_per_node,
        platform=platform.name,
        backend=fp["backend"],
        fingerprint=fp,
        strategies=results,
        stored=stored,
        run_key=key if stored else "",
        config=base,
        environment=env,
    )


def run_commbench(base: dict[str, Any], strategies: list[str], platform: Any, store: Any) -> CommbenchReport:
    """Every strategy's step replayed in ONE local torchrun launch, the ranks under the config's env
    profile; measured kinds stored as one run."""
    planned, configs = _configs(base, strategies, priced_under(base, platform))
    outcomes = launch_many(
        configs,
        timeout_s=float(base["timeout_s"]) * len(configs),
        module="prism_strategy.bench.collectives.commbench_worker",
    )
    return _report(base, planned, outcomes, platform, store)


def run_launched(base: dict[str, Any], strategies: list[str], platform: Any, store: Any) -> CommbenchReport | None:
    """Inside ranks a scheduler launched (emit's commbench.pbs / commbench.sbatch): every rank
    replays, rank 0 gathers the ranks' rows, stores and reports (None on the other ranks). The job
    exported its env profile already (emit's env.sh): --env-profile names it for the record."""
    import time

    import torch.distributed as dist

    from prism_strategy.bench.collectives.commbench_worker import run as run_rank

    planned, configs = _configs(base, strategies, priced_under(base, platform))
    outcomes = []
    for cfg in configs:
        t0 = time.perf_counter()
        try:
            row = run_rank(cfg)
        except Exception as e:  # noqa: BLE001 - this strategy's failure, reported by rank 0
            row = {
                "rank": dist.get_rank() if dist.is_initialized() else -1,
                "status": "failed",
                "error": f"{type(e).__name__}: {e}",
            }
        if not dist.is_initialized():
            raise SpecError(
                f"commbench --launched: no process group ({row.get('error', '')}); launch it with "
                "mpiexec / srun / torchrun, one process per device"
            )
        if dist.get_world_size() != int(base["nproc"]):
            raise SpecError(
                f"commbench --launched --nproc {base['nproc']}: the launcher started {dist.get_world_size()} ranks"
            )
        rows: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(rows, row)
        bad = [r for r in rows if r["status"] != "ok"]
        outcomes.append(
            Outcome(
                status="failed" if bad else "ok",
                ranks=rows,
                seconds=time.perf_counter() - t0,
                error="; ".join(f"rank {r['rank']}: {r.get('error', '?')}" for r in bad),
            )
        )
    from prism_strategy.bench.launch.worker import finish_group

    report = _report(base, planned, outcomes, platform, store) if dist.get_rank() == 0 else None
    finish_group()  # after rank 0 stored: the others wait for it here
    return report

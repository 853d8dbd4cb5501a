"""The run commands' flag values as what bench/ takes: the Scenario (inputs/scenario.py, through
flags.py scenario_from_flags) and the run's RunLength (bench/launch/run.py). The checks run in the
order the CLI has always made them, so bad input exits 2 on one line before anything launches.
Tests and benchmarks build their bench rows here too, from the same keywords."""

from __future__ import annotations

from typing import Any

from prism_strategy.bench.launch.run import RunLength, bench_config
from prism_strategy.flags import scenario_from_flags
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.lora import adapted, resolve_lora
from prism_strategy.specs.policies import checked_int
from prism_strategy.specs.presets import load_model, load_platform
from prism_strategy.specs.scenario import Scenario
from prism_strategy.specs.training import parse_ckpt

CENSUS_DEFAULTS = {"micro_batch": 2, "seq_len": 32, "precision": "bf16-mixed", "mode": "e2e"}
"""A census's scenario where its flags are not given."""


def bench_scenario(model: str, *, nproc: int, ranks_per_node: int | None = None, **options: Any) -> Scenario:
    """The Scenario a bench or census launch runs: nproc ranks (ranks_per_node per node, default all
    on one), the batch exactly micro_batch x grad_accum x nproc; options are scenario_from_flags's
    (micro_batch, seq_len, grad_accum, ckpt_freq, precision, optimizer, loss, mode, vision,
    bucket_mb, ...). Bad input raises SpecError before anything runs."""
    spec = load_model(model)
    seq_len, micro_batch = options.get("seq_len", 1024), options.get("micro_batch", 1)
    if isinstance(seq_len, int) and seq_len > spec.max_positions:
        raise SpecError(f"--seq-len {seq_len} exceeds {spec.name}'s max positions {spec.max_positions}")
    accum = options.setdefault("grad_accum", 1)
    for name, v in (
        ("--nproc", nproc),
        ("--micro-batch", micro_batch),
        ("--seq-len", seq_len),
        ("--grad-accum", accum),
    ):
        checked_int(name, v)
    rpn = ranks_per_node or nproc
    if rpn < 1 or nproc % rpn:
        raise SpecError(f"--nproc ({nproc}) must be a positive multiple of --ranks-per-node ({rpn})")
    if parse_ckpt(options.setdefault("ckpt_freq", 0))[0] is None:
        raise SpecError("--ckpt-freq auto is a plan search; bench runs one setting: give k or sac")
    if options.get("lora") is not None:
        options["lora"] = resolve_lora(options["lora"])  # a bad adapter config is said first, as plan says it
        adapted(spec, options["lora"])  # and a target that is no Linear of the model
        check_lora_run(options.get("vision"))
    return scenario_from_flags(
        model,
        platform="cpu",
        nodes=nproc // rpn,
        ranks_per_node=rpn,
        global_batch=micro_batch * accum * nproc,
        **options,
    )


def check_lora_run(vision: str | None) -> None:
    """A LoRA run puts peft's adapters on the ranks' model (bench/launch/worker.py with_lora): peft
    must be importable here, before any rank starts, and the model a text model."""
    import importlib.util

    if importlib.util.find_spec("peft") is None:
        raise SpecError("--lora runs peft's LoRA on every rank, and peft is not installed: pip install peft")
    if vision is not None:
        raise SpecError("--lora with --vision: bench and census run LoRA on a text model; drop --vision")


def run_inputs(
    model: str, *, nproc: int, steps: int, warmup: int, timeout_s: float, **options: Any
) -> tuple[Scenario, RunLength]:
    """The Scenario of bench_scenario(model, nproc=..., **options) and the run's length (options:
    ranks_per_node and bench_scenario's); the length is checked first."""
    run = RunLength(steps=steps, warmup=warmup, timeout_s=timeout_s)
    return bench_scenario(model, nproc=nproc, **options), run


def base_config(model: str, **flags: Any) -> dict[str, Any]:
    """The stored base config (bench/launch/run.py bench_config) of run_inputs(model, **flags)."""
    return bench_config(*run_inputs(model, **flags))


def bench_from_flags(
    strategies: str, platform: str, env_profile: str | None = None, **flags: Any
) -> tuple[dict[str, Any], list[str]]:
    """`bench`'s base config (bench/launch/requests.py bench_request) and strategy names; flags
    are run_inputs's. With env_profile, the ranks' environment under it (bench/launch/rank_env.py)."""
    from prism_strategy.bench.launch.rank_env import rank_env
    from prism_strategy.bench.launch.requests import bench_request, strategy_names

    names = strategy_names(strategies)
    env = rank_env(env_profile, load_platform(platform).name)
    return bench_request(*run_inputs(**flags), names, platform, env), names


def ceiling_from_flags(strategy: str, *, memory_limit: float | None, **flags: Any) -> dict[str, Any]:
    """`ceiling`'s answer (bench/launch/requests.py ceiling_search) from micro-batch 1, one step per
    trial; flags: ceiling_search's max_micro_batch, platform and db, the rest run_inputs's."""
    from prism_strategy.bench.launch.requests import ceiling_search, check_ceiling

    check_ceiling(strategy, memory_limit)
    search = {k: flags.pop(k) for k in ("max_micro_batch", "platform", "db")}
    sc, run = run_inputs(**flags, micro_batch=1, steps=1, warmup=1, grad_accum=1)
    return ceiling_search(sc, run, strategy, memory_limit=memory_limit, **search)


def tune_from_flags(
    strategies: str, micro_batches: str, ckpt_freqs: str, *, launched: Any = None, **flags: Any
) -> dict[str, Any] | None:
    """`tune`'s summary (bench/launch/requests.py tune_search) from the grid's flags; flags:
    tune_search's platform, db and calibration, the rest run_inputs's."""
    from prism_strategy.bench.launch.requests import strategy_names, tune_search
    from prism_strategy.specs.values import int_list

    names = strategy_names(strategies)
    mbs = int_list(micro_batches, "--micro-batches")
    ks = int_list(ckpt_freqs, "--ckpt-freqs", minimum=0) if ckpt_freqs.strip() else [0]
    search = {k: flags.pop(k) for k in ("platform", "db", "calibration")}
    sc, run = run_inputs(**flags, micro_batch=1, steps=3, warmup=1, ckpt_freq=0, grad_accum=1)
    return tune_search(sc, run, names, mbs or [1], ks, launched=launched, **search)


def census_scenario(
    model: str, *, nproc: int, ranks_per_node: int | None, reduce_dtype: str | None = None, **options: Any
) -> Scenario:
    """The Scenario of one census launch: bench_scenario's, CENSUS_DEFAULTS where a flag is not
    given, after census's own checks (bench/collectives/census.py check_census)."""
    from prism_strategy.bench.collectives.census import check_census

    options = CENSUS_DEFAULTS | options
    check_census(options["precision"], options["mode"], options.get("vision"), options.get("bucket_mb"), reduce_dtype)
    return bench_scenario(model, nproc=nproc, ranks_per_node=ranks_per_node, **options)


def census_base(model: str, *, reduce_dtype: str | None = None, timeout_s: float = 300, **flags: Any) -> dict[str, Any]:
    """The shared config of one census launch (bench/collectives/census.py census_config): one
    warm-up step and one recorded step of census_scenario(model, **flags)."""
    from prism_strategy.bench.collectives.census import census_config

    sc = census_scenario(model, reduce_dtype=reduce_dtype, **flags)
    return census_config(sc, reduce_dtype=reduce_dtype, timeout_s=timeout_s)


def commbench_base(
    model: str,
    *,
    nproc: int,
    reduce_dtype: str | None = None,
    timeout_s: float = 300,
    env_profile: str | None = None,
    **flags: Any,
) -> dict[str, Any]:
    """The config of one commbench launch (bench/collectives/commbench.py commbench_config) of
    census_scenario(model, nproc=..., **flags), with census's defaults."""
    from prism_strategy.bench.collectives.commbench import check_commbench, commbench_config

    check_commbench(nproc, env_profile)
    sc = census_scenario(model, nproc=nproc, reduce_dtype=reduce_dtype, **flags)
    return commbench_config(sc, reduce_dtype=reduce_dtype, timeout_s=timeout_s, env_profile=env_profile)

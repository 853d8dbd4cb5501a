"""The scenario of an imported run: flags first, then what the log states; nothing guessed.

Required: model, mode, strategy, platform, nodes, micro_batch, seq_len, ckpt_freq, precision.
A field neither given nor stated by the log is bad input naming its flag. ``grad_accum``
defaults to 1 and a torchtitan log's mode to e2e (torchtitan trains the whole LLM), both said in
the report. Nodes and ranks per node come from ``--nodes`` and the log's
world size, else from the log's world size and the platform's devices per node.
"""

from __future__ import annotations

from typing import Any

from prism_strategy.inputs.scenario import build_scenario
from prism_strategy.inputs.stored import bench_row
from prism_strategy.readers import torchtitan
from prism_strategy.readers.training_log import ParsedLog
from prism_strategy.specs.cluster import PlatformSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.model import MODES
from prism_strategy.specs.policies import BatchPolicy, MemoryPolicy
from prism_strategy.specs.presets import load_model, load_platform
from prism_strategy.specs.training import PRECISIONS, parse_ckpt
from prism_strategy.strategies import get_strategy

FIELDS = (
    "model",
    "vision",
    "mode",
    "strategy",
    "platform",
    "nodes",
    "micro_batch",
    "grad_accum",
    "seq_len",
    "ckpt_freq",
    "precision",
)
REQUIRED = ("model", "mode", "strategy", "platform", "nodes", "micro_batch", "seq_len", "ckpt_freq", "precision")
FROM_LOG = ("mode", "strategy", "micro_batch", "grad_accum", "seq_len")
ENGINE_OPTIONS = ("bucket_cap_mb", "static_graph", "find_unused_parameters")


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _layout(s: dict[str, Any], origin: dict[str, str], log: ParsedLog, plat: PlatformSpec) -> None:
    """nodes, ranks_per_node, nproc from --nodes, the log's world size and the platform."""
    world, where = log.scenario.get("world_size"), log.scenario_where.get("world_size", "")
    rpn = log.scenario.get("ranks_per_node")
    if "nodes" in s:
        if world is not None:
            if world % s["nodes"]:
                raise SpecError(f"{where}: world size {world} does not split over --nodes {s['nodes']}")
            rpn = world // s["nodes"]
        s["ranks_per_node"] = rpn or plat.hardware.devices_per_node
    elif "nodes" in log.scenario:
        s["nodes"], origin["nodes"] = log.scenario["nodes"], log.scenario_where["nodes"]
        s["ranks_per_node"] = rpn or plat.hardware.devices_per_node
    elif world is not None:
        per = rpn or plat.hardware.devices_per_node
        if world < per:
            per = world
        if world % per:
            raise SpecError(
                f"{where}: world size {world} is not a multiple of {plat.name}'s {per} ranks per node; pass --nodes"
            )
        s["nodes"], s["ranks_per_node"] = world // per, per
        origin["nodes"] = f"world size {world} / {per} ranks per node ({where})"
    if "nodes" in s:
        s["nproc"] = s["nodes"] * s["ranks_per_node"]


def _micro_batch(s: dict[str, Any], origin: dict[str, str], log: ParsedLog) -> None:
    if "micro_batch" in s or "nproc" not in s:
        return
    for key, ranks in (("samples_per_step", s["nproc"]), ("samples_per_rank_step", 1)):
        if key in log.scenario:
            total, where = log.scenario[key], log.scenario_where[key]
            per = ranks * s["grad_accum"]
            if total % per:
                raise SpecError(
                    f"{where}: {total} samples per step do not split into {per} micro-batches "
                    "(ranks x grad accum); pass --micro-batch and --grad-accum"
                )
            s["micro_batch"], origin["micro_batch"] = total // per, f"{total} samples per step ({where})"
            return


def _check(s: dict[str, Any]) -> None:
    get_strategy(s["strategy"])
    if s["mode"] not in MODES:
        raise SpecError(f"unknown mode {s['mode']!r}; choose one of {', '.join(MODES)}")
    if s["precision"] not in PRECISIONS:
        raise SpecError(f"unknown precision {s['precision']!r}; choose one of {', '.join(PRECISIONS)}")
    for name in ("nodes", "micro_batch", "grad_accum", "seq_len"):
        if int(s[name]) < 1:
            raise SpecError(f"{flag(name)} must be >= 1, got {s[name]}")
    s["ckpt_freq"] = _ckpt(s["ckpt_freq"])


def _ckpt(value: Any) -> int | str:
    """--ckpt-freq as plan reads it (specs/training.parse_ckpt): k or sac; `auto` is a search,
    and a measured run ran one setting."""
    k, policy = parse_ckpt(value if isinstance(value, (int, str)) else str(value))
    if k is None:
        raise SpecError("--ckpt-freq auto is plan's search; a measured run ran one setting: pass k (0 = none) or sac")
    return "sac" if policy == "sac" else k


NEVER_IN_LOG = ("model", "platform", "ckpt_freq", "precision")
"""Required fields no log format states (the readers' `state` calls): their flags are checked
before the log is read, so a missing one is said at once, not after a long parse."""


def check_flags(flags: dict[str, Any], where: str) -> None:
    """What the flags alone decide, before the log is read: the fields no log states are given,
    and each given value is one this tool knows (strategy, mode, precision, platform, model, sizes)."""
    missing = [k for k in NEVER_IN_LOG if flags.get(k) is None]
    if missing:
        raise SpecError(f"{where}: a log does not say {', '.join(missing)}; pass {', '.join(flag(k) for k in missing)}")
    s = {k: v for k, v in flags.items() if v is not None}
    if "strategy" in s:
        get_strategy(s["strategy"])
    if "mode" in s and s["mode"] not in MODES:
        raise SpecError(f"unknown mode {s['mode']!r}; choose one of {', '.join(MODES)}")
    if s["precision"] not in PRECISIONS:
        raise SpecError(f"unknown precision {s['precision']!r}; choose one of {', '.join(PRECISIONS)}")
    for name in ("nodes", "micro_batch", "grad_accum", "seq_len"):
        if name in s and int(s[name]) < 1:
            raise SpecError(f"{flag(name)} must be >= 1, got {s[name]}")
    _ckpt(s["ckpt_freq"])
    load_platform(s["platform"])
    for name in (s["model"], s.get("vision")):
        if name is not None:
            load_model(name)


def resolve(flags: dict[str, Any], log: ParsedLog, where: str) -> tuple[dict[str, Any], PlatformSpec, dict[str, str]]:
    """(stored config, platform, where each field came from)."""
    s = {k: v for k, v in flags.items() if v is not None}
    origin = {k: "flag" for k in s}
    for k in FROM_LOG:
        if k not in s and k in log.scenario:
            s[k], origin[k] = log.scenario[k], log.scenario_where[k]
    if "strategy" not in s and "dist_strategy" in log.scenario:
        raise SpecError(
            f"{log.scenario_where['dist_strategy']}: the log says dist_strategy "
            f"{log.scenario['dist_strategy']!r} but not how it shards; pass --strategy (e.g. "
            "fsdp_full_shard, fsdp_shard_grad_op, hsdp_full_shard, hsdp_shard_grad_op)"
        )
    if "mode" not in s and log.format == torchtitan.FORMAT:
        s["mode"], origin["mode"] = "e2e", "torchtitan trains the whole LLM (e2e)"
    if "grad_accum" not in s:
        s["grad_accum"], origin["grad_accum"] = 1, "assumed 1 (neither --grad-accum nor the log says)"
    plat = load_platform(s["platform"]) if "platform" in s else None
    if plat is not None:
        _layout(s, origin, log, plat)
        _micro_batch(s, origin, log)
    missing = [k for k in REQUIRED if k not in s]
    if missing:
        raise SpecError(
            f"{where}: the log does not say {', '.join(missing)}; pass {', '.join(flag(k) for k in missing)}"
        )
    _check(s)
    _same_model(s, log)
    return _row(s, log, plat, where), plat, origin


PARAMS_APART = 0.05
"""The log's parameter count and --model's may differ by counting conventions (tied embeddings,
norm weights); more than 5% apart they are different models (issue 36: a 5x-wrong prediction
stored beside a log whose model did not match)."""


def _same_model(s: dict[str, Any], log: ParsedLog) -> None:
    """The model the log printed (torchtitan: `size: N total parameters`) is --model's; else bad input."""
    if "model_params" not in log.scenario or s.get("vision") is not None:
        return
    said, where = log.scenario["model_params"], log.scenario_where["model_params"]
    ours = load_model(s["model"]).total_params
    if abs(ours - said) > PARAMS_APART * said:
        raise SpecError(
            f"{where}: the log's model has {said:,} parameters, --model {s['model']} has {ours:,} "
            f"({ours / said:.2f}x): pass the model the log ran (--model)"
        )


def _row(s: dict[str, Any], log: ParsedLog, plat: PlatformSpec, where: str) -> dict[str, Any]:
    """The stored config: the run's Scenario serialised (inputs/stored.py bench_row), its strategy
    and the engine options the log states."""
    for name in (s["model"], s.get("vision")):
        if name is not None:
            load_model(name)  # an unknown model is bad input, said as such
    mb, accum, nproc = int(s["micro_batch"]), int(s["grad_accum"]), int(s["nproc"])
    try:  # DDP's bucket_cap_mb is MiB, as the planner's bucket_mb
        sc = build_scenario(
            s["model"],
            plat,
            vision=s.get("vision"),
            mode=s["mode"],
            nodes=nproc // int(s["ranks_per_node"]),
            ranks_per_node=int(s["ranks_per_node"]),
            batch=BatchPolicy(
                seq_len=int(s["seq_len"]), micro_batch=mb, grad_accum=accum, global_batch=mb * accum * nproc
            ),
            memory=MemoryPolicy(checkpointing=s["ckpt_freq"], bucket_mb=log.scenario.get("bucket_cap_mb")),
            precision=s["precision"],
        )
    except SpecError as e:
        raise SpecError(f"{where}: the scenario cannot be modelled: {e}") from None
    engine = {k: log.scenario[k] for k in ENGINE_OPTIONS if k in log.scenario}
    return bench_row(sc, strategy=s["strategy"], **engine)

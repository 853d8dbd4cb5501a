"""`emit --from-plan PLAN.json`: the launch files for a plan's pick (or another of its options),
with the plan's whole layout (nodes and ranks per node: the world its global batch was planned
for), platform, precision, micro-batch, grad accumulation and checkpointing."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from prism_strategy.emit.launch import EmitRequest
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.safe_files import load_json
from prism_strategy.specs.training import parse_ckpt, parse_loss


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanChoice:
    """What a `plan --json` file chose for one strategy."""

    strategy: str
    platform: str
    nodes: int
    ranks_per_node: int | None
    """None: an older plan file without it (the platform's devices per node)."""
    precision: str
    micro_batch: int
    grad_accum: int
    ckpt_freq: int | str
    """k, or "sac" (selective checkpointing on every block)."""
    compile: bool
    plan_file: str
    loss: str = "upcast"
    env_profile: str | None = None
    """The env profile the plan priced the collectives under (inputs.env_profile); None: an older
    plan file without it (the platform's own)."""
    model: str | None = None
    """The plan's --model as it loads again (preset or path); None: an older plan file."""
    vision: str | None = None
    mode: str = "e2e"
    seq_len: int | None = None
    candidates: tuple[str, ...] = ()
    """The plan's feasible options in its order, at most BENCH_CANDIDATES: what the bench job times."""


BENCH_CANDIDATES = 3
"""The bench job times the plan's top 3: prediction prunes, measurement decides among the close ones."""


def _load(path: Path) -> dict[str, Any]:
    if not os.path.lexists(path):
        raise SpecError(
            f"--from-plan {path}: no such file; write one with `prism-strategy plan ... --json > {path}` "
            "(your plan's own options in place of ...)"
        )
    try:
        data = load_json(path, "--from-plan")  # a regular file under the size cap, depth and numbers checked
    except SpecError as e:
        detail = str(e).removeprefix(f"--from-plan {path}: ")
        raise SpecError(f"--from-plan {path}: not a `plan --json` file ({detail})") from None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("inputs"), dict)
        or not isinstance(data.get("options"), list)
    ):
        raise SpecError(f"--from-plan {path}: not a `plan --json` file (needs 'inputs' and 'options')")
    return data


def _int(d: dict[str, Any], key: str, where: str, minimum: int) -> int:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise SpecError(f"{where}: '{key}' must be an integer >= {minimum}, got {v!r}")
    return v


def plan_choice(path: str | Path, strategy: str | None = None) -> PlanChoice:
    """The plan's recommended option, or `strategy`'s; it must be one the plan found feasible."""
    path = Path(path)
    data = _load(path)
    inputs, where = data["inputs"], f"--from-plan {path}"
    name = strategy or data.get("recommended")
    if not name:
        raise SpecError(f"{where}: the plan recommends no strategy (none fits); pass --strategy to pick one anyway")
    option = next((o for o in data["options"] if isinstance(o, dict) and o.get("strategy") == name), None)
    if option is None:
        names = ", ".join(str(o.get("strategy")) for o in data["options"] if isinstance(o, dict))
        raise SpecError(f"{where}: no option {name!r} in the plan; it has {names}")
    if not option.get("feasible", False):
        raise SpecError(f"{where}: the plan found {name} infeasible ({option.get('why_not')}); pick a feasible option")
    if not isinstance(inputs.get("platform"), str) or not isinstance(inputs.get("precision"), str):
        raise SpecError(f"{where}: inputs need 'platform' and 'precision' strings")
    rpn = None if inputs.get("ranks_per_node") is None else _int(inputs, "ranks_per_node", where, 1)
    return PlanChoice(
        strategy=name,
        platform=str(inputs.get("platform_argument") or inputs["platform"]),
        nodes=_int(inputs, "nodes", where, 1),
        ranks_per_node=rpn,
        precision=inputs["precision"],
        micro_batch=_int(option, "micro_batch", where, 1),
        grad_accum=_int(option, "grad_accum", where, 1),
        ckpt_freq="sac" if option.get("ckpt_freq") == "sac" else _int(option, "ckpt_freq", where, 0),
        compile=bool(inputs.get("compile", False)),
        plan_file=path.name,
        loss=str(inputs.get("loss", "upcast")),
        env_profile=_profile(inputs, where),
        candidates=_candidates(data["options"], name),
        **_scenario(inputs),
    )


def _candidates(options: list[Any], chosen: str) -> tuple[str, ...]:
    """The emitted strategy first, then the plan's other feasible options in its order."""
    names = [
        o["strategy"]
        for o in options
        if isinstance(o, dict) and o.get("feasible") and isinstance(o.get("strategy"), str)
    ]
    return tuple([chosen, *(n for n in names if n != chosen)][:BENCH_CANDIDATES])


def _profile(inputs: dict[str, Any], where: str) -> str | None:
    v = inputs.get("env_profile")
    if v is not None and (not isinstance(v, str) or not v):
        raise SpecError(f"{where}: 'env_profile' must be a profile name or path, got {v!r}")
    return v


def _scenario(inputs: dict[str, Any]) -> dict[str, Any]:
    """What the commbench job replays: the plan's model, encoder, mode and sequence length."""
    model = inputs.get("model_argument") or inputs.get("model")
    vision = inputs.get("vision_argument") or inputs.get("vision")
    seq = inputs.get("seq_len")
    return {
        "model": model if isinstance(model, str) else None,
        "vision": vision if isinstance(vision, str) else None,
        "mode": str(inputs.get("mode") or "e2e"),
        "seq_len": seq if isinstance(seq, int) and not isinstance(seq, bool) and seq > 0 else None,
    }


def request_from_plan(choice: PlanChoice, base: EmitRequest) -> EmitRequest:
    """`base` (the launcher options: account, queue, env profile, ...) with the plan's choices; the
    plan's env profile unless emit was given one."""
    return replace(
        base,
        strategy=choice.strategy,
        platform=choice.platform,
        nodes=choice.nodes,
        ranks_per_node=choice.ranks_per_node,
        precision=choice.precision,
        micro_batch=choice.micro_batch,
        grad_accum=choice.grad_accum,
        ckpt_freq=choice.ckpt_freq,
        compile=choice.compile or base.compile,
        loss=choice.loss,
        env_profile=base.env_profile or choice.env_profile,  # an --env-profile given to emit wins
        model=choice.model,
        bench_candidates=choice.candidates,
        vision=choice.vision,
        mode=choice.mode,
        seq_len=choice.seq_len,
    )


def emit_request(
    *,
    from_plan: str | None,
    strategy: str | None,
    platform: str | None,
    nodes: int | None,
    ranks_per_node: int | None = None,
    precision: str | None,
    ckpt_freq: int | str | None,
    micro_batch: int | None,
    grad_accum: int | None,
    loss: str | None = None,
    **launcher: Any,
) -> tuple[EmitRequest, PlanChoice | None]:
    """The request `emit` runs: from its options, or from a plan (whose choices the options may not
    contradict). `launcher`: the other EmitRequest fields (account, queue, env_profile, ...)."""
    chosen = {
        "--platform": platform,
        "--nodes": nodes,
        "--ranks-per-node": ranks_per_node,
        "--precision": precision,
        "--ckpt-freq": ckpt_freq,
        "--micro-batch": micro_batch,
        "--grad-accum": grad_accum,
        "--loss": loss,
    }
    if from_plan is None:
        if strategy is None or platform is None:
            raise SpecError("emit needs --strategy and --platform, or --from-plan PLAN.json (from `plan --json`)")
        k, policy = parse_ckpt(0 if ckpt_freq is None else ckpt_freq)
        if k is None:
            raise SpecError("emit --ckpt-freq auto: plan searches it; give k or sac, or emit --from-plan")
        req = EmitRequest(
            strategy=strategy,
            platform=platform,
            nodes=1 if nodes is None else nodes,
            ranks_per_node=ranks_per_node,
            precision=precision or "bf16-mixed",
            ckpt_freq="sac" if policy == "sac" else k,
            loss=parse_loss(loss or "upcast"),
            micro_batch=1 if micro_batch is None else micro_batch,
            grad_accum=1 if grad_accum is None else grad_accum,
            **launcher,
        )
        return req, None
    given = [k for k, v in chosen.items() if v is not None]
    if given:
        raise SpecError(f"{given[0]} comes from the plan with --from-plan; drop it, or plan again with it")
    choice = plan_choice(from_plan, strategy)
    base = EmitRequest(strategy=choice.strategy, platform=choice.platform, nodes=choice.nodes, **launcher)
    return request_from_plan(choice, base), choice


def write_emitted(req: EmitRequest, out: str, *, force: bool = False):
    """The launcher files of `req`, written whole into `out` or not at all: (emitted, written)."""
    from prism_strategy.emit.files import write_files_atomically
    from prism_strategy.emit.launch import emit_files

    emitted = emit_files(req, Path(out))
    return emitted, write_files_atomically(Path(out), emitted.files, force=force)

"""Candidates x estimates x rules -> Plan: every strategy evaluated, ranked and explained."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from prism_strategy.engines import engine_of
from prism_strategy.estimate.calibration import calibrated_platform
from prism_strategy.estimate.comm import CommEstimate, comm_readings, estimate_comm
from prism_strategy.estimate.compute import optimizer_time_s, part_flops_per_sample, phase_times
from prism_strategy.estimate.families import assumptions
from prism_strategy.estimate.host import host_terms
from prism_strategy.estimate.memory import MemoryEstimate, estimate_memory, moments
from prism_strategy.estimate.memory_runtime import device_peak, max_micro_batch_reserved, memory_fields
from prism_strategy.estimate.ranges import max_measured_nodes, prediction_range
from prism_strategy.estimate.scale_loss import LateRanks, late_ranks
from prism_strategy.planning.option import Option, Plan
from prism_strategy.planning.provenance import provenance
from prism_strategy.planning.recommend import annotate, recommend
from prism_strategy.planning.scenario import Scenario, build_scenario
from prism_strategy.planning.search import batch_problem, evaluate_searched, resolve_batch, with_ckpt
from prism_strategy.rules import RuleFacts, check
from prism_strategy.specs.cluster import GiB, Layout, PlatformSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.parts import Part, model_parts
from prism_strategy.specs.platform_file import defaults_text
from prism_strategy.specs.training import TrainingSpec
from prism_strategy.specs.values import int_list
from prism_strategy.strategies import StrategySpec, all_strategies, get_strategy


def _situation(sc: Scenario, s: StrategySpec) -> RuleFacts:
    """The planner's rule facts; the engine contributes its own."""
    return RuleFacts(
        device=sc.platform.device,
        backend=sc.platform.backend,
        compile=sc.training.compile,
        multi_node=sc.layout.multi_node,
        **engine_of(s).facts(s),
    )


def timed_view(sc: Scenario, parts: tuple[Part, ...]) -> tuple[Scenario, tuple[Part, ...]]:
    """The scenario and parts step time is predicted at: the mean sequence length when given
    (peak memory stays at the longest, sc.training.seq_len)."""
    t = sc.training
    if t.mean_seq_len is None or t.mean_seq_len == t.seq_len:
        return sc, parts
    timed = sc.with_training(replace(t, seq_len=t.mean_seq_len, mean_seq_len=None))
    return timed, model_parts(timed.model, timed.training)


def _with_run_options(s: StrategySpec, t: TrainingSpec) -> StrategySpec:
    """The strategy as the run configures it: the training's bucket size (DDP bucket_cap_mb,
    DeepSpeed's buckets) reaches the engine model, the one place collectives are laid out."""
    return s.with_options(bucket_mb=t.bucket_mb)


def _time(
    sc: Scenario, parts: tuple[Part, ...], s: StrategySpec, o: Option, layout: Layout, comm: CommEstimate | None = None
) -> None:
    """comm: the step's collectives when already priced on this platform (fits vary compute only)."""
    t, p = sc.training, sc.platform
    s = _with_run_options(s, t)
    comm = comm or estimate_comm(parts, t, p, layout, s, o.grad_accum)
    o.comm = comm
    phases = phase_times(parts, t, p, o.micro_batch, o.grad_accum)  # max(FLOPs, launches) per phase
    o.compute_s = phases.total
    host = host_terms(
        parts,
        comm,
        s.engine,
        layout,
        o.grad_accum,
        o.compute_s,
        p,  # grad path, overlap, blocking
        (phases.forward, phases.backward),
    )
    o.comm_s = comm.total_s + host.grad_path_s
    o.exposed_comm_s = host.exposed_s
    opt_bytes = t.param_bytes + t.grad_bytes + t.optim_bytes
    trainable = sum(x.trainable for x in parts) / s.degree(s.optim_shard, layout)
    tensors = sum(x.tensors for x in parts if x.trains)  # FSDP2 shards every tensor: each rank steps them all
    o.optimizer_s = optimizer_time_s(trainable, opt_bytes, p, tensors)
    o.late_ranks = _late_ranks(o, comm, layout, p)
    o.step_time_s = o.compute_s + o.exposed_comm_s + o.optimizer_s + o.late_ranks.seconds
    o.samples_per_s = o.micro_batch * o.grad_accum * layout.world / o.step_time_s
    o.tokens_per_s_per_device, o.mfu = per_device_rates(parts, t, p, o.samples_per_s / layout.world)
    o.bound = "comm" if o.comm_s > o.compute_s else "compute"


def _late_ranks(o: Option, comm: CommEstimate, layout: Layout, p: PlatformSpec) -> LateRanks:
    """Every collective call of the step is a synchronisation point; the fit's records ran at its
    largest node count x this layout's ranks per node (estimate/scale_loss.py)."""
    syncs = sum(c.calls_per_step for c in comm.collectives)
    measured = max_measured_nodes(p) * layout.ranks_per_node
    return late_ranks(layout.world, measured, o.compute_s, syncs, p.rank_jitter)


def per_device_rates(
    parts: tuple[Part, ...], t: TrainingSpec, p: PlatformSpec, samples_per_s_per_device: float
) -> tuple[float, float]:
    """(tokens/s per device, MFU): decoder tokens per sample, and model FLOPs per sample (forward
    + backward from estimate/compute.py, recompute excluded) against the platform's peak."""
    tokens = sum(x.tokens for x in parts if x.spec is not None and x.spec.kind == "decoder")
    flops = sum(f.forward + f.backward for f in (part_flops_per_sample(x, t) for x in parts))
    peak = (p.peak_tflops_bf16 if t.compute_dtype == "bf16" else p.peak_tflops_fp32) * 1e12
    return samples_per_s_per_device * tokens, samples_per_s_per_device * flops / peak


def evaluate(sc: Scenario, s: StrategySpec, parts: tuple[Part, ...] | None = None) -> Option:
    parts = parts or model_parts(sc.model, sc.training)
    t, p, lay = sc.training, sc.platform, sc.layout
    s = _with_run_options(s, t)
    # accumulating: gradients accumulating over micro-batches live through every backward
    # feasibility is judged on reserved (estimate/memory_runtime.py): OOM happens against it + the request
    ms = {acc: moments(parts, t, p, lay, s, accumulating=acc) for acc in (False, True)}
    batch = resolve_batch(t, lay.world, lambda accumulating: max_micro_batch_reserved(ms[accumulating], p, t))
    mb, ga, max_mb = batch.micro_batch, batch.grad_accum, batch.max_micro_batch
    mem = estimate_memory(parts, t, p, lay, s, mb, accumulating=ga > 1)
    device = device_peak(ms[ga > 1], mb, p, t)
    o = Option(
        strategy=s.name,
        feasible=True,
        why_not=None,
        memory=mem,
        max_micro_batch=max_mb,
        micro_batch=mb,
        grad_accum=ga,
        global_batch=mb * ga * lay.world,
        ckpt_freq=t.ckpt_name,
        provenance=provenance(sc),
        memory_runtime=memory_fields(mem, p, t, ms[ga > 1], mb, limit=device),
    )
    blocked = [v for v in check(_situation(sc, s)) if v.rule.blocks]
    if blocked:
        o.feasible, o.why_not = False, f"not viable: {blocked[0].message}"
    elif device > p.usable_bytes:
        o.feasible, o.why_not = False, _oom_reason(mem, p.usable_bytes, mb, max_mb, _searched_batch(t), device)
    sc, parts = timed_view(sc, parts)
    _time(sc, parts, s, o, lay)
    if p.measured_collectives:
        o.provenance["communication"] = _measured_provenance(o, lay, p)
    _set_readings(sc, parts, s, o, lay)
    _set_range(o, sc.platform, lay.nodes)
    if lay.nodes > 1:
        one = _time_only(sc, parts, s, mb, ga, Layout(nodes=1, ranks_per_node=lay.ranks_per_node))
        o.scaling_efficiency = (o.samples_per_s / lay.nodes) / one if one else None
    else:
        o.scaling_efficiency = 1.0
    return o


def _measured_provenance(o: Option, layout: Layout, p: PlatformSpec) -> str:
    """Which collectives a measured curve priced (estimate/comm_measured.py), and the model's
    provenance for the rest."""
    from prism_strategy.estimate.comm import group_geometry
    from prism_strategy.estimate.comm_measured import describe, measured_seconds

    notes, rest = [], 0
    for c in o.comm.collectives if o.comm else ():
        ranks, nodes, conc = group_geometry(c.group, layout)
        hit = measured_seconds(p.measured_collectives, c.op, c.bytes_per_call, ranks, nodes, conc)
        if hit is None:
            rest += 1
        elif (note := f"{c.op}({c.group}) {describe(hit, ranks, nodes)}") not in notes:
            notes.append(note)
    model = o.provenance["communication"]
    if not notes:
        return f"{model}; no measured curve matches these collectives' op and group shape"
    return "; ".join(notes) + (f"; other collectives {model}" if rest else "")


def _set_readings(sc: Scenario, parts: tuple[Part, ...], s: StrategySpec, o: Option, lay: Layout) -> None:
    """The step under each reading of the comm terms the fit could not rule out, said in provenance."""
    readings = comm_readings(sc.platform)
    measured = max_measured_nodes(sc.platform)
    if len(readings) < 2 or lay.nodes <= measured:
        return
    for label, p in readings.items():
        x = Option(
            strategy=s.name,
            feasible=True,
            why_not=None,
            memory=None,  # type: ignore[arg-type]
            max_micro_batch=0,
            micro_batch=o.micro_batch,
            grad_accum=o.grad_accum,
        )
        _time(sc.with_platform(p), parts, s, x, lay)
        o.step_time_s_readings[label] = x.step_time_s
    each = ", ".join(f"{k} {v:.3f} s" for k, v in o.step_time_s_readings.items())
    o.provenance["communication_beyond_fit"] = (
        f"predicted at {lay.nodes} nodes, beyond the {measured} the fit measured, where its records cannot tell how "
        f"the cross-node cost grows (estimate/comm.comm_readings): step {each}; measure it at {lay.nodes} nodes"
    )


def _set_range(o: Option, platform: PlatformSpec, nodes: int) -> None:
    """After _set_readings: the range holds every reading the fit cannot rule out."""
    late = o.late_ranks
    r = prediction_range(
        platform,
        nodes,
        o.compute_s,
        o.comm_s,
        late_s=late.slow_seconds if late else 0.0,
        step_s=o.step_time_s,
        late_basis=late.basis if late and late.slow_seconds > 0 else "",
        collectives=o.comm.collectives if o.comm else (),
    )
    r = r.with_readings(o.step_time_s, o.step_time_s_readings)
    o.range = r
    o.step_time_s_range = r.step_range(o.step_time_s)
    o.samples_per_s_range = r.rate_range(o.samples_per_s)
    o.provenance["range"] = r.basis
    if late is not None and late.seconds > 0:
        o.provenance["late_ranks"] = late.basis


def _time_only(sc: Scenario, parts, s: StrategySpec, mb: int, ga: int, layout: Layout) -> float:
    o = Option(
        strategy=s.name,
        feasible=True,
        why_not=None,
        memory=None,
        max_micro_batch=0,  # type: ignore[arg-type]
        micro_batch=mb,
        grad_accum=ga,
    )
    _time(sc, parts, s, o, layout)
    return o.samples_per_s


def _searched_batch(t) -> int | None:
    """The global batch whose micro-batch was searched (neither micro-batch nor accumulation pinned)."""
    return t.global_batch if t.micro_batch is None and t.grad_accum is None else None


def _oom_reason(
    mem: MemoryEstimate,
    usable: float,
    mb: int,
    max_mb: int,
    global_batch: int | None = None,
    device: float | None = None,
) -> str:
    """device: reserved + runtime at the worst moment (what is judged); mem.total: allocated + runtime."""
    top = ", ".join(f"{label} {b / GiB:.1f}" for label, b in mem.largest_items(2))
    hint = f"max micro-batch {max_mb}" if max_mb > 0 else "model states alone do not fit"
    at = f"no micro-batch dividing global batch {global_batch} fits: " if global_batch is not None and mb == 1 else ""
    need = mem.total if device is None else device
    alloc = f" reserved ({mem.total / GiB:.1f} allocated)" if need - mem.total >= 0.05 * GiB else ""
    return (
        f"{at}out of memory: needs {need / GiB:.1f} GiB{alloc} at micro-batch {mb} > {usable / GiB:.1f} GiB "
        f"usable ({top} GiB; {hint})"
    )


def plan(
    model: Any = "qwen3-0.6b",
    *,
    mode: str = "e2e",
    platform: str | PlatformSpec = "aurora",
    nodes: int = 1,
    seq_len: int = 1024,
    mean_seq_len: int | None = None,
    micro_batch: int | None = None,
    global_batch: int | None = None,
    grad_accum: int | None = None,
    ckpt_freq: int | str = "auto",
    precision: str = "bf16-mixed",
    optimizer: str = "adamw",
    vision: Any = None,
    image_tokens: int | None = None,
    compile: bool = False,
    ranks_per_node: int | None = None,
    sweep_nodes: Sequence[int] | str | None = None,
    calibration: str | None = "auto",
    traced: bool = False,
    bucket_mb: float | None = None,
    reduce_dtype: str | None = None,
    loss: str = "upcast",
    comm_curves: Sequence[Any] = (),
    script: dict[str, Any] | None = None,
    rank_jitter: float | None = None,
    varying_lengths: bool | None = None,
    expandable_segments: bool | None = None,
    compile_loss: bool = False,
) -> Plan:
    """Evaluate every strategy for this scenario: the options ranked, the pick and why.
    The keywords are `prism-strategy plan`'s options (`--json` is `plan_dict(result)`, `--markdown FILE`
    is `report.markdown.write_markdown(result, FILE)`).

    model: preset name, config.json path, TransformerSpec or nn.Module.
    mode: "e2e" | "projector" | "encoder-projector" (what trains; the last two need `vision`).
    platform: preset name, platform .toml path or PlatformSpec.  nodes: node count.
    seq_len: text tokens per sample, the longest (peak memory is predicted there).
    mean_seq_len: mean text tokens per sample (each batch padded to its longest); step time is
        predicted there. None = seq_len.
    micro_batch: samples per device per forward; None = each option's largest that fits.
    global_batch: samples per optimizer step; every option runs exactly
        micro_batch x grad_accum x world = global_batch (a global batch that is not a multiple of
        the world is a SpecError naming the nearest valid values).
    grad_accum: micro-batches per optimizer step; None = 1, or what global_batch needs.
    ckpt_freq: "auto" (each option searches none / every block / every 2nd / small divisors and
        keeps the fastest that fits) or k: checkpoint every k-th block, 0 = none.
    precision: "bf16-mixed" | "bf16-pure" | "fp32".  optimizer: "adamw" | "sgd".
    vision: vision encoder preset (adds it and a projector).  image_tokens: per sample (default:
        the encoder's patch count).  compile: torch.compile on (estimate/memory_compile.py).
    compile_loss: with compile, the loss compiled too (torchtitan's default since 2025-08): no fp32
        logits held; wrap() leaves the loss eager.
    ranks_per_node: default the platform's devices per node.
    sweep_nodes: node counts for a scaling table (a list, or "1,2,4" as on the command line).
    calibration: a calibration file, "auto" (the cached one when it matches) or "none".
    traced: also trace each option's real training step on fake tensors (slow).
    bucket_mb: gradient bucket MiB (DDP bucket_cap_mb, DeepSpeed reduce/allgather bucket).
    reduce_dtype: "fp32" | "bf16" (FSDP2 reduce_dtype, DeepSpeed communication_data_type).
    loss: "upcast" | "fused" | "chunked": the cross-entropy kernel (estimate/memory.py loss_bytes_per_token).
    comm_curves: measured collective curves for this platform (specs/measured.MeasuredCurve; the
        CLI loads them from the results store: bench/results/curves.py); a matching one prices its collective.
    rank_jitter: the measured per-rank spread of the work between synchronisations (std / mean; the
        CLI also reads it from a StepMonitor folder: planning/rank_jitter.py); it prices the late-rank
        term into the step (estimate/scale_loss.py). None: the platform's `rank_jitter`; unmeasured, only the
        range's slow side takes it.
    script: what a training script said about these inputs, kept as given for `inputs.script` of the
        JSON (`plan --script` reads it: diagnose/script_inputs.py; the values arrive as the keywords above).
    varying_lengths: batch shapes change step to step (padded per batch); None = when mean_seq_len < seq_len.
    expandable_segments: the run sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; None = the
        platform's env profile (both: estimate/memory_runtime.py, the allocator's reserve).
    """
    sc = build_scenario(
        model,
        mode=mode,
        platform=platform,
        nodes=nodes,
        ranks_per_node=ranks_per_node,
        seq_len=seq_len,
        micro_batch=micro_batch,
        global_batch=global_batch,
        ckpt_freq=ckpt_freq,
        precision=precision,
        optimizer=optimizer,
        vision=vision,
        image_tokens=image_tokens,
        compile=compile,
        grad_accum=grad_accum,
        mean_seq_len=mean_seq_len,
        bucket_mb=bucket_mb,
        loss=loss,
        varying_lengths=varying_lengths,
        expandable_segments=expandable_segments,
        compile_loss=compile_loss,
    )
    check_ranks_per_node(sc, ranks_per_node)
    specs = [s.with_options(bucket_mb=bucket_mb, reduce_dtype=reduce_dtype) for s in all_strategies()]
    sweep = int_list(sweep_nodes, "--sweep-nodes")
    sc = sc.with_platform(calibrated_platform(sc.platform, calibration))
    if comm_curves:
        sc = sc.with_platform(replace(sc.platform, measured_collectives=tuple(comm_curves)))
    if rank_jitter is not None:
        sc = sc.with_platform(replace(sc.platform, rank_jitter=rank_jitter))
    parts = model_parts(sc.model, sc.training)
    options = [evaluate_searched(sc, s, parts, evaluate) for s in specs]
    if traced:
        trace_options(sc, options)
    annotate(sc, parts, options)
    recommended, reasons, warnings = recommend(sc, options)
    warnings += [defaults_text(sc.platform)] if sc.platform.defaulted else []  # said once, under the table
    reasons += assumptions(sc.model, sc.training)  # MoE: data parallelism only; Gemma's attention
    result = Plan(
        scenario=sc, options=options, recommended=recommended, reasons=reasons, warnings=warnings, script=script
    )
    if sweep:
        result.sweep = sweep_rows(sc, parts, options, sweep, recommended, specs)
    return result


def check_ranks_per_node(sc: Scenario, asked: int | None) -> None:
    """A planned job places one rank per device: more ranks per node than devices is bad input."""
    dev = sc.platform.devices_per_node
    if asked is not None and asked > dev:
        raise SpecError(
            f"--ranks-per-node {asked} exceeds {sc.platform.name}'s {dev} devices per node "
            f"(one rank per device); use 1..{dev}"
        )


def trace_options(sc: Scenario, options: list[Option]) -> None:
    """Trace every option's real training step on fake tensors (slow: seconds to a minute each)."""
    from prism_strategy.traced.estimate import trace_option, traced_fields

    reserve = sc.platform.framework_reserve_gib * GiB
    for o in options:
        t = trace_option(
            sc.model,
            with_ckpt(sc, o.ckpt_freq).training,
            sc.layout,
            o.strategy,
            o.micro_batch,
            usable_bytes=sc.platform.usable_bytes,
            reserve_bytes=reserve,
        )
        o.traced = traced_fields(t.memory, reserve_bytes=reserve, search=t.search, analytic=o.memory)
        o.notes.extend(o.traced.get("traced_notes", []))


def sweep_rows(
    sc: Scenario,
    parts: tuple[Part, ...],
    options: list[Option],
    nodes_list: list[int],
    recommended: str | None = None,
    specs: list[StrategySpec] | None = None,
) -> list[dict[str, Any]]:
    """Scaling table of the leading strategies (the 3 best feasible at the planned size) and the
    recommended one, at the planned batch and checkpointing settings."""
    lead = [o.strategy for o in sorted((o for o in options if o.feasible), key=lambda o: -o.samples_per_s)[:3]]
    if recommended is not None and recommended not in lead:
        lead.insert(0, recommended)
    by_name = {s.name: s for s in (specs or all_strategies())}
    rows = []
    for n in nodes_list:
        at = sc.with_layout(Layout(nodes=n, ranks_per_node=sc.layout.ranks_per_node))
        problem = batch_problem(at.training, at.layout.world)
        for name in lead:
            if problem is not None:
                rows.append(
                    {
                        "nodes": n,
                        "strategy": name,
                        "feasible": False,
                        "why_not": problem,
                        "micro_batch": None,
                        "grad_accum": None,
                        "global_batch": None,
                        "ckpt_freq": None,
                        "step_time_s": None,
                        "samples_per_s": None,
                        "scaling_efficiency": None,
                        "bound": None,
                        "step_time_s_range": None,
                        "samples_per_s_range": None,
                    }
                )
                continue
            e = evaluate_searched(at, by_name[name], parts, evaluate)
            rows.append(
                {
                    "nodes": n,
                    "strategy": name,
                    "feasible": e.feasible,
                    "why_not": e.why_not,
                    "micro_batch": e.micro_batch,
                    "grad_accum": e.grad_accum,
                    "global_batch": e.global_batch,
                    "ckpt_freq": e.ckpt_freq,
                    "step_time_s": e.step_time_s,
                    "samples_per_s": e.samples_per_s,
                    "scaling_efficiency": None,
                    "bound": e.bound,
                    "step_time_s_range": e.step_time_s_range,
                    "samples_per_s_range": e.samples_per_s_range,
                }
            )
    return row_efficiency(rows)


def row_efficiency(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each sweep row's scaling efficiency against the rows beside it: its samples/s per node over
    the same strategy's first feasible row (the fewest nodes), each at its own batch and
    checkpointing. `efficiency_vs_nodes` names the row it is compared with."""
    base: dict[str, dict[str, Any]] = {}
    for r in rows:
        if not r["feasible"] or not r["samples_per_s"]:
            r["efficiency_vs_nodes"] = None
            continue
        b = base.setdefault(r["strategy"], r)
        r["scaling_efficiency"] = (r["samples_per_s"] / r["nodes"]) / (b["samples_per_s"] / b["nodes"])
        r["efficiency_vs_nodes"] = b["nodes"]
    return rows


def estimate_traced(model: Any, strategy: str, **kw: Any) -> Option | dict[str, Any]:
    """`prism-strategy estimate`: analytic and traced memory of one strategy side by side: the
    Option, its traced fields set (report/plan_json.estimate_dict is its JSON). model may also be a
    "pkg.mod:make_model" factory: then the traced fields alone (no spec to model analytically)."""
    from prism_strategy.traced.estimate import trace_option, traced_fields

    s = get_strategy(strategy)
    if isinstance(model, str) and ":" in model and not model.endswith(".json"):
        sc = build_scenario("tiny-llama", **kw)  # layout, training and platform only
        mb = sc.training.micro_batch or 1
        t = trace_option(
            model,
            sc.training,
            sc.layout,
            s,
            mb,
            usable_bytes=sc.platform.usable_bytes,
            reserve_bytes=sc.platform.framework_reserve_gib * GiB,
        )
        return {
            "strategy": s.name,
            "micro_batch": mb,
            "memory_gib": None,
            **traced_fields(t.memory, reserve_bytes=sc.platform.framework_reserve_gib * GiB, search=t.search),
        }
    sc = build_scenario(model, **kw)
    check_ranks_per_node(sc, kw.get("ranks_per_node"))
    o = evaluate(sc, s)
    trace_options(sc, [o])
    return o

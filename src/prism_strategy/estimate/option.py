"""One option estimated: the public, pure entry into the estimates.

`estimate_option(scenario, strategy, batch)` goes down into estimate/ once and comes back with a
frozen OptionEstimate: the batch it runs at, memory (allocated, reserved at the worst moment),
compute, collectives, overlap (the exposed part), the late-rank term, the range and, beyond the
nodes the fit measured, the step under each reading of the comm terms; each with its provenance.
The planner searches and ranks these (planning/planner.py); bench's predictions and the fits read
the same figures (bench/results/predict.py, bench/fit/). `estimate_step` is its step-time part
alone, for the fits that vary the platform's constants record by record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from prism_strategy.estimate import length_spread as ls
from prism_strategy.estimate.batch import BatchChoice, resolve_batch
from prism_strategy.estimate.comm import CommEstimate, comm_readings, estimate_comm
from prism_strategy.estimate.compute import optimizer_time_s, part_flops_per_sample, phase_times
from prism_strategy.estimate.host import host_terms
from prism_strategy.estimate.host_range import host_widening, widened
from prism_strategy.estimate.memory import MemoryEstimate, estimate_memory, moments
from prism_strategy.estimate.memory_runtime import device_peak, max_micro_batch_reserved, memory_fields
from prism_strategy.estimate.provenance import provenance
from prism_strategy.estimate.range_parts import step_range
from prism_strategy.estimate.ranges import PredictionRange, max_measured_nodes
from prism_strategy.estimate.scale_loss import LateRanks, SyncWait, late_ranks, ring_steps, sync_wait
from prism_strategy.specs.cluster import GiB, Layout, PlatformSpec
from prism_strategy.specs.parts import Part, model_parts
from prism_strategy.specs.scenario import Scenario
from prism_strategy.specs.training import TrainingSpec
from prism_strategy.strategies import StrategySpec


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchAt:
    """A batch given, not searched: samples per device per forward, and micro-batches per step."""

    micro_batch: int
    grad_accum: int = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class StepEstimate:
    """One step at one batch: compute, collectives and how much of them the compute hides."""

    comm: CommEstimate
    compute_s: float
    """max(FLOPs, kernel launches) per phase (estimate/compute.py phase_times)."""
    comm_s: float
    """Every collective of the step plus the gradient path (estimate/host.py)."""
    exposed_comm_s: float
    """What the compute does not hide (estimate/overlap.py, through host_terms)."""
    optimizer_s: float
    late_ranks: LateRanks
    sync_wait: SyncWait
    """The wait for the last rank at each cross-node collective (estimate/scale_loss.py sync_wait)."""
    step_time_s: float
    samples_per_s: float
    tokens_per_s_per_device: float
    mfu: float
    bound: str
    """"comm" when the collectives take longer than the compute, else "compute"."""
    flops_s: float = 0.0
    """The compute's FLOPs-bound seconds (compute_s is per phase max(FLOPs, launches))."""
    launch_s: float = 0.0
    """The compute's kernel-launch seconds."""


@dataclass(frozen=True, kw_only=True, slots=True)
class OptionEstimate:
    """Everything the estimates say about one strategy on one scenario (frozen)."""

    batch: BatchChoice
    global_batch: int
    """micro_batch x grad_accum x world: samples per optimizer step."""
    ckpt_freq: int | str
    """The checkpointing it was priced at (TrainingSpec.ckpt_name: k, or "sac";
    estimate/ckpt_search.py searches it under --ckpt-freq auto)."""
    memory: MemoryEstimate
    memory_total: float
    """memory.total, read once (the ranking compares it many times: planning/recommend.py)."""
    device_peak_bytes: float
    """Reserved + runtime at the worst moment: what feasibility is judged on."""
    memory_runtime: Mapping[str, Any]
    oom: str | None
    """Why it does not fit on the device (None: it fits)."""
    step: StepEstimate
    readings: Mapping[str, float]
    """Beyond the nodes the fit measured: the step time under each reading of its comm terms."""
    range: PredictionRange
    step_time_s_range: list[float] | None
    samples_per_s_range: list[float] | None
    scaling_efficiency: float | None
    """samples/s per node over the same option on one node (1.0 on one node)."""
    provenance: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


def with_run_options(s: StrategySpec, t: TrainingSpec) -> StrategySpec:
    """The strategy as the run configures it: the training's bucket size (DDP bucket_cap_mb,
    DeepSpeed's buckets) reaches the engine model, the one place collectives are laid out."""
    return s.with_options(bucket_mb=t.bucket_mb)


def timed_view(sc: Scenario, parts: tuple[Part, ...], micro_batch: int = 1) -> tuple[Scenario, tuple[Part, ...]]:
    """The scenario and parts step time is predicted at: the mean sequence length when given, else
    a length histogram's mean padded length at this micro-batch (peak memory stays at the longest,
    sc.training.seq_len)."""
    t = sc.training
    mean = t.mean_seq_len
    if mean is None and t.length_histogram:
        dist = ls.padded(ls.normalised(t.length_histogram), t.micro_batch or micro_batch, t.length_bucketing)
        mean = max(1, min(t.seq_len, round(ls.moments(dist)[0])))
    if mean is None or mean == t.seq_len:
        return sc, parts
    timed = sc.with_training(replace(t, seq_len=mean, mean_seq_len=None, length_histogram=None))
    return timed, model_parts(timed.model, timed.training)


def length_stragglers(sc: Scenario, step: StepEstimate, at: BatchAt) -> ls.LengthStragglers | None:
    """The slowest rank's padded batch (estimate/length_spread.py) when the lengths are given: a
    histogram, or a mean alone (its max-entropy shape); None without either."""
    t, lay = sc.training, sc.layout
    if t.length_histogram:
        samples, source = ls.normalised(t.length_histogram), f"--length-histogram, {len(t.length_histogram)} lengths"
    elif t.mean_seq_len is not None and t.mean_seq_len < t.seq_len:
        samples = ls.max_entropy_lengths(t.mean_seq_len, t.seq_len)
        source = f"lengths assumed max-entropy on 1-{t.seq_len} with mean {t.mean_seq_len} (give --length-histogram)"
    else:
        return None
    tokens = max(
        (x.tokens for x in model_parts(sc.model, t) if x.spec is not None and x.spec.kind == "decoder"), default=0
    )
    image = max(0, tokens - t.seq_len)
    return ls.length_stragglers(
        samples,
        image_tokens=image,
        micro_batch=at.micro_batch,
        bucketing=t.length_bucketing,
        ranks=lay.world,
        measured_ranks=max_measured_nodes(sc.platform) * lay.ranks_per_node,
        flops_s=step.flops_s,
        launch_s=step.launch_s,
        per_micro_batch=any(c.phase == "forward" for c in step.comm.collectives),
        grad_accum=at.grad_accum,
        source=source + (", length bucketing" if t.length_bucketing else ", no bucketing"),
    )


def with_stragglers(step: StepEstimate, extra_s: float, world: int, at: BatchAt) -> StepEstimate:
    """The step with the slowest rank's extra seconds added (rates follow)."""
    if extra_s <= 0:
        return step
    t = step.step_time_s + extra_s
    scale = step.step_time_s / t
    return replace(
        step,
        step_time_s=t,
        samples_per_s=at.micro_batch * at.grad_accum * world / t,
        tokens_per_s_per_device=step.tokens_per_s_per_device * scale,
        mfu=step.mfu * scale,
    )


def estimate_step(
    sc: Scenario,
    s: StrategySpec,
    batch: BatchAt,
    *,
    parts: tuple[Part, ...] | None = None,
    layout: Layout | None = None,
    comm: CommEstimate | None = None,
) -> StepEstimate:
    """The step at `batch` on sc's platform (the sequence as given: timed_view is the caller's).
    layout: default sc.layout; comm: the step's collectives when already priced on this platform
    (the fits vary compute only)."""
    parts = parts or model_parts(sc.model, sc.training)
    t, p, lay = sc.training, sc.platform, layout or sc.layout
    s = with_run_options(s, t)
    mb, ga = batch.micro_batch, batch.grad_accum
    comm = comm or estimate_comm(parts, t, p, lay, s, ga)
    phases = phase_times(parts, t, p, mb, ga)  # max(FLOPs, launches) per phase
    host = host_terms(parts, comm, s.engine, lay, ga, phases.total, p, (phases.forward, phases.backward))
    opt_bytes = t.param_bytes + t.grad_bytes + t.optim_bytes
    trainable = sum(x.trainable for x in parts) / s.degree(s.optim_shard, lay)
    tensors = sum(x.tensors for x in parts if x.trains)  # FSDP2 shards every tensor: each rank steps them all
    optimizer_s = optimizer_time_s(trainable, opt_bytes, p, tensors)
    late = _late_ranks(phases.total, comm, lay, p)
    cal = p.calibration
    launch = phases.forward_launch + phases.backward_launch
    host_share = min(1.0, launch / phases.total) if phases.total > 0 else 0.0
    wait = sync_wait(_spans(comm, lay), cal.sync_wait_us_per_node, cal.sync_wait_max_us, host_share)
    step = phases.total + host.exposed_s + optimizer_s + late.seconds + wait.seconds
    samples = mb * ga * lay.world / step
    tokens, mfu = per_device_rates(parts, t, p, samples / lay.world)
    comm_s = comm.total_s + host.grad_path_s + wait.seconds
    return StepEstimate(
        comm=comm,
        compute_s=phases.total,
        comm_s=comm_s,
        exposed_comm_s=host.exposed_s + wait.seconds,
        optimizer_s=optimizer_s,
        late_ranks=late,
        sync_wait=wait,
        step_time_s=step,
        samples_per_s=samples,
        tokens_per_s_per_device=tokens,
        mfu=mfu,
        bound="comm" if comm_s > phases.total else "compute",
        flops_s=phases.forward_flops + phases.backward_flops,
        launch_s=phases.forward_launch + phases.backward_launch,
    )


def _late_ranks(compute_s: float, comm: CommEstimate, layout: Layout, p: PlatformSpec) -> LateRanks:
    """Every collective call of the step is a synchronisation point; the fit's records ran at its
    largest node count x this layout's ranks per node (estimate/scale_loss.py)."""
    syncs = sum(c.calls_per_step for c in comm.collectives)
    measured = max_measured_nodes(p) * layout.ranks_per_node
    return late_ranks(layout.world, measured, compute_s, syncs, p.calibration.rank_jitter)


def _spans(comm: CommEstimate, layout: Layout) -> list[tuple[int, int, int]]:
    """(calls per step, nodes spanned, dependent cross-node steps) of each collective of the step."""
    from prism_strategy.estimate.comm import group_geometry

    spans = [(c.calls_per_step, group_geometry(c.group, layout)[1], c) for c in comm.collectives]
    return [(k, n, ring_steps(c.op, n, c.algorithm)) for k, n, c in spans]


def per_device_rates(
    parts: tuple[Part, ...], t: TrainingSpec, p: PlatformSpec, samples_per_s_per_device: float
) -> tuple[float, float]:
    """(tokens/s per device, MFU): decoder tokens per sample, and model FLOPs per sample (forward
    + backward from estimate/compute.py, recompute excluded) against the platform's peak."""
    tokens = sum(x.tokens for x in parts if x.spec is not None and x.spec.kind == "decoder")
    flops = sum(f.forward + f.backward for f in (part_flops_per_sample(x, t) for x in parts))
    peak = (p.hardware.peak_tflops_bf16 if t.compute_dtype == "bf16" else p.hardware.peak_tflops_fp32) * 1e12
    return samples_per_s_per_device * tokens, samples_per_s_per_device * flops / peak


def estimate_option(
    sc: Scenario, s: StrategySpec, batch: BatchAt | None = None, *, parts: tuple[Part, ...] | None = None
) -> OptionEstimate:
    """The option's estimate. batch: None = the scenario's batch policy resolved against this
    option's memory ceiling (estimate/batch.py); parts: sc's model parts when already built."""
    parts = parts or model_parts(sc.model, sc.training)
    t, p, lay = sc.training, sc.platform, sc.layout
    s = with_run_options(s, t)
    # accumulating: gradients accumulating over micro-batches live through every backward
    # feasibility is judged on reserved (estimate/memory_runtime.py): OOM happens against it + the request
    ms = {acc: moments(parts, t, p, lay, s, accumulating=acc) for acc in (False, True)}
    chosen = resolve_batch(t, lay.world, lambda accumulating: max_micro_batch_reserved(ms[accumulating], p, t))
    if batch is not None:
        chosen = replace(chosen, micro_batch=batch.micro_batch, grad_accum=batch.grad_accum)
    mb, ga = chosen.micro_batch, chosen.grad_accum
    mem = estimate_memory(parts, t, p, lay, s, mb, accumulating=ga > 1)
    device = device_peak(ms[ga > 1], mb, p, t)
    oom = None
    if device > p.usable_bytes:
        oom = oom_reason(mem, p.usable_bytes, mb, chosen.max_micro_batch, _searched_batch(t), device)
    prov = provenance(sc)
    timed, tparts = timed_view(sc, parts, mb)
    at = BatchAt(micro_batch=mb, grad_accum=ga)
    step = estimate_step(timed, s, at, parts=tparts)
    extra = 0.0
    if (lengths := length_stragglers(sc, step, at)) is not None:
        step, extra = with_stragglers(step, lengths.seconds, lay.world, at), lengths.seconds
        prov["length_stragglers"] = lengths.basis
    if p.measured_collectives:
        prov["communication"] = _measured_provenance(step.comm, lay, p, prov["communication"])
    if step.sync_wait.seconds > 0:
        prov["sync_wait"] = f"{step.sync_wait.basis} ({p.source('sync_wait_us_per_node')[:60]}...)"
    readings = {k: v + extra for k, v in _readings(timed, tparts, s, at, prov).items()}
    r = _range(step, readings, p, lay, prov, reprice_collectives(timed, s, at, tparts))
    at_p = lambda q: estimate_step(timed.with_platform(q), s, at, parts=tparts).step_time_s + extra  # noqa: E731
    r = widened(r, host_widening(p, step.step_time_s, step.launch_s, at_p))
    prov["range"] = r.basis
    one = None
    if lay.nodes > 1:
        single = Layout(nodes=1, ranks_per_node=lay.ranks_per_node)
        one = estimate_step(timed, s, at, parts=tparts, layout=single).samples_per_s
    return OptionEstimate(
        batch=chosen,
        global_batch=mb * ga * lay.world,
        ckpt_freq=t.ckpt_name,
        memory=mem,
        memory_total=mem.total,
        device_peak_bytes=device,
        memory_runtime=MappingProxyType(memory_fields(mem, p, t, ms[ga > 1], mb, limit=device)),
        oom=oom,
        step=step,
        readings=MappingProxyType(readings),
        range=r,
        step_time_s_range=r.step_range(step.step_time_s),
        samples_per_s_range=r.rate_range(step.samples_per_s),
        scaling_efficiency=((step.samples_per_s / lay.nodes) / one if one else None) if lay.nodes > 1 else 1.0,
        provenance=MappingProxyType(prov),
    )


def _measured_provenance(comm: CommEstimate, layout: Layout, p: PlatformSpec, model: str) -> str:
    """Which collectives a measured curve priced (estimate/comm_measured.py), and the model's
    provenance for the rest."""
    from prism_strategy.estimate.comm import group_geometry
    from prism_strategy.estimate.comm_measured import describe, measured_seconds

    notes, rest = [], 0
    for c in comm.collectives:
        ranks, nodes, conc = group_geometry(c.group, layout)
        hit = measured_seconds(p.measured_collectives, c.op, c.bytes_per_call, ranks, nodes, conc)
        if hit is None:
            rest += 1
        elif (note := f"{c.op}({c.group}) {describe(hit, ranks, nodes)}") not in notes:
            notes.append(note)
    if not notes:
        return f"{model}; no measured curve matches these collectives' op and group shape"
    return "; ".join(notes) + (f"; other collectives {model}" if rest else "")


def _readings(
    sc: Scenario, parts: tuple[Part, ...], s: StrategySpec, at: BatchAt, prov: dict[str, str]
) -> dict[str, float]:
    """The step under each reading of the comm terms the fit could not rule out, said in provenance."""
    readings = comm_readings(sc.platform)
    measured = max_measured_nodes(sc.platform)
    nodes = sc.layout.nodes
    if len(readings) < 2 or nodes <= measured:
        return {}
    out = {label: estimate_step(sc.with_platform(p), s, at, parts=parts).step_time_s for label, p in readings.items()}
    each = ", ".join(f"{k} {v:.3f} s" for k, v in out.items())
    prov["communication_beyond_fit"] = (
        f"predicted at {nodes} nodes, beyond the {measured} the fit measured, where its records cannot tell how "
        f"the cross-node cost grows (estimate/comm.comm_readings): step {each}; measure it at {nodes} nodes"
    )
    return out


def reprice_collectives(sc: Scenario, s: StrategySpec, at: BatchAt, parts: tuple[Part, ...]):
    """platform -> the step's collectives priced on it (estimate/range_parts.py reads which share
    of each a training-fit knob prices)."""
    s = with_run_options(s, sc.training)
    return lambda p: estimate_comm(parts, sc.training, p, sc.layout, s, at.grad_accum).collectives


def _range(
    step: StepEstimate, readings: dict[str, float], platform: PlatformSpec, lay: Layout, prov: dict[str, str], reprice
) -> PredictionRange:
    """After the readings: the range holds every reading the fit cannot rule out. Composed from the
    step's parts, each with its fit's errors (estimate/range_parts.py step_range)."""
    late = step.late_ranks
    r = step_range(step, platform, lay, reprice)
    r = r.with_readings(step.step_time_s, readings)
    prov["range"] = r.basis
    if late.seconds > 0:
        prov["late_ranks"] = late.basis
    return r


def _searched_batch(t: TrainingSpec) -> int | None:
    """The global batch whose micro-batch was searched (neither micro-batch nor accumulation pinned)."""
    return t.global_batch if t.micro_batch is None and t.grad_accum is None else None


def oom_reason(
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

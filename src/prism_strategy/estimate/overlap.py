"""Exposed communication of one optimizer step where collectives run beside compute (NCCL): a
per-unit pipeline over the engine's own schedule, not one overlap fraction for the whole step.

What runs when (torch 2.13 torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py, DDP's
Reducer, ProcessGroupNCCL):
- compute runs on the default stream; every collective of one process group runs on that group's
  NCCL stream in the order it was issued (ProcessGroupNCCL: one NCCL stream per device and group),
  a second group (HSDP's replicate all-reduce, on FSDP2's all_reduce_stream) on its own stream.
- forward: unit k's all-gather is issued at its pre-forward (the CPU runs ahead of the GPU) and
  can start once unit k-2's copy-out is done (wait_for_unshard: the all-gather streams wait on the
  previous all_gather_state's event, so two gathered units at most); unit k's compute waits for
  it. The first unit's gather (FSDP2's root, embeddings and LM head) has nothing to hide behind.
- backward: unit k's pre-backward prefetches the next unit's all-gather (_backward_prefetch);
  its reduce-scatter waits for its backward compute (foreach_reduce: the reduce-scatter stream
  waits on the current stream) and queues behind that prefetch. The root's post-backward comes
  last and finalize_backward waits for every reduction before the optimizer: the last
  reductions hide only behind what little compute is left. DDP's buckets become ready in reverse
  parameter order and each is all-reduced when full: the last bucket has nothing after it.
- collectives of the step phase, and those the engine marks not overlappable, are exposed whole.
Each phase's compute is split evenly over its slots (one per call of its gathers or reductions;
the root's head matmul and its embedding are not told apart from a block), and micro-steps
without reductions (gradient accumulation) are timed on their own.

SM contention: a collective's kernel holds one SM per channel while it runs (NCCL docs,
NCCL_NTHREADS: "one CUDA block per communication channel"; NCCL_MAX_NCHANNELS: "reducing the
number of channels also reduces the number of CUDA blocks used for communication, hence the
impact on GPU computing resources"), so compute beside it runs at (1 - channels / SMs), the
channels NCCL gives the call (estimate/comm_nccl.py compute_channels, call_channels). Each
slot's compute is stretched by channels / SMs x the collective time it overlaps (first order) and
the schedule is run again.
Left out, so a plan at many nodes is optimistic by what they cost: HBM bandwidth the collectives
take from memory-bound kernels; the host (a CPU behind the GPU delays every issue); ranks that
finish late (every collective waits for the slowest of N); the fabric at scale beyond NCCL's
model (congestion, routing); NVLS / SHARP offload inside a node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from prism_strategy.engines.runs import Runs
from prism_strategy.estimate.comm import CollectiveCost, CommEstimate, schedules_overlap
from prism_strategy.specs.cluster import PlatformSpec

__all__ = [
    "Exposed",
    "Phase",
    "Slot",
    "description",
    "exposed_collectives",
    "phase_wall_s",
    "schedule",
    "schedules_overlap",
]

FORWARD_GATHERS_IN_FLIGHT = 2
"""Unit k's all-gather waits for unit k-2's copy-out (FSDP2 wait_for_unshard in forward)."""
BACKWARD_GATHERS_IN_FLIGHT = 1
"""The next unit's all-gather is issued at the current unit's pre-backward (_backward_prefetch)."""
MAX_SLOTS = 48
"""Slots per phase: more calls than this (DeepSpeed's and DDP's buckets, models of > 46 blocks)
are merged in consecutive groups, so a plan's hundreds of evaluations stay fast."""


@dataclass(frozen=True, slots=True)
class Slot:
    """One unit of a phase: its compute, the gather it waits for (seconds, SM fraction), the
    reduction issued when it ends (same stream as the gathers), and one on a second stream after it."""

    compute_s: float
    gather: tuple[float, float] = (0.0, 0.0)
    reduce: tuple[float, float] = (0.0, 0.0)
    side: tuple[float, float] = (0.0, 0.0)


@dataclass(slots=True)
class Phase:
    """The slots of one phase as columns (the schedule runs hundreds of times per plan)."""

    compute: list[float]
    gather: list[float]
    gather_f: list[float]
    reduce: list[float]
    reduce_f: list[float]
    side: list[float]
    side_f: list[float]

    @classmethod
    def of(cls, slots: list[Slot]) -> "Phase":
        cols = [[x.compute_s for x in slots]]
        for k in ("gather", "reduce", "side"):
            cols += [[getattr(x, k)[0] for x in slots], [getattr(x, k)[1] for x in slots]]
        return cls(*cols)


Interval = tuple[float, float, float]
"""(start, end, SM fraction) of one collective."""


@dataclass(frozen=True, slots=True)
class Timeline:
    wall_s: float
    start: list[float]
    end: list[float]
    """Each slot's compute."""
    streams: tuple[list[Interval], list[Interval]]
    """Every collective of the gather/reduce stream, then of the side stream, in time order."""


def schedule(ph: Phase, in_flight: int) -> Timeline:
    """Run the slots: compute in order, each after its gather; gathers and reductions on one FIFO
    stream (gather k+1 issued before reduction k), side reductions on another; a gather starts no
    earlier than the compute `in_flight` slots before it started."""
    n = len(ph.compute)
    start, end, ready = [0.0] * n, [0.0] * n, [0.0] * n
    main: list[Interval] = []
    second: list[Interval] = []
    stream = side = busy = 0.0
    if n and ph.gather[0] > 0:
        main.append((0.0, ph.gather[0], ph.gather_f[0]))
        stream = ready[0] = ph.gather[0]
    for k in range(n):
        start[k] = s = busy if busy > ready[k] else ready[k]
        end[k] = busy = s + ph.compute[k]
        g = k + 1
        if g < n and ph.gather[g] > 0:
            at = start[g - in_flight] if g >= in_flight else 0.0
            at = at if at > stream else stream
            stream = ready[g] = at + ph.gather[g]
            main.append((at, stream, ph.gather_f[g]))
        elif g < n:
            ready[g] = 0.0
        reduced = busy
        if ph.reduce[k] > 0:
            at = busy if busy > stream else stream
            stream = reduced = at + ph.reduce[k]
            main.append((at, stream, ph.reduce_f[k]))
        if ph.side[k] > 0:
            at = reduced if reduced > side else side
            side = at + ph.side[k]
            second.append((at, side, ph.side_f[k]))
    return Timeline(wall_s=max(busy, stream, side), start=start, end=end, streams=(main, second))


def beside(t: Timeline, stream: list[Interval]) -> list[float]:
    """Per slot: SM fraction x seconds of the stream's collectives running beside its compute.
    Both in time order, each disjoint within itself: one sweep."""
    extra = [0.0] * len(t.start)
    i, m = 0, len(stream)
    for k, (s, e) in enumerate(zip(t.start, t.end)):
        while i < m and stream[i][1] <= s:
            i += 1
        j = i
        while j < m and stream[j][0] < e:
            cs, ce, f = stream[j]
            extra[k] += f * ((e if e < ce else ce) - (s if s > cs else cs))
            j += 1
    return extra


def contended(ph: Phase, t: Timeline) -> Phase:
    """Each slot's compute stretched by SM fraction x the collective time beside it (first order:
    a slot wholly beside one runs c / (1 - f) = c (1 + f + ...))."""
    a, b = beside(t, t.streams[0]), beside(t, t.streams[1])
    compute = [c + x + y for c, x, y in zip(ph.compute, a, b)]
    return Phase(compute, ph.gather, ph.gather_f, ph.reduce, ph.reduce_f, ph.side, ph.side_f)


def phase_wall_s(ph: Phase, in_flight: int) -> float:
    """Wall time of a phase: the schedule, then again with the compute its collectives slowed."""
    first = schedule(ph, in_flight)
    if not any(f > 0 for stream in first.streams for *_, f in stream):
        return first.wall_s
    return schedule(contended(ph, first), in_flight).wall_s


def sm_fraction(c: CollectiveCost, sm_count: int) -> float:
    return min(1.0, c.channels / sm_count) if sm_count > 0 else 0.0


def _every_micro_step(c: CollectiveCost, grad_accum: int) -> bool:
    """Issued on each micro-step (FSDP2's gathers, DeepSpeed's reductions) or only on the last
    (FSDP2's and DDP's reductions, under no_sync / set_requires_gradient_sync(False))."""
    if c.phase == "forward" or grad_accum == 1:
        return True
    if c.call_seconds:
        return c.calls_per_step >= grad_accum * len(c.call_seconds)
    return c.calls_per_step % grad_accum == 0


def _calls(c: CollectiveCost, grad_accum: int) -> Runs:
    """Seconds of each call of one micro-step in issue order, as runs of equal calls."""
    if c.call_seconds:
        return c.call_seconds
    if not c.calls_per_step:
        return Runs()
    n = max(1, c.calls_per_step // grad_accum) if _every_micro_step(c, grad_accum) else c.calls_per_step
    return Runs.of_runs([(c.seconds_per_step / c.calls_per_step, n)])


def _roles(cs: list[CollectiveCost]) -> list[tuple[CollectiveCost, str]]:
    """Gathers wait on the stream before compute; reductions of the first group follow compute on
    it; reductions of another group (HSDP's replicate all-reduce) run on their own stream after."""
    main = next((c.group for c in cs), "world")
    out = []
    for c in cs:
        role = "gather" if c.op in ("all_gather", "broadcast") else "reduce"
        out.append((c, "side" if role == "reduce" and c.group != main else role))
    return out


def phase_of(
    compute_s: float, kinds: list[tuple[CollectiveCost, Sequence[float], str]], sm_count: int, gathers_from: int
) -> Phase:
    """kinds: (cost, seconds of its calls, "gather" | "reduce" | "side"). Call i of a gather goes
    to slot i + gathers_from; reductions are right-aligned (the last call after the last slot);
    consecutive slots are merged beyond MAX_SLOTS. Compute is split evenly over the slots."""
    n0 = max([len(calls) for _, calls, _ in kinds] + [1])
    q = -(-n0 // MAX_SLOTS)
    n = -(-n0 // q)
    cols = {r: ([0.0] * n, [0.0] * n) for r in ("gather", "reduce", "side")}
    for c, calls, role in kinds:
        frac = sm_fraction(c, sm_count)
        sec, weighted = cols[role]
        base = gathers_from if role == "gather" else n0 - len(calls)
        for i, x, count in _runs(calls):  # identical calls in a row (a deep stack's blocks): one run per slot
            for k, m in _slots(base + i, count, n0, q):
                sec[k] += x * m
                weighted[k] += x * frac * m
    frac_of = {r: [w / x if x > 0 else 0.0 for x, w in zip(*cols[r])] for r in cols}
    return Phase(
        [compute_s / n] * n,
        cols["gather"][0],
        frac_of["gather"],
        cols["reduce"][0],
        frac_of["reduce"],
        cols["side"][0],
        frac_of["side"],
    )


def _runs(calls: Sequence[float]) -> list[tuple[int, float, int]]:
    """(index of the first, seconds, how many) of each run of equal consecutive calls."""
    out: list[tuple[int, float, int]] = []
    i = 0
    for x, n in (calls if isinstance(calls, Runs) else Runs(calls)).runs:
        out.append((i, x, n))
        i += n
    return out


def _slots(start: int, count: int, n0: int, q: int) -> list[tuple[int, int]]:
    """(slot, calls in it) for calls start .. start + count - 1 clamped to [0, n0 - 1], q calls a slot."""
    lo, hi = start, start + count - 1
    out: list[tuple[int, int]] = []
    if lo < 0:  # calls before the first slot land in slot 0
        out.append((0, min(count, -lo)))
        lo = 0
    if hi > n0 - 1:  # and those past the last in the last
        out.append(((n0 - 1) // q, min(count, hi - (n0 - 1))))
        hi = n0 - 1
    for k in range(lo // q, hi // q + 1) if lo <= hi else ():
        out.append((k, min(hi, (k + 1) * q - 1) - max(lo, k * q) + 1))
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class Exposed:
    seconds: float
    """Step time beyond the compute: collectives not hidden, and the compute they slowed."""
    fixed_s: float
    """Of it: collectives nothing can hide (step phase, not overlappable)."""


def exposed_collectives(
    comm: CommEstimate, forward_s: float, backward_s: float, grad_accum: int, p: PlatformSpec
) -> Exposed:
    """forward_s / backward_s: compute of the whole step (grad_accum micro-steps) per phase."""
    return _exposed(comm.collectives, forward_s, backward_s, grad_accum, p.hardware.sm_count)


@lru_cache(maxsize=512)
def _exposed(
    collectives: tuple[CollectiveCost, ...], forward_s: float, backward_s: float, grad_accum: int, sm_count: int
) -> Exposed:
    """By value: a sweep asks for each option's one-node step again at every node count."""
    fixed = sum(c.seconds_per_step for c in collectives if not c.overlappable or c.phase not in ("forward", "backward"))
    live = [c for c in collectives if c.overlappable and c.phase in ("forward", "backward") and c.seconds_per_step > 0]
    ga = max(1, grad_accum)
    f_mb, b_mb = forward_s / ga, backward_s / ga
    total = 0.0
    for last in (False, True):
        micro_steps = 1 if last else ga - 1
        here = [c for c in live if last or _every_micro_step(c, ga)]
        if micro_steps == 0 or not here:
            continue
        wall = 0.0
        for phase, compute, in_flight, gathers_from in (
            ("forward", f_mb, FORWARD_GATHERS_IN_FLIGHT, 0),
            ("backward", b_mb, BACKWARD_GATHERS_IN_FLIGHT, 1),
        ):
            kinds = [(c, _calls(c, ga), role) for c, role in _roles([c for c in here if c.phase == phase])]
            wall += phase_wall_s(phase_of(compute, kinds, sm_count, gathers_from), in_flight) if kinds else compute
        total += micro_steps * (wall - f_mb - b_mb)
    return Exposed(seconds=fixed + max(0.0, total), fixed_s=fixed)


def description(p: PlatformSpec) -> str:
    sms = (
        f"compute beside a collective at 1 - channels / {p.hardware.sm_count} SMs"
        if p.hardware.sm_count
        else "no SM count: no contention"
    )
    return (
        f"overlap per unit from the engine's schedule (estimate/overlap.py: first gather and last reductions "
        f"exposed, each unit's collectives behind its neighbour's compute; {sms}; left out, so optimistic at "
        f"many nodes: late ranks, fabric congestion, HBM taken by collectives)"
    )

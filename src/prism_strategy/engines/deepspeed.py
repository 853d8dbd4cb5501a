"""DeepSpeed ZeRO stages 1-3, as DeepSpeed 0.19 runs the ds_config we emit.

Collectives (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py, partitioned_param_coordinator.py):
- ZeRO-1/2: gradients are copied into an ipg bucket of reduce_bucket_size elements; a full
  bucket is all-reduced whole (average_tensor with use_multi_rank_bucket_allreduce, the
  default: not a reduce-scatter, even with "reduce_scatter": true), in communication_data_type
  (default: the model dtype, bf16 under bf16). ZeRO-2 reduces in every backward, ZeRO-1 once in
  step() (managed_gradient_accumulation=false: the caller's step() is the boundary). After the
  optimizer step one all_gather_into_tensor per parameter group rebuilds the bf16 flat params
  (allgather_bucket_size is unused when the backend has all_gather_into_tensor).
- ZeRO-3: parameters below stage3_param_persistence_threshold elements persist (gathered once,
  then all-gathered after each step, one call per tensor); the others are gathered module by
  module in forward, the next prefetch_bucket_size elements prefetched in one call, and again in
  backward unless their next use lies within stage3_max_reuse_distance elements of the trace
  (DeepSpeed's default 1e9, kept: models below ~0.5B parameters are never re-gathered).
  Gradients are reduce-scattered per reduce bucket, in every backward.
- every stage also all-reduces single elements (gradient norm, overflow flags): control
  traffic, left out here as census leaves it out of the payload.
Checked line by line against deepspeed 0.19.8 for the ds_config engine_config emits (stage,
overlap_comm, contiguous_gradients, reduce_scatter, reduce_bucket_size = allgather_bucket_size;
use_multi_rank_bucket_allreduce left at its default, zero/config.py:119 True):
stage_1_and_2.py:2284-2294 process_gradients reduces in the gradient hook in every backward when
gradients are partitioned (ZeRO-2), at the boundary only otherwise (ZeRO-1: engine.py:3092
reduce_gradients, in the step); :1422 a bucket is reduced when the next gradient would overflow
it, :1443 a gradient larger than the bucket goes alone; :1695 with use_multi_rank_bucket_allreduce
every slice joins the "allreduce" key, :1568 one call per <= reduce_bucket_size elements, :2384
dist.all_reduce, a plain torch.distributed.all_reduce (comm/torch.py all_reduce; the XPU backend
is xccl or torch-ccl's ccl, accelerator/xpu_accelerator.py:24-27): on a CCL_ALLREDUCE=ring
profile, the host-staged ring DDP's buckets run on (estimate/comm_oneccl.py), with the host held
(CCL_OP_SYNC=1, so overlap_comm hides nothing there). :3155 all_gather_dp_groups ->
runtime/utils.py:1021 all_gather_into_tensor, one call per group (:1016). ZeRO-3 with
reduce_scatter true never takes the all-reduce path (stage3.py:1673) but reduce_scatter_coalesced
(:1931), a topology-aware reduce-scatter on oneCCL.
Memory (DeepSpeed's estimate_zero2/3_model_states_mem_needs, plus the buffers of our config):
ipg bucket(s) of reduce_bucket_size elements in the model dtype (two with overlap_comm), each
allocated whole whatever the model size (stage3.py __init__: torch.empty(self.reduce_bucket_size)
per communication dtype; stage_1_and_2.py setup_buckets). ZeRO-3 from init on, besides the
partitions: grad_partitions_flat_buffer (stage3.py __init__, torch.zeros of the rank's partition in
gradient_accumulation_dtype, which engine.py get_data_types makes the model dtype unless
data_types.grad_accum_dtype says otherwise) and every parameter of at most
stage3_param_persistence_threshold elements held gathered whole (parameter_offload.py
mark_persistent_parameters: ds_persist); in the step the largest non-persistent module gathered
with its unsharded grads, and the prefetch bucket beyond it (partitioned_param_coordinator.py
fetch_sub_module: up to prefetch_bucket_size elements of the modules after the one in use). The
fp32 master partition is a copy whatever the precision (stage_1_and_2.py clones it; stage3.py's
shared-tensor branch compares a torch.device with a device-name str, never equal).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

from prism_strategy.engines.base import (
    FP32,
    TORCH_DTYPE,
    TORCH_DTYPE_BYTES,
    Engine,
    MiB,
    Moment,
    Rows,
    StepCollective,
    adam_states,
    ceil_div,
    part_modules,
    step_transient,
    trainable,
)
from prism_strategy.specs.cluster import Layout
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.parts import Part
from prism_strategy.specs.training import TrainingSpec

if TYPE_CHECKING:
    from prism_strategy.strategies import StrategySpec

DEFAULT_BUCKET_MB = 25.0
"""Our ds_config's bucket size when --bucket-mb is not given (DeepSpeed's own 5e8 elements
is a 1 GB bf16 buffer per bucket whatever the model size)."""
PERSISTENCE_THRESHOLD = 100_000
"""stage3_param_persistence_threshold (DeepSpeed's default), elements."""


def is_persistent(numel: int) -> bool:
    """A ZeRO-3 parameter that stays gathered (parameter_offload.py mark_persistent_parameters:
    param.ds_numel <= param_threshold; model_persistence_threshold is unbounded by default)."""
    return numel <= PERSISTENCE_THRESHOLD


MAX_REUSE_DISTANCE = 1_000_000_000
"""stage3_max_reuse_distance (DeepSpeed's default), elements."""
SUB_GROUP_SIZE = 1_000_000_000
"""zero_optimization.sub_group_size (DeepSpeed's default, deepspeed/runtime/zero/config.py), elements."""
OVERLAP_COMM = {1: False, 2: True, 3: False}
"""overlap_comm per stage: DeepSpeed allows it with caller-owned accumulation only in stage 2."""


def bucket_elements(s: "StrategySpec", t: TrainingSpec) -> int:
    """reduce/allgather/prefetch bucket size in elements of the model dtype (even: DeepSpeed
    needs allgather_bucket_size % 2 == 0)."""
    n = int((s.bucket_mb or DEFAULT_BUCKET_MB) * MiB / t.compute_bytes)
    return max(2, n - n % 2)


def comm_dtype(s: "StrategySpec", t: TrainingSpec) -> str:
    """communication_data_type: the option, else DeepSpeed's default, the model dtype."""
    return TORCH_DTYPE[s.reduce_dtype or t.compute_dtype]


def bucket_elements_text(s: "StrategySpec") -> str:
    return f"buckets {s.bucket_mb or DEFAULT_BUCKET_MB:g} MiB"


LOW_PRECISION_MASTER = {"bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}
"""The bf16 keys bf16-pure runs with (deepspeed/runtime/precision_config.py DeepSpeedBF16Config,
deepspeedai/DeepSpeed #7700, in 0.18.3 and later): master weights, their gradients and the
optimizer's moments in bf16. Without bf16_optimizer_states DeepSpeed requires ZeRO-Offload
(base_optimizer.py _configure_master_weights), which is not modelled."""


def master_bytes(t: TrainingSpec) -> int:
    """Bytes per element of DeepSpeed's master partition and its gradients: bf16 under bf16-pure
    (ZeRO's `master_weights_and_grads_dtype`, stage_1_and_2.py / stage3.py), else fp32."""
    return t.param_bytes if t.precision == "bf16-pure" else FP32


def _stage(s: "StrategySpec") -> int:
    if s.zero_stage not in (1, 2, 3):
        raise SpecError(f"strategy {s.name!r} runs on deepspeed but has zero_stage={s.zero_stage!r}; set 1, 2 or 3")
    return s.zero_stage


class DeepSpeedEngine(Engine):
    name = "deepspeed"
    bf16_pure_in_config = True  # bf16 enabled + LOW_PRECISION_MASTER (DeepSpeed >= 0.18.3)
    title = "DeepSpeed"
    traced_with = "analytic"
    config_file = "ds_config.json"
    builds_cpu_ops = True  # ShareMemCommBuilder (deepspeed/ops/op_builder/cpu/comm.py), JIT on first init
    options = ("bucket_mb", "reduce_dtype")

    def states(self, parts, t, s, layout) -> Rows:
        """bf16 params/grads, and a master partition + Adam moments in fp32 (bf16-mixed) or bf16
        (bf16-pure: DeepSpeed's bf16_master_weights_and_grads + bf16_optimizer_states; its example,
        DeepSpeedExamples training/bf16_master_weight/README.md, counts 20 -> 12 bytes per param)."""
        pt, pf, n, st = trainable(parts), sum(p.frozen for p in parts), layout.world, _stage(s)
        e, m = t.compute_bytes, master_bytes(t)
        moments = t.optim_state_dtype if t.precision == "bf16-pure" else "fp32"
        low = e < FP32
        dp = n if st == 3 else 1
        grads = {1: pt * e + (pt * m / n if low else 0), 2: pt * (e + (m if low else 0)) / n, 3: pt * e / n}
        # the master partition is a copy, also when it is bf16 like the params: stage_1_and_2.py clones it
        # (.detach().clone()); stage3.py _create_fp32_partitions would share it but compares its torch.device
        # with the accelerator's device name, a str, which never equals it, so it clones as well
        optim = pt * (adam_states(t) * (m if moments != "fp32" else FP32) + m) / n
        master = "bf16" if m < FP32 else "fp32"
        return [
            ("params", f"params ({t.compute_dtype}{', 1/' + str(dp) if dp > 1 else ', full'})", (pt + pf) * e / dp),
            (
                "grads",
                f"grad partition flat buffer ({t.compute_dtype}, 1/{n}, allocated at init)"
                if st == 3
                else {1: f"bf16 grads (full) + {master} partition", 2: f"grad partition (bf16 + {master})"}[st]
                if low
                else f"fp32 grads (stage {st})",
                grads[st],
            ),
            ("optimizer", f"{t.optimizer} state ({moments} + {master} master, 1/{n})", optim),
        ]

    def moments(
        self,
        parts,
        t,
        s,
        layout,
        *,
        states,
        acts,
        reserve,
        wrap,
        accumulating,
        saved_acts=(),
        late_acts=(),
        step_impl="loop",
    ) -> list[Moment]:
        """Start of backward (activations, no gradients unless accumulating); ZeRO-1/2: the
        first gradient hook, once the loss buffers are freed (stage_1_and_2's process_gradients
        calls setup_buckets there, in both stages: the ipg buckets now exist, most activations
        still do); end of backward (gradients and buckets, no activations); the optimizer step
        (self._step_moment)."""
        no_grads = [r for r in states if r[0] != "grads"]
        grads = [r for r in states if r[0] == "grads"]
        gathered, buckets = self.buffers(parts, t, s)
        st = _stage(s)
        persistent = buckets if st == 3 else []  # stage 3 allocates its ipg bucket at init
        held = grads if accumulating or st == 3 else []  # stage 3's grad partition buffer: from init too
        start = no_grads + held + gathered + persistent + reserve
        out = [
            Moment("start of backward", start, list(acts)),
            Moment("end of backward", states + gathered + buckets + reserve, []),
        ]
        if st == 1:
            out.append(Moment("first gradient hook", start + buckets, list(saved_acts)))
        elif st == 2:  # copy_grads_in_partition allocates the partition's buffer at its first reduce,
            # in backward: the rank owning the last parameters gets it with the first bucket
            part = [
                (
                    "grads",
                    f"grad partition buffer ({t.compute_dtype}, 1/{layout.world}, from the first bucket)",
                    trainable(parts) * t.compute_bytes / layout.world,
                )
            ]
            out.append(Moment("first gradient hook", start + buckets + part, list(saved_acts)))
        return out + [
            self._step_moment(
                parts, t, s, layout, no_grads, grads, buckets if st < 3 else persistent, reserve, step_impl
            )
        ]

    def _step_moment(
        self, parts, t, s, layout, no_grads: Rows, grads: Rows, buckets: Rows, reserve: Rows, impl: str
    ) -> Moment:
        """The client torch optimizer steps DeepSpeed's flat fp32 partition, one tensor per param
        group (ZeRO-1/2, stage_1_and_2.py step: the rank's gradients are flattened and cast to an
        fp32 partition, the model's gradients freed, then optimizer.step()) or per sub-group of
        sub_group_size elements (ZeRO-3, stage3.py step: _prepare_sub_group flattens one sub-group's
        gradients to fp32, steps it, releases it). The ipg buckets stay allocated."""
        n, st, pt, m = layout.world, _stage(s), trainable(parts), master_bytes(t)
        master = "bf16" if m < FP32 else "fp32"
        part = -(-pt // n)
        if st == 1:
            held: Rows = [("grads", f"{master} flat gradient partition (1/{n})", part * m)]
        else:
            held = grads
        flat = min(part, SUB_GROUP_SIZE) if st == 3 else part
        if st == 3 and pt:
            held = held + [("buffers", f"one sub-group's gradients flattened to {master}", flat * m)]
        step = step_transient([flat] if pt else [], t, impl, m, f" (the flat {master} partition)")
        return Moment("optimizer step", no_grads + held + buckets + step + reserve, [])

    def buffers(self, parts: tuple[Part, ...], t: TrainingSpec, s: "StrategySpec") -> tuple[Rows, Rows]:
        """(gathered params, ipg reduce buckets): the buffers DeepSpeed allocates for our ds_config."""
        e, b = t.compute_bytes, bucket_elements(s, t)
        if _stage(s) == 3:
            z = _zero3_buffer_sizes(parts)
            return (
                [
                    (
                        "params",
                        f"persistent params held gathered ({z.persistent_count} of <= 1e5 elements)",
                        e * z.persistent,
                    ),
                    (
                        "buffers",
                        "largest module gathered + its unsharded grads (DeepSpeed's L)",
                        e * (z.largest_gathered + z.largest_total),
                    ),
                    (
                        "buffers",
                        f"prefetch bucket ({b:.2e} elements beyond the module in use)",
                        min(b, z.gathered - z.largest_gathered) * e,
                    ),
                ],
                [
                    (
                        "buffers",
                        f"ipg reduce bucket ({b:.2e} elements, allocated at init)",
                        b * TORCH_DTYPE_BYTES[comm_dtype(s, t)],
                    )
                ],
            )
        n = 2 if OVERLAP_COMM[_stage(s)] else 1  # allocated whole whatever the model size (setup_buckets)
        return [], [("buffers", f"ipg reduce buckets ({n} x {b:.2e} elements, allocated whole)", n * b * e)]

    def step_collectives(
        self,
        s: "StrategySpec",
        parts: tuple[Part, ...],
        t: TrainingSpec,
        layout: Layout,
        grad_accum: int = 1,
        wrap: str = "block",
    ) -> tuple[StepCollective, ...]:
        n, st = layout.world, _stage(s)
        if n <= 1:
            return ()
        pt, b, cd = trainable(parts), bucket_elements(s, t), comm_dtype(s, t)
        model_dtype = TORCH_DTYPE[t.compute_dtype]
        out: list[StepCollective] = []

        def add(op, dtype, elems, calls, phase, overlap, what):
            if calls > 0 and elems > 0:
                out.append(
                    StepCollective(
                        op=op,
                        group="world",
                        group_size=n,
                        dtype=dtype,
                        calls=calls,
                        phase=phase,
                        bytes_per_call=elems * TORCH_DTYPE_BYTES[dtype] / calls,
                        overlappable=overlap,
                        what=what,
                    )
                )

        if st in (1, 2):
            occ = grad_accum if st == 2 else 1
            add(
                "all_reduce",
                cd,
                pt * occ,
                _ipg_buckets(_grad_order(parts), b) * occ,
                "backward" if st == 2 else "step",
                st == 2,
                "gradient buckets, all-reduced whole",
            )
            flat = -(-pt // (2 * n)) * 2 * n
            add("all_gather", model_dtype, flat, 1 if pt else 0, "step", False, "updated bf16 params, after the step")
        else:
            fwd, bwd = _zero3_gathers(parts, b, grad_accum)
            add("all_gather", model_dtype, *fwd, "forward", True, "per-module param gathers (+ prefetch), forward")
            add("all_gather", model_dtype, *bwd, "backward", True, "modules released in forward, gathered again")
            padded, persistent, persistent_count = _zero3_sizes(parts, n)
            add(
                "reduce_scatter",
                cd,
                padded * grad_accum,
                _ipg_buckets(_grad_order(parts), b) * grad_accum,
                "backward",
                True,
                "gradient buckets, reduce-scattered",
            )
            add(
                "all_gather",
                model_dtype,
                persistent,
                persistent_count,
                "step",
                False,
                "persistent small params, one call each, after the step",
            )
        return tuple(out)

    def engine_config(self, s, *, micro_batch, world_size, grad_accum=1, precision="bf16-mixed") -> dict[str, Any]:
        from prism_strategy.specs.training import TrainingSpec as T

        st = _stage(s)
        t = T.from_precision("fp32" if precision == "fp32" else "bf16-mixed")  # buckets in the model dtype
        b = bucket_elements(s, t)
        zero: dict[str, Any] = {
            "stage": st,
            "overlap_comm": OVERLAP_COMM[st],
            "contiguous_gradients": True,
            "reduce_scatter": True,
            "reduce_bucket_size": b,
        }
        if st < 3:
            zero["allgather_bucket_size"] = b
        else:
            zero.update(
                stage3_prefetch_bucket_size=b,
                stage3_max_live_parameters=max(10 * b, 10**9),
                stage3_max_reuse_distance=MAX_REUSE_DISTANCE,
                stage3_param_persistence_threshold=PERSISTENCE_THRESHOLD,
            )
        cfg: dict[str, Any] = {
            "train_micro_batch_size_per_gpu": micro_batch,
            "gradient_accumulation_steps": grad_accum,
            "bf16": {"enabled": precision != "fp32"} | (LOW_PRECISION_MASTER if precision == "bf16-pure" else {}),
            "zero_optimization": zero,
            "steps_per_print": 2**31 - 1,
            "wall_clock_breakdown": False,
        }
        if s.reduce_dtype is not None:
            cfg["communication_data_type"] = {"fp32": "fp32", "bf16": "bf16"}[s.reduce_dtype]
        return cfg

    def emit_notes(self, s, *, precision, world, nodes) -> list[str]:
        notes = [n for n in (self.precision_note(precision),) if n]
        if nodes > 1:
            notes.append(f"{self.config_file} is sized for {world} ranks; torchrun.sh runs one node")
        return notes

    def precision_note(self, precision: str) -> str | None:
        if precision != "bf16-pure":
            return None
        return (
            "bf16-pure on DeepSpeed is bf16_master_weights_and_grads + bf16_optimizer_states (DeepSpeed >= 0.18.3): "
            "a bf16 master copy and bf16 Adam moments"
        )

    def describe(self, s) -> str:
        return f"ZeRO stage {s.zero_stage}, {bucket_elements_text(s)}"


class Zero3Buffers(NamedTuple):
    persistent: int
    """Elements of the parameters held gathered whole (is_persistent)."""
    persistent_count: int
    largest_gathered: int
    """The gathered (non-persistent) elements of the module gathered largest: DeepSpeed's L."""
    largest_total: int
    """All of that module's elements: its unsharded grads."""
    gathered: int
    """Non-persistent elements of every module: what the prefetch bucket draws from."""


@lru_cache(maxsize=64)  # the planner asks at every micro-batch it tries
def _zero3_buffer_sizes(parts: tuple[Part, ...]) -> Zero3Buffers:
    """ZeRO-3's buffer sizes (DeepSpeedEngine.buffers), summed once per group of identical blocks
    (PartModules.groups) and multiplied by its count."""
    persistent = count = gathered = 0
    largest = (0, 0)
    for p in parts:
        for mods, k in part_modules(p).groups():
            for m in mods:
                whole = [n for n, _ in m if is_persistent(n)]
                total = sum(n for n, _ in m)
                persistent, count, gathered = (
                    persistent + k * sum(whole),
                    count + k * len(whole),
                    gathered + k * (total - sum(whole)),
                )
                largest = max(largest, (total - sum(whole), total))
    return Zero3Buffers(persistent, count, largest[0], largest[1], gathered)


TensorGroups = tuple[tuple[tuple[int, ...], int], ...]
"""Tensor sizes as (a group's tensors in order, how many times in a row): identical blocks once."""


@lru_cache(maxsize=32)  # bounded: one entry holds a size per tensor of each distinct module group
def _grad_order(parts: tuple[Part, ...]) -> TensorGroups:
    """Trainable tensors' elements in the order backward produces their gradients (reverse forward),
    per group of identical blocks (PartModules.groups)."""
    return tuple(
        (tuple(n for m in reversed(mods) for n, _ in reversed(m)), count)
        for p in reversed(parts)
        if p.trains
        for mods, count in reversed(part_modules(p).groups())
    )


@lru_cache(maxsize=64)
def _zero3_sizes(parts: tuple[Part, ...], n: int) -> tuple[int, int, int]:
    """(trainable elements each padded to n ranks; elements and count of the padded persistent small
    tensors of every part), a sum per group of identical blocks."""
    padded = sum(sum(-(-x // n) * n for x in sizes) * count for sizes, count in _grad_order(parts))
    small = [
        (sum(-(-x // n) * n for x, _ in m if is_persistent(x)), sum(1 for x, _ in m if is_persistent(x)), count)
        for p in parts
        for mods, count in part_modules(p).groups()
        for m in mods
    ]
    return padded, sum(e * c for e, _, c in small), sum(k * c for _, k, c in small)


@lru_cache(maxsize=64)  # the planner asks again for every micro-batch and checkpointing it tries
def _ipg_buckets(groups: TensorGroups, bucket: int) -> int:
    """Reductions: tensors join the ipg bucket until the next would overflow it; a tensor larger
    than the bucket is reduced on its own. Copies of a group that fit whole in what is left of the
    bucket close nothing: they are skipped in one step, so the walk costs per bucket, not per tensor."""
    calls, filled = 0, 0
    for sizes, count in groups:
        total, left = sum(sizes), count
        while left:
            whole = left if total == 0 else min(left, max(0, (bucket - filled) // total))
            filled, left = filled + whole * total, left - whole
            if left:  # the next copy overflows what is left: tensor by tensor
                for x in sizes:
                    if filled + x > bucket and filled > 0:
                        calls, filled = calls + 1, 0
                    filled += x
                left -= 1
    return calls + (1 if filled else 0)


@lru_cache(maxsize=32)  # bounded: one entry holds two sizes per distinct module group
def _module_gathers(part: Part) -> tuple[tuple[tuple[tuple[int, int], ...], int], ...]:
    """(elements, elements ZeRO-3 gathers: tensors above the persistence threshold) of each module
    of each group of modules (PartModules.groups), with how many times the group repeats."""
    return tuple(
        (tuple((sum(n for n, _ in m), sum(n for n, _ in m if not is_persistent(n))) for m in mods), count)
        for mods, count in part_modules(part).groups()
    )


def _zero3_gathers(
    parts: tuple[Part, ...], bucket: int, grad_accum: int
) -> tuple[tuple[float, int], tuple[float, int]]:
    """(elements, calls) of ZeRO-3's per-module gathers over one step, forward and backward. Forward: every module
    holding a non-persistent param, fetched in prefetch calls of up to prefetch_bucket_size
    elements each (one per module when modules are larger).
    Backward, where gradients flow: the modules whose next use is more than the reuse distance
    away (about twice the elements used after them in forward). Counted per group of identical
    blocks (PartModules.groups): how many of a group's copies lie beyond the distance is
    a ceiling division, so the cost does not grow with the depth."""
    groups = [(mods, n, p.backward) for p in parts for mods, n in _module_gathers(p)]
    fwd = [(sum(g for _, g in mods) * n, sum(1 for _, g in mods if g) * n) for mods, n, _ in groups]
    after, released, released_calls = 0, 0, 0
    for mods, n, backward in reversed(groups):
        block = sum(total for total, _ in mods)
        beyond = after  # elements used after this module in forward, in the group's last copy
        for total, gathered in reversed(mods):
            if gathered and backward:  # copy j from the end is released when 2 (beyond + j block) >= distance
                short = MAX_REUSE_DISTANCE - 2 * beyond
                k = n if short <= 0 else (max(0, n - -(-short // (2 * block))) if block else 0)
                released, released_calls = released + k * gathered, released_calls + k
            beyond += total
        after += n * block
    # the model's own module (no direct params) is fetched first, so prefetches carry everything
    sizes = [(sum(e for e, _ in fwd), sum(c for _, c in fwd)), (released, released_calls)]
    calls = [min(count, ceil_div(total, bucket)) if count else 0 for total, count in sizes]
    return ((sizes[0][0] * grad_accum, calls[0] * grad_accum), (sizes[1][0] * grad_accum, calls[1] * grad_accum))

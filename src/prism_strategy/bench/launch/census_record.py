"""Inside one rank: record every collective one optimizer step issues (torch.profiler).

What is counted: the `c10d::*` dispatcher ops (c10d::allreduce_, c10d::_allgather_base_,
c10d::_reduce_scatter_base_, c10d::broadcast_, their *_coalesced_ forms ...). They are what the
engine asked the process group for: DDP's C++ reducer, FSDP2 and DeepSpeed all pass through
them, and the profiler's event tree gives their tensors' shapes and dtypes (record_shapes=True).
The `gloo:*` events are how gloo carries each op out (it runs a reduce-scatter as an all-reduce
of the whole tensor); counting them too would count every call twice, so they are skipped.

Payload per call: all_reduce and broadcast the tensor(s); all_gather the gathered output;
reduce_scatter the unscattered input.

Group size: the process group is not in the profiler's record (the c10d op's group argument
shows as None), so `tag_collectives()` wraps the torch.distributed Python entry points in a
`record_function("prism.census group_size=N")` range: every c10d op under such a range gets N.
An untagged op (DDP's C++ reducer and buffer broadcast, which go straight to the process
group DDP was given) gets the gathered/scattered shape ratio for all_gather/reduce_scatter,
else the default group's size (the group wrap() gives DDP).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import torch

TAG = "prism.census group_size="
PHASE = "prism.phase="
"""The bench worker marks its forward, backward and optimizer step with record_function ranges
named PHASE + phase: each recorded call says in which phase it ran."""
_TAGGED = (
    "all_reduce",
    "all_reduce_coalesced",
    "all_gather_into_tensor",
    "all_gather_single",
    "all_gather",
    "all_gather_coalesced",
    "reduce_scatter_tensor",
    "reduce_scatter_single",
    "reduce_scatter",
    "broadcast",
    "all_to_all",
    "all_to_all_single",
    "_all_gather_base",
    "_reduce_scatter_base",
)
# c10d op -> (our op name, index of the payload argument, index of the other side of the shape ratio)
_OPS: dict[str, tuple[str, int, int | None]] = {
    "allreduce_": ("all_reduce", 0, None),
    "allreduce_coalesced_": ("all_reduce", 0, None),
    "_allgather_base_": ("all_gather", 0, 1),
    "allgather_into_tensor_coalesced_": ("all_gather", 0, 1),
    "allgather_": ("all_gather", 0, 1),
    "allgather_coalesced_": ("all_gather", 0, 1),
    "_reduce_scatter_base_": ("reduce_scatter", 1, 0),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter", 1, 0),
    "reduce_scatter_": ("reduce_scatter", 1, 0),
    "broadcast_": ("broadcast", 0, None),
    "alltoall_base_": ("all_to_all", 0, None),
    "alltoall_": ("all_to_all", 0, None),
}


def tag_collectives() -> None:
    """Wrap torch.distributed's collectives once per process so each call is labelled with its
    group's size. The real call runs unchanged inside the label. Call before wrap(): DeepSpeed
    keeps references to these functions from its initialisation on."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    for name in _TAGGED:
        fn = getattr(c10d, name, None)
        if fn is None or getattr(fn, "_prism_census", False):
            continue
        tagged = _tagged(fn)
        setattr(c10d, name, tagged)
        if getattr(dist, name, None) is fn:
            setattr(dist, name, tagged)


def _tagged(fn: Callable[..., Any]) -> Callable[..., Any]:
    import torch.distributed as dist

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        group = kwargs.get("group")
        try:
            size = dist.get_world_size(group)
        except Exception:  # noqa: BLE001 - a group this rank is not in: label nothing, the call decides
            return fn(*args, **kwargs)
        with torch.profiler.record_function(f"{TAG}{size}"):
            return fn(*args, **kwargs)

    call._prism_census = True  # type: ignore[attr-defined]
    return call


def _tensors(value: Any) -> list[Any]:
    """Tensor metadata in a profiler input (a tensor, a list, or a list of lists)."""
    if hasattr(value, "sizes") and hasattr(value, "dtype"):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _numel(t: Any) -> int:
    n = 1
    for s in t.sizes:
        n *= int(s)
    return n


def _dtype(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def one_call(name: str, inputs: list[Any], tag: int | None, world: int) -> dict[str, Any] | None:
    """The record of one c10d op event, or None when it is not a collective we count."""
    spec = _OPS.get(name.removeprefix("c10d::"))
    if spec is None:
        return None
    op, payload_at, other_at = spec
    payload = _tensors(inputs[payload_at]) if len(inputs) > payload_at else []
    if not payload:
        return None
    nbytes = sum(_numel(t) * t.dtype.itemsize for t in payload)
    numel = sum(_numel(t) for t in payload)
    size = tag
    if size is None and other_at is not None and len(inputs) > other_at:
        other = sum(_numel(t) for t in _tensors(inputs[other_at]))
        size = round(numel / other) if other else None
    return {
        "op": op,
        "group_size": int(size or world),
        "dtype": _dtype(payload[0]),
        "bytes": float(nbytes),
        "numel": numel,
    }


def calls_in(roots: list[Any], world: int) -> list[dict[str, Any]]:
    """Walk the profiler's event tree; one record per c10d collective, tagged with the group
    size of the innermost `prism.census` range above it."""
    out: list[dict[str, Any]] = []
    stack: list[tuple[Any, int | None, str]] = [(r, None, "") for r in reversed(roots)]
    while stack:
        ev, tag, phase = stack.pop()
        name = ev.name
        m = re.match(re.escape(TAG) + r"(\d+)", name)
        if m:
            tag = int(m.group(1))
        elif name.startswith(PHASE):
            phase = name.removeprefix(PHASE)
        elif name.startswith("c10d::"):
            rec = one_call(name, list(getattr(ev.extra_fields, "inputs", None) or []), tag, world)
            if rec:
                out.append(rec | {"phase": phase or "other"})
            continue  # what runs under a c10d op is how the backend does it: not counted again
        stack.extend((c, tag, phase) for c in reversed(ev.children))
    return out


def record(step: Callable[[], Any], world: int) -> list[dict[str, Any]]:
    """Run `step` (one whole optimizer step) under the profiler; its collectives in order."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step()
    return calls_in(prof.profiler.kineto_results.experimental_event_tree(), world)


def summarise(calls: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Calls and payload bytes per (op, group size, dtype), in first-seen order, with their split
    by phase: model data under "collectives", control messages (see is_control) under "control"."""
    out: dict[str, dict[tuple[str, int, str], dict[str, Any]]] = {"collectives": {}, "control": {}}
    for c in calls:
        key = (c["op"], c["group_size"], c["dtype"])
        kind = out["control" if is_control(c) else "collectives"]
        g = kind.setdefault(
            key, {"op": key[0], "group_size": key[1], "dtype": key[2], "calls": 0, "bytes": 0.0, "phases": {}}
        )
        g["calls"] += 1
        g["bytes"] += c["bytes"]
        ph = g["phases"].setdefault(c.get("phase", "other"), {"calls": 0, "bytes": 0.0})
        ph["calls"] += 1
        ph["bytes"] += c["bytes"]
    return {k: list(v.values()) for k, v in out.items()}


def is_control(call: dict[str, Any]) -> bool:
    """A control message, not model data: integer tensors (DDP's and DeepSpeed's bookkeeping
    broadcasts) or a single element (overflow flags, gradient norms)."""
    return call["numel"] <= 1 or not any(call["dtype"].startswith(p) for p in ("float", "bfloat", "complex"))

"""Traced memory: the peak a real training step of the real model uses, measured without
memory and without devices.

The model (transformers from a spec or a config.json, or a user's `module:function` factory) is
built on the meta device and run for full training steps (forward, loss, backward, optimizer
step) under `FakeTensorMode`, with a fake process group of the target world size and mesh and
with the wrapping, mixed precision and activation checkpointing `wrap()` applies; torch's
`FSDPMemTracker` / `MemTracker` account every tensor (estimate/traced_run.py has the details).

- fsdp_full_shard, fsdp_shard_grad_op, hsdp_*: traced directly (the real `wrap()` under a fake
  process group; this process plays rank 0).
- ddp: DDP cannot be built under fake tensors: a single-process trace, in which the gradients
  are replaced by DDP's persistent buckets (gradient_as_bucket_view=True, as wrap() sets: the
  buckets are the gradients, allocated for every trainable parameter and kept through zero_grad).
- zero1/2/3: the analytic model (DeepSpeed cannot run under fake tensors), labelled so.

Bytes are what tensors hold (the fake "cpu" device: no allocator rounding or fragmentation),
reserve excluded: `by_key["reserve"]` is 0 and the caller adds the platform's
`framework_reserve_gib` (`TracedMemory.gib(reserve_bytes)` does it for display).

Nothing here imports torch at module level: `import prism_strategy.planner` stays torch-free.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prism_strategy.estimate.memory import KEYS, MemoryEstimate, estimate_memory
from prism_strategy.estimate.parts import model_parts
from prism_strategy.specs.cluster import GiB, Layout
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.model import MultimodalSpec, TransformerSpec
from prism_strategy.specs.training import TrainingSpec
from prism_strategy.strategies import StrategySpec, get_strategy

ModelSource = MultimodalSpec | TransformerSpec | str | Callable[[], Any]
TOLERANCE = 0.15
"""Analytic and traced items further apart than this (relative) get a note."""
MIN_NOTE_FRACTION = 0.02
"""...unless the gap is under this fraction of the traced peak (tiny items)."""
MAX_TRACES = 8
MAX_MICRO_BATCH = 4096
"""Same cap as the planner's MAX_MICRO_BATCH_SHOWN."""


class TraceError(SpecError):
    """The model could not be traced (an op fake tensors cannot run, a model wrap() refuses)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TracedMemory:
    """Peak bytes per device of one training step, itemised with the analytic model's keys."""

    peak_bytes: float
    """Tensor bytes at the peak, reserve excluded."""
    by_key: dict[str, float]
    """params, grads, optimizer, activations, buffers at the peak; reserve = 0 (caller adds it)."""
    method: str
    seconds: float
    """Wall time the trace took (build, wrap, warm-up and measured step)."""
    torch_version: str
    micro_batch: int
    phase: str = ""
    """Where the peak falls: forward, backward or optimizer step ("" for analytic)."""
    categories: dict[str, float] = field(default_factory=dict)
    """The tracker's own categories at the peak (Sharded Param, Unsharded Grad, Temp, ...)."""
    model: str = ""
    """What was built, one line."""

    def total(self, reserve_bytes: float = 0.0) -> float:
        return self.peak_bytes + reserve_bytes

    def gib(self, reserve_bytes: float = 0.0) -> dict[str, float]:
        """Same keys as MemoryEstimate.gib(): the five items, reserve, total."""
        d = {k: self.by_key.get(k, 0.0) / GiB for k in KEYS}
        d["reserve"] = reserve_bytes / GiB
        d["total"] = self.total(reserve_bytes) / GiB
        return d

    @property
    def traced(self) -> bool:
        return not self.method.startswith("analytic")


@dataclass(frozen=True, kw_only=True, slots=True)
class MicroBatchSearch:
    """Largest micro-batch whose traced peak fits, and how it was found."""

    micro_batch: int
    traces: int
    """Traced steps measured (each one full training step)."""
    exact: bool
    """True when micro_batch + 1 was traced and does not fit (or the cap was reached)."""
    points: tuple[tuple[int, float], ...]
    """(micro-batch, peak bytes) of every trace, in order."""
    seconds: float
    method: str


# --- the model -------------------------------------------------------------------------
def _as_source(model_spec: ModelSource) -> tuple[MultimodalSpec | None, Callable[[], Any] | None, str]:
    """(spec, factory, name): exactly one of spec / factory is set."""
    from prism_strategy.specs.presets import load_model

    if isinstance(model_spec, MultimodalSpec):
        return model_spec, None, model_spec.name
    if isinstance(model_spec, TransformerSpec):
        return MultimodalSpec(backbone=model_spec), None, model_spec.name
    if isinstance(model_spec, str):
        if ":" in model_spec and not model_spec.endswith((".json", ".toml")):
            from prism_strategy.estimate.traced_model import resolve_factory

            return None, resolve_factory(model_spec), model_spec
        spec = load_model(model_spec)
        return MultimodalSpec(backbone=spec), None, spec.name
    if callable(model_spec):
        return None, model_spec, getattr(model_spec, "__qualname__", repr(model_spec))
    raise SpecError(f"model must be a spec, a preset name, a config.json path or a 'module:function' factory, "
                    f"got {type(model_spec).__name__}")


def _builder(spec: MultimodalSpec | None, factory: Callable[[], Any] | None, name: str, training: TrainingSpec):
    from prism_strategy.estimate import traced_model

    if spec is not None:
        return lambda: traced_model.build_from_spec(spec, training, init=False)
    return lambda: traced_model.build_from_factory(factory, name, training)  # type: ignore[arg-type]


def _strategy(strategy: StrategySpec | str) -> StrategySpec:
    return strategy if isinstance(strategy, StrategySpec) else get_strategy(strategy)


def _method(strategy: StrategySpec, layout: Layout, multimodal: bool) -> str:
    extra = "; vision + projector + backbone built whole" if multimodal else ""
    if strategy.engine == "ddp":
        return ("traced single process + DDP bucket copy (DDP cannot run on fake tensors; grads counted as "
                f"its persistent gradient_as_bucket_view buckets), MemTracker{extra}")
    mesh = f"{layout.nodes}x{layout.ranks_per_node}" if strategy.hybrid else f"{layout.world}"
    return f"traced: FakeTensorMode + fake process group world={layout.world} (mesh {mesh}), FSDPMemTracker{extra}"


def _from_peak(peak: Any, strategy: StrategySpec, micro_batch: int, method: str, seconds: float,
               what: str) -> TracedMemory:
    import torch

    from prism_strategy.estimate.traced_run import PLAIN_KEYS, fsdp_key_map

    keymap = fsdp_key_map(strategy) if strategy.engine == "fsdp2" else PLAIN_KEYS
    by_key = dict.fromkeys(KEYS, 0.0)
    for cat, b in peak.categories.items():
        by_key[keymap.get(cat, "buffers")] += b
    return TracedMemory(peak_bytes=float(peak.total), by_key=by_key, method=method, seconds=seconds,
                        torch_version=torch.__version__, micro_batch=micro_batch, phase=peak.phase,
                        categories={k: float(v) for k, v in peak.categories.items() if v}, model=what)


def _session(model_spec: ModelSource, training: TrainingSpec, layout: Layout, strategy: StrategySpec, device: str):
    if device != "cpu":
        raise SpecError(f"device={device!r}: traces run on the fake 'cpu' device (a fake 'cuda' fails in backward "
                        "without a GPU); the bytes are the same on any device")
    from prism_strategy.estimate.traced_run import TraceSession

    spec, factory, name = _as_source(model_spec)
    return TraceSession(_builder(spec, factory, name, training), training, layout, strategy), spec


def _measure(session: Any, micro_batch: int) -> Any:
    try:
        return session.measure(micro_batch)
    except SpecError:
        raise
    except Exception as e:
        raise TraceError(f"trace failed at micro-batch {micro_batch}: {_line(e)}") from e


@contextlib.contextmanager
def _opened(session: Any) -> Iterator[Any]:
    """Enter the session (build, wrap, warm-up step); failures become one-line TraceErrors."""
    try:
        session.__enter__()
    except SpecError:
        raise
    except Exception as e:
        raise TraceError(f"cannot build, wrap and step the model under fake tensors: {_line(e)}") from e
    try:
        yield session
    finally:
        session.__exit__(None, None, None)


def _line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


# --- public API ------------------------------------------------------------------------
def trace_memory(model_spec: ModelSource, training: TrainingSpec, layout: Layout, strategy: StrategySpec | str,
                 micro_batch: int, *, device: str = "cpu") -> TracedMemory:
    """Peak memory per device of one full training step of the real model at `micro_batch`.

    model_spec: MultimodalSpec / TransformerSpec (built through transformers), a preset name or
    config.json path, a "pkg.mod:make_model" factory string, or a zero-argument callable that
    returns an nn.Module. zero1/2/3 return the analytic estimate, labelled in `method`.
    Raises SpecError for bad input, TraceError when the model cannot be traced."""
    s = _strategy(strategy)
    _check_micro_batch(micro_batch)
    if s.engine == "deepspeed":
        return analytic_memory(model_spec, training, layout, s, micro_batch)
    t0 = time.perf_counter()
    session, spec = _session(model_spec, training, layout, s, device)
    with _opened(session):
        peak = _measure(session, micro_batch)
    what = session.built.what if session.built else ""
    return _from_peak(peak, s, micro_batch, _method(s, layout, _multimodal(spec)), time.perf_counter() - t0, what)


def analytic_memory(model_spec: ModelSource, training: TrainingSpec, layout: Layout, strategy: StrategySpec | str,
                    micro_batch: int) -> TracedMemory:
    """The analytic estimate in TracedMemory form (reserve 0), for what cannot be traced."""
    s = _strategy(strategy)
    spec = _spec_for_analytic(model_spec)
    t0 = time.perf_counter()
    est = estimate_memory(model_parts(spec, training), training, _cpu_platform(), layout, s, micro_batch)
    by_key = {k: float(getattr(est, k)) for k in KEYS}
    by_key["reserve"] = 0.0
    return TracedMemory(peak_bytes=sum(by_key.values()), by_key=by_key,
                        method=f"analytic (DeepSpeed cannot be traced): estimate/memory.py, ZeRO stage {s.zero_stage}",
                        seconds=time.perf_counter() - t0, torch_version=_torch_version(), micro_batch=micro_batch,
                        model=spec.name)


def search_max_micro_batch(model_spec: ModelSource, training: TrainingSpec, layout: Layout,
                           strategy: StrategySpec | str, usable_bytes: float, *, reserve_bytes: float = 0.0,
                           seed: int | None = None, max_traces: int = MAX_TRACES, cap: int = MAX_MICRO_BATCH,
                           device: str = "cpu") -> MicroBatchSearch:
    """Largest micro-batch whose traced peak + reserve_bytes <= usable_bytes.

    One model build; each probe is one traced training step. Probes: the seed (default: the
    analytic max micro-batch), then the micro-batch a line through the traced points predicts
    (activations grow linearly with it), kept strictly inside the (fits, does not fit) bracket,
    so it is a bisection that usually converges in 2-3 traces; at most `max_traces`."""
    s = _strategy(strategy)
    budget = usable_bytes - reserve_bytes
    if s.engine == "deepspeed":
        return _analytic_search(model_spec, training, layout, s, budget, cap)
    t0 = time.perf_counter()
    session, spec = _session(model_spec, training, layout, s, device)
    guess = max(1, min(cap, seed if seed is not None else _analytic_seed(spec, training, layout, s, budget)))
    points: list[tuple[int, float]] = []
    lo, hi = 0, cap + 1  # lo fits (0 trivially), hi does not (cap + 1 by decree)
    with _opened(session):
        while len(points) < max_traces and hi - lo > 1:
            peak = float(_measure(session, guess).total)
            points.append((guess, peak))
            lo, hi = (guess, hi) if peak <= budget else (lo, guess)
            guess = _next_guess(points, budget, lo, hi)
    return MicroBatchSearch(micro_batch=lo, traces=len(points), exact=hi - lo <= 1, points=tuple(points),
                            seconds=time.perf_counter() - t0, method=_method(s, layout, _multimodal(spec)))


def traced_max_micro_batch(model_spec: ModelSource, training: TrainingSpec, layout: Layout,
                           strategy: StrategySpec | str, usable_bytes: float, **kw: Any) -> int:
    """search_max_micro_batch(...).micro_batch (0: even micro-batch 1 does not fit)."""
    return search_max_micro_batch(model_spec, training, layout, strategy, usable_bytes, **kw).micro_batch


def differences(analytic: MemoryEstimate, traced: TracedMemory, *, tolerance: float = TOLERANCE) -> list[str]:
    """One note per item where the analytic model and the trace differ by more than
    `tolerance` (and by more than 2% of the traced peak); the reserve is left out of both."""
    if not traced.traced:
        return []
    a_total = analytic.total - analytic.reserve
    notes = []
    floor = MIN_NOTE_FRACTION * traced.peak_bytes
    for key in KEYS:
        if key == "reserve":
            continue
        a, t = float(getattr(analytic, key)), traced.by_key.get(key, 0.0)
        if abs(a - t) > tolerance * max(a, t) and abs(a - t) > floor:
            notes.append(f"{key}: analytic {a / GiB:.2f} GiB vs traced {t / GiB:.2f} GiB at the traced peak "
                         f"({_pct(a, t)})")
    if abs(a_total - traced.peak_bytes) > tolerance * max(a_total, traced.peak_bytes):
        notes.insert(0, f"analytic {a_total / GiB:.2f} GiB vs traced {traced.peak_bytes / GiB:.2f} GiB "
                        f"({_pct(a_total, traced.peak_bytes)}; reserve excluded; traced peak in the {traced.phase})")
    return notes


def traced_fields(traced: TracedMemory, *, reserve_bytes: float = 0.0, max_micro_batch: int | None = None,
                  analytic: MemoryEstimate | None = None) -> dict[str, Any]:
    """The per-option JSON fields: traced_memory_gib (same keys as memory_gib), traced_max_micro_batch,
    traced_method / phase / seconds / torch_version, and traced_notes when `analytic` is given."""
    d: dict[str, Any] = {
        "traced_memory_gib": {k: round(v, 3) for k, v in traced.gib(reserve_bytes).items()},
        "traced_max_micro_batch": max_micro_batch,
        "traced_method": traced.method, "traced_phase": traced.phase,
        "traced_seconds": round(traced.seconds, 2), "torch_version": traced.torch_version,
    }
    if analytic is not None:
        d["traced_notes"] = differences(analytic, traced)
    return d


# --- helpers ---------------------------------------------------------------------------
def _pct(a: float, t: float) -> str:
    return f"analytic {100 * (a - t) / t:+.0f}% vs traced" if t else "traced 0"


def _multimodal(spec: MultimodalSpec | None) -> bool:
    return spec is not None and spec.vision is not None


def _check_micro_batch(mb: Any) -> None:
    if isinstance(mb, bool) or not isinstance(mb, int) or mb < 1:
        raise SpecError(f"micro_batch must be an integer >= 1, got {mb!r}")


def _torch_version() -> str:
    import torch

    return torch.__version__


def _spec_for_analytic(model_spec: ModelSource) -> MultimodalSpec:
    spec, factory, name = _as_source(model_spec)
    if spec is not None:
        return spec
    import torch

    from prism_strategy.estimate.traced_model import _call_factory
    from prism_strategy.specs.presets import spec_from_module

    with torch.device("meta"):
        module = _call_factory(factory, name)  # type: ignore[arg-type]
    return MultimodalSpec(backbone=spec_from_module(module, name=name))


def _analytic_seed(spec: MultimodalSpec | None, training: TrainingSpec, layout: Layout, s: StrategySpec,
                   budget: float) -> int:
    """The analytic max micro-batch for this budget (1 without a spec)."""
    if spec is None:
        return 1
    base = estimate_memory(model_parts(spec, training), training, _cpu_platform(), layout, s, 0)
    if base.per_sample <= 0:
        return 1
    return max(1, int((budget - base.total) // base.per_sample))


def _next_guess(points: list[tuple[int, float]], budget: float, lo: int, hi: int) -> int:
    """Where a line through the two probes nearest the bracket puts the budget, kept inside
    (lo, hi); a doubling step with only one probe below the budget."""
    if hi - lo <= 1:
        return lo
    near = sorted(points, key=lambda p: min(abs(p[0] - lo), abs(p[0] - hi)))[:2]
    if len(near) == 2 and near[0][0] != near[1][0] and near[0][1] != near[1][1]:
        (m1, p1), (m2, p2) = near
        slope = (p2 - p1) / (m2 - m1)
        pred = m1 + (budget - p1) / slope if slope > 0 else hi - 1
        guess = int(pred)
    elif hi > lo * 2 + 1 and points[-1][1] <= budget:
        guess = lo * 2
    else:
        guess = (lo + hi) // 2
    return min(max(guess, lo + 1), hi - 1)


def _analytic_search(model_spec: ModelSource, training: TrainingSpec, layout: Layout, s: StrategySpec,
                     budget: float, cap: int) -> MicroBatchSearch:
    t0 = time.perf_counter()
    spec = _spec_for_analytic(model_spec)
    seed = min(cap, _analytic_seed(spec, training, layout, s, budget))
    base = estimate_memory(model_parts(spec, training), training, _cpu_platform(), layout, s, 0)
    fits = base.total + base.per_sample <= budget
    return MicroBatchSearch(micro_batch=seed if fits else 0, traces=0, exact=True, points=(),
                            seconds=time.perf_counter() - t0,
                            method=f"analytic (DeepSpeed cannot be traced): estimate/memory.py, ZeRO stage {s.zero_stage}")


def _cpu_platform():
    from prism_strategy.specs.presets import load_platform

    return load_platform("cpu")

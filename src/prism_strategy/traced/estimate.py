"""Traced memory: the peak a real training step of the real model uses, measured without
memory and without devices.

The model (transformers from a spec or a config.json, or a user's `module:function` factory) is
built under `FakeTensorMode` and run for full training steps (forward, loss, backward,
optimizer step) with a fake process group of the target world size and mesh, and with the
wrapping, mixed precision and activation checkpointing `wrap()` applies; torch's
`FSDPMemTracker` / `MemTracker` account every tensor (traced/run.py has the details).

- fsdp_full_shard, fsdp_shard_grad_op, hsdp_*: traced directly (the real `wrap()` under a fake
  process group; this process plays rank 0).
- ddp: DDP cannot be built under fake tensors: a single-process trace, in which the gradients
  are replaced by DDP's persistent buckets (gradient_as_bucket_view=True, as wrap() sets: the
  buckets are the gradients, allocated for every trainable parameter and kept through zero_grad).
- zero1/2/3: the analytic model (DeepSpeed cannot run under fake tensors), labelled so.

Bytes are what tensors hold on rank 0 (the fake "cpu" device: no allocator rounding or
fragmentation), reserve excluded: `by_key["reserve"]` is 0 and the caller adds the platform's
`framework_reserve_gib` (`TracedMemory.gib(reserve_bytes)` does it for display). Validated against
real 4-rank gloo runs measured with the CPU allocator (tests/distributed/test_traced_vs_real.py).
Fake tensors run the meta kernels, which allocate what the fused GPU/XPU kernels allocate; CPU
runs the composite `_chunk_cat` for FSDP's reduce-scatter copy-in and gloo's reduce-scatter,
whose extra copies at the end of backward the trace does not see (README, traced estimates).

Nothing here imports torch at module level: `import prism_strategy.planning.planner` stays torch-free.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prism_strategy.engines import engine_of
from prism_strategy.estimate.memory import KEYS, MemoryEstimate, estimate_memory, max_micro_batch
from prism_strategy.specs.cluster import GiB, Layout, PlatformSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.model import MultimodalSpec, TransformerSpec
from prism_strategy.specs.parts import model_parts
from prism_strategy.specs.training import TrainingSpec
from prism_strategy.strategies import StrategySpec, get_strategy
from prism_strategy.traced.search import find_max_micro_batch

ModelSource = MultimodalSpec | TransformerSpec | str | Callable[[], Any]
TOLERANCE = 0.15
"""Analytic and traced items further apart than this (relative) get a note..."""
MIN_NOTE_FRACTION = 0.02
"""...unless the gap is under this fraction of the traced peak (tiny items)."""
MAX_TRACES = 6
"""Most traced steps a micro-batch search runs (it usually needs 2-3)."""
MAX_MICRO_BATCH = 4096
"""Same cap as the planner's MAX_MICRO_BATCH_SHOWN."""
ANALYTIC_METHOD = "analytic ({engine} cannot be traced): estimate/memory.py, {options}"


def _analytic_method(s: StrategySpec) -> str:
    return ANALYTIC_METHOD.format(engine=engine_of(s).title, options=engine_of(s).describe(s))


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
    """Wall time of the trace (build, wrap, warm-up step, measured step)."""
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
    """0: even micro-batch 1 does not fit."""
    traces: int
    """Traced training steps it measured (0 for analytic)."""
    exact: bool
    """micro_batch + 1 was traced and does not fit (or micro_batch is the cap)."""
    points: tuple[tuple[int, float], ...]
    """(micro-batch, peak bytes, reserve excluded) of every trace, in order."""
    seconds: float
    method: str


@dataclass(frozen=True, kw_only=True, slots=True)
class TracedOption:
    """What `plan --traced` shows for one strategy: the traced memory at its micro-batch and the
    traced max micro-batch, from one model build."""

    memory: TracedMemory
    search: MicroBatchSearch | None


# --- public API ------------------------------------------------------------------------
def trace_memory(
    model_spec: ModelSource,
    training: TrainingSpec,
    layout: Layout,
    strategy: StrategySpec | str,
    micro_batch: int,
    *,
    device: str = "cpu",
) -> TracedMemory:
    """Peak memory per device of one full training step of the real model at `micro_batch`.

    model_spec: MultimodalSpec / TransformerSpec (built through transformers), a preset name or
    config.json path, a "pkg.mod:make_model" factory string, or a zero-argument callable that
    returns an nn.Module. zero1/2/3 return the analytic estimate, labelled in `method`.
    Raises SpecError for bad input, TraceError when the model cannot be traced."""
    return trace_option(model_spec, training, layout, strategy, micro_batch, device=device).memory


def search_max_micro_batch(
    model_spec: ModelSource,
    training: TrainingSpec,
    layout: Layout,
    strategy: StrategySpec | str,
    usable_bytes: float,
    *,
    reserve_bytes: float = 0.0,
    seed: int | None = None,
    max_traces: int = MAX_TRACES,
    cap: int = MAX_MICRO_BATCH,
    device: str = "cpu",
) -> MicroBatchSearch:
    """Largest micro-batch whose traced peak + reserve_bytes <= usable_bytes, by bisection
    seeded with `seed` (default: the analytic max micro-batch) over traced steps of one model
    build; at most `max_traces` traced steps (see traced/search.py)."""
    opt = trace_option(
        model_spec,
        training,
        layout,
        strategy,
        None,
        usable_bytes=usable_bytes,
        reserve_bytes=reserve_bytes,
        seed=seed,
        max_traces=max_traces,
        cap=cap,
        device=device,
    )
    assert opt.search is not None
    return opt.search


def traced_max_micro_batch(
    model_spec: ModelSource,
    training: TrainingSpec,
    layout: Layout,
    strategy: StrategySpec | str,
    usable_bytes: float,
    **kw: Any,
) -> int:
    """search_max_micro_batch(...).micro_batch (0: even micro-batch 1 does not fit)."""
    return search_max_micro_batch(model_spec, training, layout, strategy, usable_bytes, **kw).micro_batch


def trace_option(
    model_spec: ModelSource,
    training: TrainingSpec,
    layout: Layout,
    strategy: StrategySpec | str,
    micro_batch: int | None,
    *,
    usable_bytes: float | None = None,
    reserve_bytes: float = 0.0,
    seed: int | None = None,
    max_traces: int = MAX_TRACES,
    cap: int = MAX_MICRO_BATCH,
    device: str = "cpu",
) -> TracedOption:
    """Traced memory at `micro_batch` and, when `usable_bytes` is given, the traced max
    micro-batch, from one model build. micro_batch None: measured at the max micro-batch found
    (1 when none fits)."""
    s = _strategy(strategy)
    if micro_batch is not None:
        _check_micro_batch(micro_batch)
    if micro_batch is None and usable_bytes is None:
        raise SpecError("give a micro_batch, a usable_bytes budget to search under, or both")
    if engine_of(s).traced_with == "analytic":
        return _analytic_option(model_spec, training, layout, s, micro_batch, usable_bytes, reserve_bytes, cap)
    spec, factory, name = _as_source(model_spec)
    session = _session(spec, factory, name, training, layout, s, device)
    t0 = time.perf_counter()
    peaks: dict[int, Any] = {}

    def probe(mb: int) -> float:
        if mb not in peaks:
            peaks[mb] = _measure(session, mb)
        return float(peaks[mb].total)

    search = None
    with _opened(session):
        if usable_bytes is not None:
            budget = usable_bytes - reserve_bytes
            hint_seed, per_sample = _analytic_hint(spec, training, layout, s, budget)
            found = find_max_micro_batch(
                probe, budget, seed=seed or hint_seed, per_sample=per_sample, max_probes=max_traces, cap=cap
            )
            search = MicroBatchSearch(
                micro_batch=found.micro_batch,
                traces=found.probes,
                exact=found.exact,
                points=found.points,
                seconds=time.perf_counter() - t0,
                method=_method(s, layout, spec) + getattr(session, "note", ""),
            )
        mb = micro_batch or max(1, search.micro_batch if search else 1)
        probe(mb)
    what = session.built.what if session.built is not None else name
    method = _method(s, layout, spec) + getattr(session, "note", "")
    memory = _from_peak(peaks[mb], s, mb, method, time.perf_counter() - t0, what)
    return TracedOption(memory=memory, search=search)


def analytic_memory(
    model_spec: ModelSource, training: TrainingSpec, layout: Layout, strategy: StrategySpec | str, micro_batch: int
) -> TracedMemory:
    """The analytic estimate in TracedMemory form (reserve 0), for what cannot be traced."""
    s = _strategy(strategy)
    t0 = time.perf_counter()
    spec = _spec_for_analytic(model_spec)
    est = estimate_memory(model_parts(spec, training), training, _no_reserve_platform(), layout, s, micro_batch)
    by_key = {k: float(getattr(est, k)) for k in KEYS}
    return TracedMemory(
        peak_bytes=sum(by_key.values()),
        by_key=by_key,
        method=_analytic_method(s),
        seconds=time.perf_counter() - t0,
        torch_version=_torch_version(),
        micro_batch=micro_batch,
        model=spec.name,
    )


def differences(analytic: MemoryEstimate, traced: TracedMemory, *, tolerance: float = TOLERANCE) -> list[str]:
    """When the analytic and traced peaks differ by more than `tolerance` (reserve left out of
    both): a note on the totals, then one per item that differs (by more than 2% of the traced
    peak too). Equal totals with items split differently give no note: torch's trackers file a
    grad still in flight in backward as a temporary, the analytic model as a grad buffer.
    [] for an analytic TracedMemory."""
    if not traced.traced:
        return []
    a_total, t_total = analytic.total - analytic.reserve, traced.peak_bytes
    if abs(a_total - t_total) <= tolerance * max(a_total, t_total):
        return []
    notes = [
        f"analytic {_size(a_total)} vs traced {_size(t_total)} {_pct(a_total, t_total)} "
        f"(reserve excluded; the traced peak falls in the {traced.phase}, the analytic one at the {analytic.moment})"
    ]
    for key in (k for k in KEYS if k != "reserve"):
        a, t = float(getattr(analytic, key)), traced.by_key.get(key, 0.0)
        if abs(a - t) > tolerance * max(a, t) and abs(a - t) > MIN_NOTE_FRACTION * traced.peak_bytes:
            notes.append(f"{key} differ: analytic {_size(a)} vs traced {_size(t)} at the traced peak {_pct(a, t)}")
    return notes


def traced_fields(
    traced: TracedMemory,
    *,
    reserve_bytes: float = 0.0,
    search: MicroBatchSearch | None = None,
    analytic: MemoryEstimate | None = None,
) -> dict[str, Any]:
    """An option's JSON fields: traced_memory_gib (the keys of memory_gib), traced_max_micro_batch,
    traced_method / phase / seconds / torch_version, and traced_notes when `analytic` is given."""
    d: dict[str, Any] = {
        "traced_memory_gib": {k: round(v, 3) for k, v in traced.gib(reserve_bytes).items()},
        "traced_max_micro_batch": search.micro_batch if search else None,
        "traced_max_micro_batch_traces": search.traces if search else None,
        "traced_method": traced.method,
        "traced_phase": traced.phase,
        "traced_seconds": round(traced.seconds, 2),
        "torch_version": traced.torch_version,
    }
    if analytic is not None:
        d["traced_notes"] = differences(analytic, traced)
    return d


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
            from prism_strategy.traced.model import resolve_factory

            return None, resolve_factory(model_spec), model_spec
        spec = load_model(model_spec)
        return MultimodalSpec(backbone=spec), None, spec.name
    if callable(model_spec):
        return None, model_spec, getattr(model_spec, "__qualname__", repr(model_spec))
    raise SpecError(
        f"model must be a spec, a preset name, a config.json path or a 'module:function' factory, "
        f"got {type(model_spec).__name__}"
    )


def _session(
    spec: MultimodalSpec | None,
    factory: Callable[[], Any] | None,
    name: str,
    training: TrainingSpec,
    layout: Layout,
    strategy: StrategySpec,
    device: str,
) -> Any:
    if device != "cpu":
        raise SpecError(
            f"device={device!r}: traces run on the fake 'cpu' device (a fake 'cuda' fails in backward "
            "without a GPU); tensor bytes are the same on any device"
        )
    from prism_strategy.traced import model as traced_model
    from prism_strategy.traced.depth import DepthSession, depth_plan
    from prism_strategy.traced.run import TraceSession

    def of_spec(sp: MultimodalSpec, ctx: Any = None) -> Any:
        build = lambda: traced_model.build_from_spec(sp, training, init=False)  # noqa: E731
        return TraceSession(build, training, layout, strategy, ctx)

    if spec is None:
        build = lambda: traced_model.build_from_factory(factory, name, training)  # type: ignore[arg-type]  # noqa: E731
        return TraceSession(build, training, layout, strategy)
    depths = depth_plan(spec, training)
    return of_spec(spec) if depths is None else DepthSession(spec, depths, of_spec, strategy, layout)


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


def _measure(session: Any, micro_batch: int) -> Any:
    try:
        return session.measure(micro_batch)
    except SpecError:
        raise
    except Exception as e:
        raise TraceError(f"trace failed at micro-batch {micro_batch}: {_line(e)}") from e


def _from_peak(
    peak: Any, strategy: StrategySpec, micro_batch: int, method: str, seconds: float, what: str
) -> TracedMemory:
    from prism_strategy.traced.run import PLAIN_KEYS, fsdp_key_map

    keymap = fsdp_key_map(strategy) if engine_of(strategy).traced_with == "fake_pg" else PLAIN_KEYS
    by_key = dict.fromkeys(KEYS, 0.0)
    for cat, b in peak.categories.items():
        by_key[keymap.get(cat, "buffers")] += b
    return TracedMemory(
        peak_bytes=float(peak.total),
        by_key=by_key,
        method=method,
        seconds=seconds,
        torch_version=_torch_version(),
        micro_batch=micro_batch,
        phase=peak.phase,
        categories={k: float(v) for k, v in peak.categories.items() if v},
        model=what,
    )


def _method(strategy: StrategySpec, layout: Layout, spec: MultimodalSpec | None) -> str:
    extra = "; vision + projector + backbone built whole" if spec is not None and spec.vision is not None else ""
    if engine_of(strategy).traced_with == "single_process":
        return (
            "traced single process + DDP bucket copy (DDP cannot run on fake tensors; grads counted as its "
            f"persistent gradient_as_bucket_view buckets), MemTracker{extra}"
        )
    mesh = f"{layout.nodes}x{layout.ranks_per_node}" if strategy.hybrid else f"{layout.world}"
    return f"traced: FakeTensorMode + fake process group world={layout.world} (mesh {mesh}), FSDPMemTracker{extra}"


# --- analytic fallback and hints -------------------------------------------------------
def _analytic_option(
    model_spec: ModelSource,
    training: TrainingSpec,
    layout: Layout,
    s: StrategySpec,
    micro_batch: int | None,
    usable_bytes: float | None,
    reserve_bytes: float,
    cap: int,
) -> TracedOption:
    t0 = time.perf_counter()
    search = None
    if usable_bytes is not None:
        spec = _spec_for_analytic(model_spec)
        fit = max_micro_batch(
            model_parts(spec, training),
            training,
            _no_reserve_platform(),
            layout,
            s,
            usable_bytes=usable_bytes - reserve_bytes,
        )
        search = MicroBatchSearch(
            micro_batch=min(fit, cap),
            traces=0,
            exact=True,
            points=(),
            seconds=time.perf_counter() - t0,
            method=_analytic_method(s),
        )
    mb = micro_batch or max(1, search.micro_batch if search else 1)
    return TracedOption(memory=analytic_memory(model_spec, training, layout, s, mb), search=search)


def _spec_for_analytic(model_spec: ModelSource) -> MultimodalSpec:
    spec, factory, name = _as_source(model_spec)
    if spec is not None:
        return spec
    import torch

    from prism_strategy.specs.presets import spec_from_module
    from prism_strategy.traced.model import call_factory

    with torch.device("meta"):
        module = call_factory(factory, name)  # type: ignore[arg-type]
    return MultimodalSpec(backbone=spec_from_module(module, name=name))


def _analytic_hint(
    spec: MultimodalSpec | None, training: TrainingSpec, layout: Layout, s: StrategySpec, budget: float
) -> tuple[int, float]:
    """(analytic max micro-batch under `budget`, analytic bytes per sample); (1, 0) without a spec."""
    if spec is None:
        return 1, 0.0
    parts = model_parts(spec, training)
    base = estimate_memory(parts, training, _no_reserve_platform(), layout, s, 0)
    if base.per_sample <= 0:
        return 1, 0.0
    fit = max_micro_batch(parts, training, _no_reserve_platform(), layout, s, usable_bytes=budget)
    return max(1, fit), base.per_sample


def _no_reserve_platform() -> PlatformSpec:
    """estimate_memory reads the platform for its reserve only: the cpu preset has none."""
    from prism_strategy.specs.presets import load_platform

    return load_platform("cpu")


# --- small helpers ---------------------------------------------------------------------
def _check_micro_batch(mb: Any) -> None:
    if isinstance(mb, bool) or not isinstance(mb, int) or mb < 1:
        raise SpecError(f"micro_batch must be an integer >= 1, got {mb!r}")


def _strategy(strategy: StrategySpec | str) -> StrategySpec:
    return strategy if isinstance(strategy, StrategySpec) else get_strategy(strategy)


def _torch_version() -> str:
    import torch

    return torch.__version__


def _line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


def _size(b: float) -> str:
    return f"{b / GiB:.2f} GiB" if b >= GiB / 4 else f"{b / 2**20:.1f} MiB"


def _pct(a: float, t: float) -> str:
    return f"({100 * (a - t) / t:+.0f}%)" if t else "(traced 0)"

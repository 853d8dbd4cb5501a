"""Published measurements shipped as data (data/measurements/*.toml): each record is a full
scenario, what was measured, and its source. `calibrate` fits platform terms to them and
`results import --published` stores them; values a table did not give are never filled in
silently: a record lists them in `assumed` and says why in `notes`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from prism_strategy.engines import engine_of
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.presets import DATA, build, model_names, read_toml
from prism_strategy.strategies import get_strategy

Range = float | tuple[float, float]


def mid(v: Range | None) -> float | None:
    """A single figure for a value reported as a [lo, hi] range: its midpoint."""
    if v is None or isinstance(v, (int, float)):
        return v
    return (v[0] + v[1]) / 2


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishedScenario:
    model: str
    vision: str | None = None
    mode: Literal["e2e", "projector", "encoder-projector"] = "e2e"
    strategy: str
    """A strategy name, or "none": one rank without a data-parallel wrapper."""
    nodes: int
    ranks_per_node: int
    micro_batch: int
    grad_accum: int = 1
    seq_len: int
    ckpt_freq: int = 0
    precision: Literal["bf16-mixed", "bf16-pure", "fp32"] = "bf16-pure"
    bucket_mb: float | None = None
    static_graph: bool | None = None
    find_unused: bool | None = None
    compile: bool = False
    compile_loss: bool = False
    """The loss compiled too (torchtitan's compile.components default since 2025-08)."""
    fsdp_version: int | None = None
    fsdp_wrap: str | None = None
    ckpt_policy: Literal["blocks", "sac"] = "blocks"
    """blocks: whole checkpointed blocks (ckpt_freq); sac: torchtitan's per-op selective policy on every block."""
    loss: Literal["upcast", "fused", "chunked"] = "upcast"
    """The loss kernel: fp32 logits materialised (HF, torchtitan), fused (llm-foundry), or chunked."""
    reduce_dtype: Literal["fp32", "bf16"] | None = None
    varying_lengths: bool = False
    """Each batch padded to its longest sample: shapes change from step to step."""
    expandable_segments: bool | None = None
    """PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the run (None: not known, the platform's)."""
    float8: bool = False
    """Float8 linears (torchao): no planner precision models it."""

    @property
    def world(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def samples_per_step(self) -> int:
        return self.micro_batch * self.grad_accum * self.world


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishedMeasured:
    step_s: float | None = None
    forward_s: float | None = None
    backward_s: float | None = None
    optimizer_s: float | None = None
    data_s: float | None = None
    samples_per_s: Range | None = None
    tflops_per_device: float | None = None
    tokens_per_s_per_device: Range | None = None
    mfu: float | None = None
    """Model FLOPs utilisation as the source reports it (its definition in the file's [mfu_definition])."""
    peak_active_gb: Range | None = None
    """The caching allocator's active bytes (about max_memory_allocated)."""
    peak_gb: Range | None = None
    """Peak device memory as the run reported it, allocated or reserved not said."""
    peak_allocated_gb: float | None = None
    peak_reserved_gb: float | None = None
    oom: bool = False
    kernel_launches: int | None = None
    gemm_kernels: int | None = None
    launch_host_us: float | None = None
    trainable_tensors: int | None = None
    gradient_gb: float | None = None
    gpu_busy_fraction: float | None = None
    host_s: dict[str, float] = field(default_factory=dict)
    """Host time per step in named profiler regions."""
    device_s: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishedRecord:
    id: str
    section: str
    source: str
    platform: str
    scenario: PublishedScenario
    measured: PublishedMeasured
    assumed: tuple[str, ...] = ()
    """Scenario fields the source did not record; the value stored is an assumption (see notes)."""
    inconsistent: str | None = None
    """Why the record's own figures disagree with each other, when they do."""
    notes: tuple[str, ...] = ()
    memory_unit_bytes: int = 2**30
    hardware: str = ""
    stack: str = ""
    unmodelled: tuple[str, ...] = ()
    """Stack features of the run the planner does not model (sac, float8, fsdp1, fused_loss)."""

    def scenario_kwargs(self) -> dict[str, Any]:
        """Flags for scenario_from_flags / plan (flags.py) (strategy and grad accum excluded:
        `global_batch` carries the accumulation)."""
        s = self.scenario
        kw: dict[str, Any] = dict(
            mode=s.mode,
            platform=self.platform,
            nodes=s.nodes,
            ranks_per_node=s.ranks_per_node,
            seq_len=s.seq_len,
            micro_batch=s.micro_batch,
            global_batch=s.samples_per_step,
            ckpt_freq="sac" if s.ckpt_policy == "sac" else s.ckpt_freq,
            precision=s.precision,
            compile=s.compile,
            loss=s.loss,
            varying_lengths=s.varying_lengths,
            expandable_segments=s.expandable_segments,
        )
        if s.compile_loss:
            kw["compile_loss"] = True
        if s.bucket_mb is not None and "bucket_mb" in engine_of(get_strategy(self.planner_strategy)).options:
            kw["bucket_mb"] = s.bucket_mb
        return {"model": s.model, **kw} | ({"vision": s.vision} if s.vision else {})

    @property
    def planner_strategy(self) -> str:
        """ "none" (one rank, no wrapper) is evaluated as DDP at world 1: no collectives, no hooks."""
        return "ddp" if self.scenario.strategy == "none" else self.scenario.strategy

    def step_time_s(self) -> float | None:
        """Measured seconds per optimizer step: as reported, else from samples/s (a range's midpoint)."""
        m = self.measured
        if m.step_s is not None:
            return m.step_s
        sps = mid(m.samples_per_s)
        if sps:
            return self.scenario.samples_per_step / sps
        tps = mid(m.tokens_per_s_per_device)
        if tps:
            s = self.scenario
            return s.micro_batch * s.grad_accum * s.seq_len / tps
        if m.tflops_per_device:
            from prism_strategy.specs.presets import load_model

            flops = torchtitan_flops_per_token(load_model(self.scenario.model), self.scenario.seq_len)
            tokens = self.scenario.micro_batch * self.scenario.grad_accum * self.scenario.seq_len
            return flops * tokens / (m.tflops_per_device * 1e12)
        return None

    def peak_bytes(self, kind: str = "peak") -> float | None:
        """kind: peak (as reported), allocated, reserved or active."""
        v = {
            "peak": mid(self.measured.peak_gb),
            "allocated": self.measured.peak_allocated_gb,
            "reserved": self.measured.peak_reserved_gb,
            "active": mid(self.measured.peak_active_gb),
        }[kind]
        return None if v is None else v * self.memory_unit_bytes

    def as_config(self) -> dict[str, Any]:
        """The shape bench results store as `config` (bench/results/predict.py reads it back)."""
        s = self.scenario
        cfg = {
            "model": s.model,
            "mode": s.mode,
            "strategy": self.planner_strategy,
            "nproc": s.world,
            "ranks_per_node": s.ranks_per_node,
            "micro_batch": s.micro_batch,
            "grad_accum": s.grad_accum,
            "seq_len": s.seq_len,
            "ckpt_freq": s.ckpt_freq,
            "precision": s.precision,
            "compile": s.compile,
            "published": self.id,
        }
        return cfg | ({"vision": s.vision} if s.vision else {})


def torchtitan_flops_per_token(spec: Any, seq_len: int) -> float:
    """torchtitan's MFU count: 6 x (params - token embedding) + 12 x layers x heads x head_dim x seq."""
    n = spec.total_params - spec.vocab * spec.hidden
    return 6.0 * n + 12.0 * spec.layers * spec.heads * spec.head_dim * seq_len


def published_names() -> list[str]:
    """Shipped training-run record files ([[record]]); collective rows ([[row]], bench/fit/comm_rows.py) are not."""
    files = (p for p in (DATA / "measurements").iterdir() if p.name.endswith(".toml"))
    return sorted(p.name[:-5] for p in files if "[[record]]" in p.read_text())


def _path(name: str) -> Any:
    if name in published_names():
        return DATA / "measurements" / f"{name}.toml"
    if Path(name).suffix == ".toml" and Path(name).exists():
        return Path(name)
    raise SpecError(
        f"unknown published measurements {name!r}; use one of {', '.join(published_names())} "
        "or a path to a measurements .toml"
    )


def load_published(name: str) -> tuple[PublishedRecord, ...]:
    """Every record of a measurements file (a shipped name or a path), validated."""
    from prism_strategy.strategies import STRATEGIES

    path = _path(name)
    data = read_toml(path)
    where = f"measurements {name}"
    if not isinstance(data.get("record"), list) or not data.get("platform"):
        raise SpecError(f"{where}: needs `platform` and at least one [[record]]")
    sources, unit = data.get("sources", {}), data.get("memory_unit_bytes", 2**30)
    hardware, stack = data.get("hardware", {}), data.get("stack", {})
    known = {s.name for s in STRATEGIES} | {"none"}
    out, seen = [], set()
    for i, raw in enumerate(data["record"]):
        if not isinstance(raw, dict) or not isinstance(raw.get("scenario"), dict):
            raise SpecError(f"{where}: record {i + 1} needs an id and a scenario table")
        rid = str(raw.get("id", f"#{i + 1}"))
        here = f"{where} record {rid}"
        if rid in seen:
            raise SpecError(f"{here}: duplicate id")
        seen.add(rid)
        section = str(raw.get("section", ""))
        source = raw.get("source") or sources.get(section)
        if not source:
            raise SpecError(f"{here}: no source (give `source` or a [sources] entry for section {section!r})")
        scenario = build(PublishedScenario, raw["scenario"], here + " scenario")
        measured = build(PublishedMeasured, raw.get("measured", {}), here + " measured")
        _check(here, scenario, measured, known)
        out.append(
            PublishedRecord(
                id=rid,
                section=section,
                source=source,
                platform=str(raw.get("platform", data["platform"])),
                scenario=scenario,
                measured=measured,
                assumed=tuple(raw.get("assumed", ())),
                inconsistent=raw.get("inconsistent"),
                notes=tuple(raw.get("notes", ())),
                memory_unit_bytes=int(raw.get("memory_unit_bytes", unit)),
                hardware=str(hardware.get(section, "")),
                stack=str(stack.get(section, "")),
                unmodelled=tuple(raw.get("unmodelled", ())),
            )
        )
    return tuple(out)


def _check(here: str, s: PublishedScenario, m: PublishedMeasured, strategies: set[str]) -> None:
    if s.model not in model_names() or (s.vision is not None and s.vision not in model_names()):
        raise SpecError(
            f"{here}: unknown model preset {s.model if s.model not in model_names() else s.vision!r}; "
            "add it under data/models/"
        )
    if s.strategy not in strategies:
        raise SpecError(f"{here}: unknown strategy {s.strategy!r}; use one of {', '.join(sorted(strategies))}")
    if s.strategy == "none" and s.world != 1:
        raise SpecError(f"{here}: strategy 'none' (no wrapper) needs one rank, got {s.world}")
    for f in ("nodes", "ranks_per_node", "micro_batch", "grad_accum", "seq_len"):
        if getattr(s, f) < 1:
            raise SpecError(f"{here}: scenario {f} must be >= 1, got {getattr(s, f)}")
    if not any(
        getattr(m, f) is not None
        for f in (
            "step_s",
            "samples_per_s",
            "tflops_per_device",
            "peak_gb",
            "peak_allocated_gb",
            "peak_reserved_gb",
            "tokens_per_s_per_device",
            "peak_active_gb",
        )
    ):
        raise SpecError(
            f"{here}: measures nothing a prediction can be checked against "
            "(step_s, samples_per_s, tokens_per_s_per_device, tflops_per_device or a peak memory figure)"
        )
    for f in ("step_s", "samples_per_s", "tflops_per_device", "peak_gb", "tokens_per_s_per_device"):
        v = getattr(m, f)
        for x in v if isinstance(v, tuple) else (v,):
            if x is not None and x <= 0:
                raise SpecError(f"{here}: measured {f} must be > 0, got {x}")

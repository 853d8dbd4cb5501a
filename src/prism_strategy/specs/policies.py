"""The run's inputs grouped into typed policies, as FSDP2 groups `fully_shard`'s options into
MixedPrecisionPolicy and OffloadPolicy: a batch policy, a memory policy and the environment (with
the model, layout and precision they make a Scenario: specs/scenario.py). A new input is one
field in one policy, with its check here; every edge (CLI flags, --script, a stored bench row,
strategy.toml, a framework config) fills the same fields."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any

from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.training import TrainingSpec, check_options, parse_ckpt, parse_loss, parse_optimizer

MAX_COUNT = 2**24
"""Largest node count, batch or accumulation accepted: far above any real job (the largest systems
have ~10^4 nodes), and low enough that a typo fails at once instead of after minutes of search."""


def checked_int(name: str, v: Any, minimum: int = 1, maximum: int = MAX_COUNT) -> int:
    """v as a count in [minimum, maximum]; SpecError naming the flag and the bad number otherwise."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise SpecError(f"{name} must be an integer, got {v!r}")
    if v < minimum:
        raise SpecError(f"{name} must be >= {minimum}, got {v}")
    if v > maximum:
        raise SpecError(f"{name} must be <= {maximum:,} (no real job is larger), got {v}")
    return v


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchPolicy:
    """How many tokens and samples a step takes."""

    seq_len: int = 1024
    """Text tokens per sample, the longest (peak memory is predicted there)."""
    mean_seq_len: int | None = None
    """Mean text tokens per sample, each batch padded to its longest (step time is predicted there);
    not given: seq_len."""
    micro_batch: int | None = None
    """Samples per device per forward; not given: each option's largest that fits."""
    global_batch: int | None = None
    """Samples per optimizer step, exactly: micro_batch x grad_accum x world."""
    grad_accum: int | None = None
    """Micro-batches per optimizer step; not given: 1, or what global_batch needs."""
    image_tokens: int | None = None
    """Image tokens per sample (needs a vision encoder); not given: the encoder's patch count."""
    length_histogram: tuple[tuple[int, float], ...] | None = None
    """Text lengths of the samples, (tokens, count) pairs: the slowest rank's padded batch at scale
    (estimate/length_spread.py) and, without mean_seq_len, the mean padded length."""
    length_bucketing: bool = True
    """Length bucketing: batches drawn from one length bucket (a rank pads to about one sample's
    length); off: random batches (each rank pads to its longest sample)."""

    def __post_init__(self) -> None:
        checked_int("--seq-len", self.seq_len)
        for name, v in (
            ("--micro-batch", self.micro_batch),
            ("--global-batch", self.global_batch),
            ("--grad-accum", self.grad_accum),
            ("--mean-seq-len", self.mean_seq_len),
        ):
            if v is not None:
                checked_int(name, v)
        if self.image_tokens is not None:
            checked_int("--image-tokens", self.image_tokens, 0)


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryPolicy:
    """What the run does that its memory and step time depend on, beyond the batch."""

    checkpointing: int | str = 0
    """Activation checkpointing: k (every k-th block, 0 = none), "sac" (torchtitan's selective
    per-op policy on every block) or "auto" (the planner searches it per option, the fastest that
    fits; a measured run needs k or sac)."""
    loss: str = "upcast"
    """The cross-entropy kernel: upcast (fp32 logits, HF) | fused (flash-attn CE) | chunked (Liger /
    chunked CE)."""
    optimizer: str = "adamw"
    """adamw (torch's default: foreach on cuda/xpu, loop on cpu) | adamw-foreach | adamw-fused |
    adamw-loop | sgd: the algorithm, then torch's implementation of it."""
    compile: bool = False
    """torch.compile on (off: eager): the estimates model it; a traced step runs eager (fake tensors
    are not compiled)."""
    compile_loss: bool = False
    """With compile, the loss compiled too (torchtitan's default since 2025-08): no fp32 logits held."""
    bucket_mb: float | None = None
    """Gradient bucket MiB: DDP bucket_cap_mb, DeepSpeed's reduce / allgather bucket; not given: 25
    (DDP's own default, and our ds_config's)."""
    expandable_segments: bool | None = None
    """The run sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; not given: what the platform's
    env profile sets."""
    varying_lengths: bool | None = None
    """Batches padded per batch, so shapes change step to step (more allocator reserve); off: packed
    to one length. Not given: varying when mean_seq_len < seq_len or a length histogram is given."""

    def __post_init__(self) -> None:
        parse_ckpt(self.checkpointing)
        if self.compile_loss and not self.compile:
            raise SpecError("--compile-loss needs --compile: the loss is compiled with the model, or not at all")
        parse_optimizer(self.optimizer)
        parse_loss(self.loss)
        check_options(self.bucket_mb, None)


PLATFORM_DEFAULT = "platform default"
"""EnvironmentPolicy.source of the platform's own profile."""


@dataclass(frozen=True, kw_only=True, slots=True)
class EnvironmentPolicy:
    """The environment the ranks run under: an env profile (data/env_profiles) and the collective
    library's variables it sets, which the comm model reads (estimate/comm_oneccl.py with_ccl_env)."""

    profile: str = ""
    """The profile's name; "" = the platform's own env_profile."""
    variables: tuple[tuple[str, str], ...] = ()
    """(name, value) of the CCL_/NCCL_/FI_ variables the profile sets on this platform."""
    source: str = ""
    """Where the profile came from: "platform default", "--env-profile NAME" or the file's path."""

    def __post_init__(self) -> None:
        for pair in self.variables:
            if len(pair) != 2 or not all(isinstance(x, str) for x in pair):
                raise ValueError(f"environment variables must be (name, value) strings, got {pair!r}")

    @property
    def env(self) -> dict[str, str]:
        return dict(self.variables)

    @property
    def given(self) -> bool:
        """The run names its profile (`--env-profile`, a file, a stored run), not the platform's default."""
        return bool(self.profile) and self.source != PLATFORM_DEFAULT


@dataclass(frozen=True, kw_only=True, slots=True)
class MeasuredPolicy:
    """What was measured on this platform that prices the run: applied to the Scenario's platform
    once, where inputs/scenario.py builds it."""

    calibration: str | None = "none"
    """A calibration file, "auto" (the cached one, when it matches) or "none"; plan's default: auto."""
    comm_curves: Sequence[Any] = ()
    """Measured collective curves for this platform (specs/measured.MeasuredCurve; the CLI loads them
    from the results store, bench/results/curves.py); a matching one prices its collective."""
    rank_jitter: float | None = None
    """Measured per-rank spread of the work between synchronisations (std / mean; the CLI also reads
    it from a StepMonitor folder, planning/rank_jitter.py); it prices the late-rank term into the step
    (estimate/scale_loss.py). Not given: the platform's rank_jitter; unmeasured, the published
    average (data/scale_loss.toml) in the step and its top on the range's slow side."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanOptions:
    """plan()'s knobs that are not the run itself: what is searched or traced beside it."""

    sweep_nodes: Sequence[int] | str | None = None
    """Node counts for a scaling table: a list, or a string such as "1,2,4,8" (the command line's)."""
    traced: bool = False
    """Also trace each option's real training step on fake tensors (slow)."""
    reduce_dtype: str | None = None
    """fp32 | bf16: FSDP2 reduce_dtype, DeepSpeed communication_data_type; not given: each engine's own."""
    script: dict[str, Any] | None = None
    """What a training script said about the inputs (inputs/script.py), for `inputs.script`."""


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def nearest_multiples(value: int, step: int) -> list[int]:
    """The multiples of step just below and above value (below omitted when it is 0)."""
    below, above = (value // step) * step, (value // step + 1) * step
    return [v for v in (below, above) if v > 0]


def batch_problem(t: TrainingSpec, world: int) -> str | None:
    """Why the requested batch cannot be run on `world` ranks exactly; None when it can."""
    g, mb, ga = t.global_batch, t.micro_batch, t.grad_accum
    if g is None:
        return None
    if g % world:
        near = " or ".join(str(v) for v in nearest_multiples(g, world))
        return (
            f"--global-batch {g} is not a multiple of the {world} ranks (micro-batch x grad accumulation x "
            f"world must equal it); nearest valid: {near}"
        )
    per_rank = g // world
    for name, v in (("--micro-batch", mb), ("--grad-accum", ga)):
        if v is not None and per_rank % v:
            ok = ", ".join(map(str, divisors(per_rank)))
            return (
                f"{name} {v} does not divide --global-batch {g} / {world} ranks = {per_rank} samples per rank; "
                f"use one of {ok}"
            )
    if mb is not None and ga is not None and mb * ga != per_rank:
        return (
            f"--micro-batch {mb} x --grad-accum {ga} x {world} ranks = {mb * ga * world}, not --global-batch {g}; "
            "drop one of the three"
        )
    return None


@lru_cache(maxsize=16)  # one entry per policy class
def field_docs(cls: type) -> dict[str, str]:
    """cls's attribute docstrings: the string literal under each annotated field, on one line."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    return {
        f.target.id: " ".join(doc.value.value.split())
        for f, doc in zip(body, body[1:])
        if isinstance(f, ast.AnnAssign) and isinstance(f.target, ast.Name)
        if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str)
    }


def field_help(cls: type, name: str) -> str:
    """The docstring of cls's field `name`, as a flag's help; ValueError when cls has no such field
    or the field no docstring (a flag must not go undescribed)."""
    if name not in {f.name for f in fields(cls)}:
        raise ValueError(f"{cls.__name__} has no field {name!r}")
    doc = field_docs(cls).get(name, "")
    if not doc:
        raise ValueError(f"{cls.__name__}.{name} has no docstring: write one under the field, it is the flag's help")
    return doc

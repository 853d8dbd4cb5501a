"""How the user trains: sequence, batch, precision, optimizer, checkpointing, compile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from prism_strategy.specs.errors import SpecError

REDUCE_DTYPES: tuple[str, ...] = ("fp32", "bf16")


def check_options(bucket_mb: object, reduce_dtype: object) -> None:
    """SpecError unless bucket_mb is a positive number of MiB and reduce_dtype fp32/bf16 (or None)."""
    if bucket_mb is not None and (
        isinstance(bucket_mb, bool) or not isinstance(bucket_mb, (int, float)) or not 0 < bucket_mb <= 4096
    ):
        raise SpecError(f"bucket size must be a number of MiB in (0, 4096], got {bucket_mb!r}; e.g. --bucket-mb 25")
    if reduce_dtype is not None and reduce_dtype not in REDUCE_DTYPES:
        raise SpecError(f"reduce dtype (--reduce-dtype) must be fp32 or bf16, got {reduce_dtype!r}")


Dtype = Literal["fp32", "bf16"]
Precision = Literal["bf16-mixed", "bf16-pure", "fp32"]
PRECISIONS: tuple[str, ...] = ("bf16-mixed", "bf16-pure", "fp32")
OPTIMIZERS: tuple[str, ...] = ("adamw", "sgd")
OPTIMIZER_IMPLS: tuple[str, ...] = ("auto", "foreach", "fused", "loop")
"""How torch runs the optimizer's update (torch/optim/adam.py, torch 2.13): `foreach`
(_multi_tensor_adam, one kernel per op over a (device, dtype) group), `fused` (_fused_adamw_, one
kernel per group), `loop` (_single_tensor_adam, tensor by tensor); `auto` = what torch picks when
neither foreach nor fused is passed (optimizer.py _default_to_fused_or_foreach, use_fused=False):
foreach on the devices in _get_foreach_kernels_supported_devices (cuda, xpu, ...), the loop on cpu."""
OPTIMIZER_NAMES: tuple[str, ...] = ("adamw", "adamw-foreach", "adamw-fused", "adamw-loop", "sgd")
"""`--optimizer` values: the algorithm, then optionally its torch implementation."""
FOREACH_DEVICES: tuple[str, ...] = ("cuda", "xpu", "mtia")
"""torch/utils/_foreach_utils.py _get_foreach_kernels_supported_devices (torch 2.13), less privateuse1."""


def parse_ckpt(value: int | str) -> tuple[int | None, str]:
    """--ckpt-freq: "auto" ((None, "full"): searched per option), "sac" ((1, "sac"): torchtitan's
    selective per-op policy on every block) or a block interval k >= 0 ((k, "full"); 0 = none)."""
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("auto", "sac"):
            return (None, "full") if v == "auto" else (1, "sac")
        if not v.isdigit():
            raise SpecError(f"--ckpt-freq must be 'auto', 'sac' or an integer >= 0 (0 = none), got {value!r}")
        value = int(v)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**24:
        raise SpecError(f"--ckpt-freq must be 'auto', 'sac' or an integer >= 0 (0 = none), got {value!r}")
    return value, "full"


def parse_loss(name: str) -> str:
    """`--loss`: one of LOSSES; SpecError naming the choices otherwise."""
    if name not in LOSSES:
        raise SpecError(f"unknown loss {name!r} (--loss); choose one of {', '.join(LOSSES)}")
    return name


def parse_optimizer(name: str) -> tuple[str, str]:
    """`--optimizer` -> (algorithm, implementation): "adamw" -> ("adamw", "auto"),
    "adamw-fused" -> ("adamw", "fused"); SpecError naming the choices otherwise."""
    if not isinstance(name, str) or name.strip().lower() not in OPTIMIZER_NAMES:
        raise SpecError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZER_NAMES)}")
    algo, _, impl = name.strip().lower().partition("-")
    return algo, impl or "auto"


DTYPE_BYTES = {"fp32": 4, "bf16": 2}
CKPT_POLICIES: tuple[str, ...] = ("full", "sac")
LOSSES: tuple[str, ...] = ("upcast", "fused", "chunked")
"""`--loss`: the cross-entropy kernel (estimate/memory.py loss_bytes_per_token has each one's buffers).
upcast: logits materialised and cast to fp32 (HF transformers' ForCausalLMLoss, torchtitan);
fused: low-precision logits, no fp32 copies (flash-attn's CrossEntropyLoss, llm-foundry's default);
chunked: no full logits (Liger's fused linear cross-entropy, or runtime/loss.py's chunked loss)."""
OPTIMIZER_STATES = {"adamw": 2, "sgd": 1}
"""Tensors of optimizer state per parameter: AdamW's two moments; SGD's momentum buffer
(SGD without momentum keeps none: the estimate assumes momentum is on)."""


def check_histogram(hist: tuple[tuple[int, float], ...] | None, seq_len: int) -> None:
    """A length histogram's rules: some samples, lengths 1..seq_len, counts >= 0 (SpecError)."""
    if hist is None:
        return
    if not hist or sum(c for _, c in hist) <= 0:
        raise SpecError("--length-histogram holds no samples: give 'tokens count' lines with counts > 0")
    for v, c in hist:
        if not 1 <= v <= seq_len or c < 0:
            raise SpecError(
                f"--length-histogram: length {v} count {c}: lengths must be 1..--seq-len {seq_len}, counts >= 0"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainingSpec:
    seq_len: int = 1024
    """Text tokens per sample; image tokens come on top."""
    micro_batch: int | None = None
    """Samples per device per forward; None = each strategy at its own max."""
    global_batch: int | None = None
    """Samples per optimizer step over all ranks: micro_batch x grad_accum x world, exactly."""
    grad_accum: int | None = None
    """Micro-batches per optimizer step; None = 1, or whatever global_batch needs."""
    mean_seq_len: int | None = None
    """Mean text tokens per sample (after padding each batch to its longest); step time follows it,
    peak memory follows seq_len. None = every sample is seq_len long."""
    image_tokens: int | None = None
    """Image tokens per sample added to the sequence; None = the encoder's patch count."""
    length_histogram: tuple[tuple[int, float], ...] | None = None
    """Text lengths of the samples as (tokens, count) pairs (`--length-histogram`): the slowest
    rank's padded batch (estimate/length_spread.py) and the mean padded length step time is at."""
    length_bucketing: bool = True
    """Batches drawn from one length bucket (PRISM's collator): a rank's padded length is about one
    sample's; off: the longest of its micro-batch's samples."""
    varying_lengths: bool = False
    """Batch shapes change from step to step (each batch padded to its longest sample, as PRISM):
    the caching allocator keeps more beyond allocated (estimate/memory_runtime.py). inputs/scenario.py
    sets it when a mean length below seq_len is given; fixed-length packing (torchtitan) leaves it off."""
    expandable_segments: bool | None = None
    """The run sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; None = what the platform's
    env profile sets (PlatformSpec.expandable_segments)."""
    compute_dtype: Dtype = "bf16"
    param_dtype: Dtype = "fp32"
    grad_dtype: Dtype = "fp32"
    """Dtype gradients are kept and reduced in."""
    optim_state_dtype: Dtype = "fp32"
    master_weights: bool = False
    """An extra fp32 copy of low-precision params (DeepSpeed-style mixed precision)."""
    optimizer: Literal["adamw", "sgd"] = "adamw"
    optimizer_impl: Literal["auto", "foreach", "fused", "loop"] = "auto"
    """torch's implementation of the update (OPTIMIZER_IMPLS): sets the optimizer step's temporaries."""
    loss: Literal["upcast", "fused", "chunked"] = "upcast"
    """The cross-entropy kernel (LOSSES)."""
    ckpt_freq: int = 0
    """Activation checkpointing: every k-th block; 0 = none."""
    ckpt_policy: Literal["full", "sac"] = "full"
    """What a checkpointed block keeps: its input only ("full"), or torchtitan's selective per-op
    policy ("sac": `--ckpt-freq sac`, every block; estimate/memory.py sac_saved_bytes_per_token)."""
    ckpt_auto: bool = False
    """`--ckpt-freq auto`: the planner searches ckpt_freq per option (ckpt_freq is the value tried)."""
    compile: bool = False
    compile_loss: bool = False
    """The loss function compiled too (torchtitan's compile.components default "loss" since 2025-08):
    estimate/memory_compile.py. wrap() and PRISM leave the loss eager."""
    bucket_mb: float | None = None
    """DDP gradient bucket (bucket_cap_mb); None = torch's default 25 MB."""
    precision: Precision = "bf16-mixed"
    """bf16-mixed (bf16 compute; fp32 params, grads and optimizer state) | bf16-pure (bf16 params,
    grads and optimizer state) | fp32 (everything fp32)."""

    def __post_init__(self) -> None:
        if self.seq_len <= 0:
            raise SpecError(f"--seq-len must be > 0, got {self.seq_len}")
        if self.micro_batch is not None and self.micro_batch <= 0:
            raise SpecError(f"--micro-batch must be > 0, got {self.micro_batch}")
        if self.global_batch is not None and self.global_batch <= 0:
            raise SpecError(f"--global-batch must be > 0, got {self.global_batch}")
        if self.grad_accum is not None and self.grad_accum <= 0:
            raise SpecError(f"--grad-accum must be > 0, got {self.grad_accum}")
        if self.mean_seq_len is not None and not 0 < self.mean_seq_len <= self.seq_len:
            raise SpecError(f"--mean-seq-len must be between 1 and --seq-len {self.seq_len}, got {self.mean_seq_len}")
        check_histogram(self.length_histogram, self.seq_len)
        if self.image_tokens is not None and self.image_tokens < 0:
            raise SpecError(f"--image-tokens must be >= 0, got {self.image_tokens}")
        check_options(self.bucket_mb, None)
        if self.ckpt_freq < 0:
            raise SpecError(f"--ckpt-freq must be >= 0 (0 = no checkpointing), got {self.ckpt_freq}")
        if self.ckpt_policy not in CKPT_POLICIES:
            raise SpecError(
                f"unknown checkpointing policy {self.ckpt_policy!r}; choose one of {', '.join(CKPT_POLICIES)}"
            )
        if self.ckpt_policy == "sac" and self.ckpt_freq != 1:
            raise SpecError(
                f"selective checkpointing (sac) wraps every block: ckpt_freq must be 1, got {self.ckpt_freq}"
            )
        if self.optimizer not in OPTIMIZERS:
            raise SpecError(f"unknown optimizer {self.optimizer!r}; choose one of {', '.join(OPTIMIZER_NAMES)}")
        parse_loss(self.loss)
        if self.optimizer_impl not in OPTIMIZER_IMPLS:
            raise SpecError(
                f"unknown optimizer implementation {self.optimizer_impl!r}; choose one of {', '.join(OPTIMIZER_IMPLS)}"
            )

    @classmethod
    def from_precision(cls, precision: str, **kw) -> "TrainingSpec":
        """bf16-mixed: bf16 compute, fp32 params (master) and fp32 optimizer state, fp32 grads.
        bf16-pure: bf16 params, grads and optimizer state, as torch's AdamW keeps state in the
        param dtype (PRISM). fp32: everything fp32."""
        presets = {
            "bf16-mixed": dict(compute_dtype="bf16", param_dtype="fp32", grad_dtype="fp32", optim_state_dtype="fp32"),
            "bf16-pure": dict(compute_dtype="bf16", param_dtype="bf16", grad_dtype="bf16", optim_state_dtype="bf16"),
            "fp32": dict(compute_dtype="fp32", param_dtype="fp32", grad_dtype="fp32", optim_state_dtype="fp32"),
        }
        if precision not in presets:
            raise SpecError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
        return cls(precision=precision, **presets[precision], **kw)  # type: ignore[arg-type]

    def optimizer_impl_on(self, device: str) -> str:
        """The implementation that runs on `device`: the explicit one, else torch's default
        (foreach on cuda/xpu, the per-tensor loop on cpu; OPTIMIZER_IMPLS)."""
        if self.optimizer_impl != "auto":
            return self.optimizer_impl
        return "foreach" if device in FOREACH_DEVICES else "loop"

    @property
    def optimizer_name(self) -> str:
        """The `--optimizer` value this spec was built from."""
        return self.optimizer if self.optimizer_impl == "auto" else f"{self.optimizer}-{self.optimizer_impl}"

    @property
    def ckpt_name(self) -> int | str:
        """The `--ckpt-freq` value: "sac" or the block interval."""
        return "sac" if self.ckpt_policy == "sac" else self.ckpt_freq

    @property
    def timed_seq_len(self) -> int:
        """The sequence step time is predicted at: the mean when given, else seq_len."""
        return self.mean_seq_len or self.seq_len

    @property
    def compute_bytes(self) -> int:
        return DTYPE_BYTES[self.compute_dtype]

    @property
    def param_bytes(self) -> int:
        return DTYPE_BYTES[self.param_dtype]

    @property
    def grad_bytes(self) -> int:
        return DTYPE_BYTES[self.grad_dtype]

    @property
    def optim_bytes(self) -> int:
        """Optimizer-state bytes per trainable parameter (moments, plus master copy if any)."""
        n = OPTIMIZER_STATES[self.optimizer] * DTYPE_BYTES[self.optim_state_dtype]
        return n + (4 if self.master_weights else 0)

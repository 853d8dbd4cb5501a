"""torch.compile's effect on what backward keeps (issue 17 item 7).

Under torch.compile, AOTAutograd traces forward and backward as one joint graph and inductor's
min-cut partitioner (torch/_functorch/partitioners.py, torch 2.13) picks what forward saves:
- matmuls and attention are never recomputed (get_default_op_list: aten.mm, addmm, bmm and the
  SDPA flash / efficient kernels are `compute_intensive_ops`, outside the recomputable allowlist;
  should_ban_recomputation: "not in recomputable allowlist"), so their outputs are saved where
  backward needs them;
- pointwise ops, casts (aten._to_copy, prims.convert_element_type) and reductions are
  recomputable; a tensor a backward matmul reads is "materialized in backward" and saved
  (ban_recompute_materialized_backward); a reduction 4x smaller than its input is saved
  (ban_recompute_reductions: the norms' per-token rsqrt); among the rest the cut saves the
  fewest bytes, recomputing cheap pointwise chains in backward's fused kernels;
- a node marked MUST_SAVE by a selective-checkpointing policy is only banned from recompute
  (should_ban_recomputation: "marked MUST_SAVE"): it is saved only if backward needs it.
What one block saves fewer, per token, than the eager count (estimate/memory.py):
- each RMSNorm / LayerNorm's fp32 upcast of its input (eager autograd saves the fp32 copy for
  pow/mul): compiled, the input in its storage dtype and the per-token rsqrt are saved and the
  cast is recomputed: (4 - input bytes) x width per norm, the qk-norms included;
- SwiGLU's act(gate) (eager: saved by the product): recomputed from the saved gate (silu is
  pointwise); GELU's output is the fc2 input a backward matmul reads, so it stays;
- under selective checkpointing, saved linears whose only consumer is the residual add (o_proj,
  down_proj in a pre-norm block): eager SAC caches every listed op's output, the compiled graph
  keeps only what backward reads (post-norm families read them: kept).
- the loss, when it is compiled too (`compile_loss`: torchtitan compiles it by default since
  2025-08, compile.components = ["model", "loss"], 08b8b244f): cross-entropy over `.float()`
  logits saves the low-precision logits (the graph's input) and the per-token max and logsumexp,
  recomputing the fp32 upcast and exp in one backward kernel: logits + their grad in the compute
  dtype, no fp32 buffers (as the fused kernel, estimate/memory.py loss_bytes_per_token).
Checked against torch's own partitioner on CPU (tests/unit/estimate/test_compile_memory.py: a bf16 HF
LlamaDecoderLayer, hidden 64, SwiGLU 176, saved tensors caught by saved_tensors_hooks): eager keeps
both fp32 norm inputs and four (tokens, ffn) tensors, compiled none and three; compiled it saved
2008 bytes per token where this count gives 1976 (-1.6%; eager 2872 measured, 2840 counted: the rest
is the rotary cos/sin tables, per position, tests/unit/estimate/test_estimates.py). The norms' normalised
copies (RMSNorm's weight product, estimate/families.py) are recomputed from the saved input.
Unchanged: attention's q, k, v, output and logsumexp, matmul inputs, the checkpoint's inputs, the
MoE routing tensors (not derived here: kept at the eager count). wrap() compiles each block, the
loss stays eager (runtime/blocks.py apply_compile).

REMAINING_FACTOR (what is left once these terms are in; benchmarks/compile_memory_fit.py fits it
on compiled / eager ratios of the same scenario, free of what the pair shares):
- torchtitan TT-02/TT-01 and TT-22/TT-20 (selective checkpointing, reserved): 0.991 and 0.993 each,
  0.992 together (ratio errors +-0.1%; each left out is predicted from the other within 0.1%);
- PRISM D2/D1 (FSDP1, the backbone compiled whole, every 2nd block checkpointed, allocated): 0.73;
  D's longest text is not recorded (the runs' cap is 1024: --max-seq-length 1024 in PRISM's
  docs/results/scaling_study.md) and is inferred from D1 with the eager model (331 tokens,
  benchmarks/allocator_fit.py), so D1 is in-sample and compile's 16.3 GiB saving meets these terms'
  11.1 GiB at that length. PRISM's loss is the eager upcast kernel (src/decoders/lm_head.py
  F.cross_entropy on bf16 logits under the trainer's autocast: fp32 log_softmax; the compile covers
  the backbone only, src/training/distributed.py), so the loss does not explain the difference;
  whether PRISM's compile saves more (the backbone in one graph, XPU) or the eager model is wrong at
  D the records cannot decide; D does not set the factor. All three ratios together: 0.89,
  leave-one-out ratio errors -5.4%, -11.5% and +16.3%: no single factor serves both stacks.
The factor stays 1.0; what it rests on: two torchtitan pairs on one GPU type. Not decided by any
record: full checkpointing (TT-21's eager pair, PR #165's FSDP2 AC row, is not shipped; it says
compile saved 6.8% of reserved where these terms give 0.7%, and the eager row is itself predicted
-20%), no checkpointing (TT-24 has no eager pair), compile on XPU against CUDA, and whether
compile's savings show in allocated or in the allocator's cache (compiled rows report reserved).
"""

from __future__ import annotations

from prism_strategy.estimate.families import rms_norm_saved_bytes_per_token
from prism_strategy.specs.model import TransformerSpec

FP32 = 4
REMAINING_FACTOR = 1.0
"""Compiled block activations / the partitioner count above (module docstring: fitted 0.992 on the
torchtitan pairs, undecided on PRISM's D)."""
SOURCE = "compiled: min-cut partitioner, torch/_functorch/partitioners.py"
POST_NORM_FAMILIES = frozenset({"olmo2", "olmo3"})
"""HF model types whose norms take the attention / MLP outputs (Olmo2DecoderLayer: post_attention_layernorm
on self_attn's output): o_proj / down_proj outputs are norm inputs that backward reads."""


def _norm_upcast_savings(spec: TransformerSpec, e: int, residual: int) -> float:
    h, q, kv = spec.hidden, spec.q_width, spec.kv_width
    stored = e if spec.hf_model_type in POST_NORM_FAMILIES else residual
    n = spec.block_norms * (FP32 - stored) * h
    if spec.qk_norm != "none":
        n += (FP32 - e) * (q + kv)  # qk-norm inputs are the q / k projections' outputs
    return max(n, 0.0)


def block_savings_per_token(spec: TransformerSpec, e: int, residual: int, trains: bool = True) -> float:
    """Bytes per token a non-checkpointed block saves fewer when compiled (module docstring): the
    norms' normalised copies are recomputed from the saved input and rsqrt (pointwise) too."""
    act = e * spec.active_ffn if spec.mlp == "swiglu" else 0.0
    stored = e if spec.hf_model_type in POST_NORM_FAMILIES else residual
    copies = spec.block_norms * (rms_norm_saved_bytes_per_token(spec, stored, trains) - FP32 * (spec.norm == "rmsnorm"))
    return _norm_upcast_savings(spec, e, residual) + act + copies


def sac_savings_per_token(spec: TransformerSpec, e: int, saved: list[tuple[int, int, bool]]) -> float:
    """Bytes per token a selectively checkpointed block saves fewer when compiled: the kept linears
    feeding only the residual add (o_proj, the MLP's last), `saved` as memory.sac_linears gives."""
    if spec.hf_model_type in POST_NORM_FAMILIES or spec.block_norms == 4:
        return 0.0
    o_proj, down = saved[3], saved[-1]
    return float(sum(e * o for o, _, keep in (o_proj, down) if keep))


def loss_label_and_bytes(v: int, e: int) -> tuple[str, float]:
    return "loss: low-precision logits + their grad (compiled cross-entropy)", v * 2 * e


def description(compile_loss: bool) -> str:
    """The plan's memory provenance for a compiled scenario."""
    loss = "; the loss compiled too: low-precision logits + their grad" if compile_loss else "; the loss eager"
    return (
        f"torch.compile: estimate/memory_compile.py ({SOURCE}: norm inputs kept in their storage dtype, "
        f"act(gate) recomputed, compiled SAC keeps no o_proj/down outputs{loss}); remaining factor "
        f"{REMAINING_FACTOR:g} (torchtitan TT-02/TT-01, TT-22/TT-20: benchmarks/compile_memory_fit.py)"
    )

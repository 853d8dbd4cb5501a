"""Estimator terms for the families whose blocks differ from the Llama / SigLIP block that
estimate/compute.py and estimate/memory.py are written for. Each term is per block, averaged over
the stack (an MoE stack may mix dense and sparse blocks), and 0 for a Llama-like block.

- Gemma 2/3 (block_norms 4): two more RMSNorms per block, each saving its fp32 input.
- MoE blocks (transformers 5's default grouped_mm experts, integrations/moe.py
  grouped_mm_experts_forward; the eager per-expert loop saves the same tensors): per token the
  router's fp32 softmax over the E experts and its top-k indices (int64); per routed
  (token, expert) pair the gathered input row (saved for the weight gradient, so only when the
  experts train) and the expert's output row (saved for the product with the routing weight,
  which needs a gradient whenever gradients flow). The experts' gate/up/act/product tensors are
  the MLP's, at the active width top-k x expert_ffn (TransformerSpec.active_ffn). Qwen2-MoE's
  shared-expert gate saves the shared expert's output for its sigmoid product.
  Kernels per sparse block (eager): the router GEMM and 2 grouped GEMMs (+ the shared expert's 3
  and its gate) replace the dense MLP's GEMMs; routing adds ROUTING_KERNELS elementwise and index
  kernels.
- GPT-2 (learned positions): no rotary kernels.
- RMSNorm's weight product (rms_norm_saved_bytes_per_token): HF's RMSNorm multiplies the
  normalised copy by its weight, and autograd's mul saves that copy when the weight trains, beside
  the fp32 input saved by pow and the per-token fp32 rsqrt. LlamaRMSNorm (Llama, Qwen2/3, Mistral):
  `self.weight * hidden_states.to(input_dtype)`, a copy in the norm's input dtype; Olmo2/Olmo3RMSNorm:
  `(self.weight * hidden_states).to(input_dtype)`, GemmaRMSNorm: `output * (1.0 + self.weight.float())`,
  an fp32 copy (transformers models/*/modeling_*.py, the installed 4.x/5.x). Measured on CPU
  (tests/unit/estimate/test_compile_memory.py: a bf16 LlamaDecoderLayer saves per norm its fp32 input, the
  (tokens, 1) rsqrt and the (tokens, hidden) bf16 copy).
"""

from __future__ import annotations

from prism_strategy.specs.model import MultimodalSpec, TransformerSpec
from prism_strategy.specs.training import TrainingSpec

FP32, INT64 = 4, 8
ROUTING_KERNELS = 18
"""grouped_mm_experts_forward and the router, one sparse block's forward: softmax (+ fp32 cast),
topk, sum, div (renormalise), reshape copies (2), sort, floor-div, gather rows, gather weights,
histc (+ float cast), cumsum, product with the routing weights, inverse permutation (empty,
arange, index_put), gather back, sum over k, cast. Counted from the source, not traced."""
NORM_KERNELS_RMS = 7
"""As estimate/compute.NORM_KERNELS['rmsnorm']: HF RMSNorm's cast, pow, mean, add, rsqrt, mul, cast x w."""
ROPE_KERNELS = 10


FP32_PRODUCT_NORMS = frozenset({"olmo2", "olmo3", "gemma", "gemma2", "gemma3", "gemma3_text"})
"""HF model types whose RMSNorm multiplies by its weight in fp32 (module docstring)."""


def rms_norm_saved_bytes_per_token(spec: TransformerSpec, norm_input: int, trains: bool) -> float:
    """What one RMSNorm saves per token beyond its fp32 input (module docstring): the fp32 rsqrt,
    and the normalised copy its weight product keeps when the weight trains; `norm_input` is the
    bytes per element of the norm's input (the residual stream for a pre-norm)."""
    if spec.norm != "rmsnorm":
        return 0.0
    copy = FP32 if spec.hf_model_type in FP32_PRODUCT_NORMS else norm_input
    return FP32 + (copy * spec.hidden if trains else 0.0)


def _sparse_share(spec: TransformerSpec) -> float:
    return spec.moe_layers / spec.layers


def extra_activation_bytes_per_token(spec: TransformerSpec, e: int, trains: bool) -> float:
    """Saved bytes per token per block beyond the dense formula (module docstring)."""
    h, n = spec.hidden, 0.0
    if spec.block_norms == 4:
        n += 2 * FP32 * h  # fp32 inputs of the post-attention and post-MLP norms
    if spec.moe:
        k = spec.experts_per_token
        routed = k * e * h * (2 if trains else 1)  # gathered input (weight grads), expert output (routing product)
        router = FP32 * spec.experts + INT64 * k
        shared = e * h if spec.shared_expert_gate and spec.shared_expert_ffn else 0
        n += _sparse_share(spec) * (routed + router + shared)
    return n


def extra_block_kernels(spec: TransformerSpec, compiled: bool) -> tuple[float, float]:
    """(kernels, of which GEMMs) one block's forward launches beyond the dense block's count."""
    kernels = gemms = 0.0
    if spec.moe:
        dense_mlp_gemms = 3  # the MoE families' dense MLP is gated (gate, up, down)
        shared = (3 if spec.shared_expert_ffn else 0) + (1 if spec.shared_expert_gate else 0)
        g = 1 + 2 + shared - dense_mlp_gemms
        elementwise = 0 if compiled else ROUTING_KERNELS + (2 if spec.shared_expert_gate else 0)  # sigmoid, product
        kernels, gemms = _sparse_share(spec) * (g + elementwise), _sparse_share(spec) * g
    if compiled:
        return kernels, gemms
    if spec.block_norms == 4:
        kernels += 2 * NORM_KERNELS_RMS
    if spec.kind == "decoder" and spec.position_embeddings:
        kernels -= ROPE_KERNELS
    return kernels, gemms


def moe_block_gemms(spec: TransformerSpec) -> tuple[tuple[int, int], ...]:
    """(in, out) widths of a sparse block's MLP matmuls, each run over every token of the micro-batch
    (estimate/compute_shape.py): the router, each of the top-k experts' gate|up and down (so the
    FLOPs are exact), the shared expert and its gate. The thin-matmul curve then sees the whole token
    count, while grouped_mm's per-expert groups hold tokens x k / E rows: its loss is understated.
    A stack that mixes dense blocks is timed as if every block were sparse (by shape; the FLOPs path
    of estimate/compute.py averages exactly)."""
    h, i, k, s = spec.hidden, spec.expert_ffn, spec.experts_per_token, spec.shared_expert_ffn
    routed = ((h, 2 * i),) * k + ((i, h),) * k
    shared = ((h, s), (h, s), (s, h)) if s else ()
    return ((h, spec.experts),) + routed + shared + (((h, 1),) if spec.shared_expert_gate else ())


def assumptions(model: MultimodalSpec, training: TrainingSpec) -> list[str]:
    """What the plan assumes about these families, one line each, for the plan's reasons."""
    out, seq_len = [], training.seq_len
    for spec in filter(None, (model.backbone, model.vision)):
        if spec.moe:
            out.append(
                f"assumption: {spec.name} is a mixture of experts ({spec.experts} experts, top-{spec.experts_per_token}, "
                f"{spec.moe_layers} of {spec.layers} blocks sparse): planned with data parallelism only, every rank "
                f"holds all experts (their states sharded as the strategy shards them); expert parallelism is not "
                f"modelled; FLOPs and activations count the {spec.experts_per_token} routed experts per token "
                f"(balanced routing, no dropped tokens)"
            )
        if spec.moe and training.param_dtype != training.compute_dtype:
            out.append(
                f"assumption: the experts' FLOPs and activations are priced in {training.compute_dtype}, but "
                "transformers' default grouped_mm experts are not autocast-enabled and run at the parameters' dtype "
                f"({training.param_dtype} here: seen on CPU); on CUDA torch's grouped_mm takes bf16 only (from "
                "torch/_meta_registrations.py, which mirrors _grouped_mm_cuda; not run here): train MoEs with "
                "--precision bf16-pure, or experts_implementation='eager'"
            )
        if spec.sliding_layers and seq_len > spec.sliding_window:
            out.append(
                f"assumption: attention FLOPs count the full causal context on every layer; {spec.sliding_layers} of "
                f"{spec.layers} layers of {spec.name} attend within a {spec.sliding_window}-token window, which a "
                "windowed flash kernel exploits (less work) and SDPA with a mask does not (more)"
            )
        if spec.hf_model_type == "gemma2":
            out.append(
                "assumption: flash attention (no seq x seq scores saved); transformers runs Gemma 2 with eager "
                "attention unless asked (no SDPA: logit soft-capping), which saves the scores of every layer: "
                "train with attn_implementation='flash_attention_2'"
            )
    return out

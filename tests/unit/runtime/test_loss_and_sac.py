"""The loss kernels and selective checkpointing (issue 17 items 3-4) on CPU, against torch.

- runtime/loss.py's chunked cross-entropy gives F.cross_entropy's loss and gradients (HF's causal
  shift and ignore_index), and no full logits exist: the peak of its forward + backward, measured
  with MemTracker, is within 10% of loss_bytes_per_token's chunked figure and far below upcast's.
- runtime/sac.py's policy keeps what estimate/memory.py sac_saved_bytes_per_token says: the live
  bytes after a forward of tiny-llama under sac minus under full checkpointing (every block)
  equal layers x tokens x (sac bytes - block input bytes), within 10%.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from prism_strategy.estimate.memory import loss_bytes_per_token, sac_linears, sac_saved_bytes_per_token
from prism_strategy.runtime.loss import apply_loss, chunked_cross_entropy
from prism_strategy.specs import TrainingSpec, TransformerSpec, load_model
from prism_strategy.specs.errors import SpecError

TOLERANCE = 0.10


def _reference(head, hidden, labels):
    logits = head(hidden).float()
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100)


@pytest.mark.parametrize("chunk", [None, 7, 1000])
def test_chunked_cross_entropy_matches_torch(chunk):
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=False)
    hidden = torch.randn(3, 11, 16, requires_grad=True)
    labels = torch.randint(0, 50, (3, 11))
    labels[0, 4] = -100
    ref = _reference(head, hidden, labels)
    g_ref = torch.autograd.grad(ref, (hidden, head.weight))
    got = chunked_cross_entropy(head, hidden, labels, chunk=chunk)
    g_got = torch.autograd.grad(got, (hidden, head.weight))
    assert got.item() == pytest.approx(ref.item(), rel=1e-5)
    for a, b in zip(g_got, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


class _Head:
    """The LM head as a plain callable: MemTracker refuses a module called once per chunk."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = weight

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


def _peak(fn) -> float:
    from torch.distributed._tools.mem_tracker import MemTracker

    mt = MemTracker()
    with mt:
        fn()
    return float(sum(d["Total"] for d in mt.get_tracker_snapshot("peak").values()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_loss_peak_is_the_modelled_chunk_not_the_logits(dtype):
    """B x T = 4096 tokens, hidden 64, vocab 512: chunks of 512 tokens (chunk x vocab = tokens x
    hidden). What the loss adds over hidden, head and their grads is one chunk's fp32 buffers.
    Vocab is small beside the tokens, so the head-sized gradient buffer autograd accumulates the
    chunks' contributions in (not modelled) stays under 2% of the figure."""
    torch.manual_seed(0)
    spec = TransformerSpec(
        name="v", layers=1, hidden=64, heads=4, kv_heads=4, head_dim=16, ffn=128, vocab=512, max_positions=1024
    )
    head = _Head(torch.randn(spec.vocab, spec.hidden, dtype=dtype, requires_grad=True))
    labels = torch.randint(0, spec.vocab, (4, 1024))
    hidden = torch.randn(4, 1024, spec.hidden, dtype=dtype, requires_grad=True)

    def step(loss_fn):
        def run():
            loss_fn(head, hidden, labels).backward()
            hidden.grad = head.weight.grad = None

        return run

    e = hidden.element_size()
    base = e * (hidden.numel() * 2 + 2 * head.weight.numel())  # hidden + its grad, weight + its grad
    tokens = hidden.shape[0] * hidden.shape[1]
    chunked = _peak(step(chunked_cross_entropy)) - base
    upcast = _peak(step(_reference)) - base
    t = TrainingSpec.from_precision("fp32" if dtype == torch.float32 else "bf16-pure", loss="chunked")
    predicted = tokens * loss_bytes_per_token(spec, t)[1]
    assert abs(chunked - predicted) <= TOLERANCE * predicted, (chunked, predicted)
    assert upcast > 5 * chunked


def test_cross_entropy_on_bf16_logits_under_autocast_is_the_upcast_kernel():
    """PRISM's loss (AI-ModCon/PRISM src/decoders/lm_head.py at c0d26e9e: F.cross_entropy on the
    bf16 logits, "no FP32 upcast") runs inside the trainer's torch.autocast(bfloat16), where
    log_softmax runs in fp32 (aten/src/ATen/autocast_mode.h; CPU lists cross_entropy_loss itself):
    autograd saves fp32 log-probs for the whole (tokens, vocab), not the bf16 logits, so the
    records keep loss = upcast (loss_bytes_per_token: 12 bytes per logit, 4 of them these)."""
    n, v = 12, 50
    logits = torch.randn(n, v, dtype=torch.bfloat16, requires_grad=True)
    saved: dict[int, tuple[torch.dtype, tuple[int, ...]]] = {}  # per storage: nll_loss saves the log-probs too

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[t.untyped_storage().data_ptr()] = (t.dtype, tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(logits, torch.randint(0, v, (n,)))
    loss.backward()
    assert [d for d, shape in saved.values() if shape == (n, v)] == [torch.float32]
    assert logits.grad.dtype == torch.bfloat16


def test_bad_loss_and_models_without_a_head_are_refused():
    with pytest.raises(SpecError, match="unknown loss 'nonsense'"):
        apply_loss(torch.nn.Linear(2, 2), "nonsense")
    with pytest.raises(SpecError, match="needs a causal LM"):
        apply_loss(torch.nn.Linear(2, 2), "chunked")
    with pytest.raises(SpecError, match="unknown loss"):
        TrainingSpec(loss="nonsense")


def test_sac_recomputes_every_second_mm_of_a_llama_block():
    """q, k, v, o, gate, up, down: mm 1, 3, 5, 7 saved (q, v, gate, down), 2, 4, 6 recomputed."""
    spec = load_model("tiny-llama")
    assert [saved for *_, saved in sac_linears(spec)] == [True, False, True, False, True, False, True]


def _live_after_forward(ckpt) -> float:
    transformers = pytest.importorskip("transformers")
    from torch.distributed._tools.mem_tracker import MemTracker

    from prism_strategy.runtime.blocks import apply_checkpointing, find_blocks
    from prism_strategy.specs.hf import to_hf_config

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(to_hf_config(load_model("tiny-llama")))
    model.config.use_cache = False
    apply_checkpointing(find_blocks(model), every=ckpt)
    x = torch.randint(0, 512, (2, 256))
    mt = MemTracker()
    mt.track_external(model)
    with mt:
        out = model(input_ids=x, labels=x)
        live = float(sum(d["Total"] for d in mt.get_tracker_snapshot("current").values()))
        out.loss.backward()
    return live


def test_sac_keeps_what_the_model_says():
    spec = load_model("tiny-llama")
    tokens = 2 * 256
    measured = _live_after_forward("sac") - _live_after_forward(1)
    predicted = spec.layers * tokens * (sac_saved_bytes_per_token(spec, 4, 4) - 4 * spec.hidden)
    assert abs(measured - predicted) <= TOLERANCE * predicted, (measured, predicted)

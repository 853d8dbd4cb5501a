"""The real model a traced estimate runs: built from a spec through transformers, or from a
user's `module:function` factory, with its batch and its loss.

Imported only by `traced/estimate.py` inside its functions (it imports torch at the top), so
`import prism_strategy.planning.planner` stays free of torch.

Conventions, each the same as the training step the trace stands for:
- Decoders (a TransformerSpec, or a MultimodalSpec without vision) are transformers'
  `AutoModelForCausalLM` built from `specs.hf.to_hf_config`; the loss is HF's own
  (`model(input_ids, labels=input_ids, use_cache=False).loss`: logits upcast to fp32, shifted
  cross-entropy). use_cache=False as a training step must: with the default (config.use_cache
  True) HF fills a KV cache in training too, and under wrap()'s checkpoint_wrapper the cache,
  an argument of every checkpointed block, keeps each block's K/V (and the copies recomputation
  appends) alive to the end of backward.
- Vision + projector + backbone: SigLIP vision tower -> LLaVA projector (Linear-GELU-Linear)
  -> the image tokens are prepended to the text embeddings of the backbone; labels of image
  positions are -100. Parts that do not train (by mode) have requires_grad=False and are
  stored in the compute dtype (the analytic model's assumption).
- A factory "pkg.mod:make_model" (or a callable) returns an nn.Module. An HF causal LM (it has
  `config` and `loss_function`) is called as above; any other module as `model(input_ids)`,
  which must return logits (or an object with `.logits`, or a tuple whose first item is the
  logits), and the loss is fp32 next-token cross-entropy.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from prism_strategy.runtime.blocks import find_blocks
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.hf import build_hf_model
from prism_strategy.specs.model import MultimodalSpec, TransformerSpec
from prism_strategy.specs.parts import image_tokens
from prism_strategy.specs.training import TrainingSpec

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
Batch = dict[str, torch.Tensor]


@dataclass(frozen=True, kw_only=True, slots=True)
class BuiltModel:
    """A model ready to wrap, and how one training micro-batch runs through it."""

    module: nn.Module
    block_types: tuple[str, ...] | None
    """Block class names for wrap(); None = wrap()'s own discovery."""
    make_batch: Callable[[int], Batch]
    """Micro-batch size -> the inputs (called inside fake mode)."""
    loss: Callable[[nn.Module, Batch], torch.Tensor]
    what: str
    """One line: what was built."""


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """torch.set_default_dtype for the block: under FakeTensorMode, building in the target dtype
    is reliable where model.to(dtype) is not."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


@contextlib.contextmanager
def eager_hf_masks() -> Iterator[None]:
    """transformers counts a FakeTensor as "tracing" and then builds the causal mask that an
    eager run skips (SDPA's is_causal does the masking): the trace would hold a mask the real
    step does not. Inside this block only compile/export/jit count as tracing, and the batches
    (one sequence per row, no padding: what make_batch builds) are declared unpacked, which an
    eager run finds by reading the position ids."""
    try:
        from transformers import masking_utils
    except ImportError:
        yield
        return
    names = ("is_tracing", "find_packed_sequence_indices")
    saved = {n: getattr(masking_utils, n) for n in names if hasattr(masking_utils, n)}
    if len(saved) != len(names):
        yield
        return
    masking_utils.is_tracing = lambda tensor=None: saved["is_tracing"](None)
    masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(masking_utils, n, f)


# --- factories -------------------------------------------------------------------------
def resolve_factory(text: str) -> Callable[[], nn.Module]:
    """'pkg.mod:make_model' -> the function; SpecError with one line when it cannot be found."""
    mod_name, sep, fn_name = text.partition(":")
    if not sep or not mod_name or not fn_name or not fn_name.replace(".", "_").isidentifier():
        raise SpecError(f"model factory {text!r} must look like 'package.module:function'")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise SpecError(f"cannot import {mod_name!r} for model factory {text!r}: {e}") from None
    obj: Any = mod
    for part in fn_name.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise SpecError(f"module {mod_name!r} has no {fn_name!r} (model factory {text!r})")
    if not callable(obj):
        raise SpecError(f"model factory {text!r} is a {type(obj).__name__}, not a function")
    return obj


def call_factory(factory: Callable[[], Any], name: str) -> nn.Module:
    try:
        module = factory()
    except SpecError:
        raise
    except Exception as e:  # the user's code: one line, whatever it raised
        raise SpecError(f"model factory {name} failed: {type(e).__name__}: {e}") from None
    if not isinstance(module, nn.Module):
        raise SpecError(f"model factory {name} returned {type(module).__name__}, not a torch.nn.Module")
    return module


def _vocab_of(module: nn.Module, name: str) -> int:
    cfg = getattr(module, "config", None)
    vocab = getattr(cfg, "vocab_size", None)
    if isinstance(vocab, int) and vocab > 0:
        return vocab
    emb = next((m for m in module.modules() if isinstance(m, nn.Embedding)), None)
    if emb is None:
        raise SpecError(f"model from {name} has no config.vocab_size and no nn.Embedding: cannot make token inputs")
    return emb.num_embeddings


def _logits_of(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if getattr(out, "logits", None) is not None:
        return out.logits
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    raise TypeError(f"forward returned {type(out).__name__}; return logits, an object with .logits, or a tuple")


def next_token_loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """fp32 next-token cross-entropy (what HF's ForCausalLMLoss does)."""
    logits = logits[:, : ids.shape[1]].float()
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def _hf_loss(model: nn.Module, b: Batch) -> torch.Tensor:
    return model(input_ids=b["input_ids"], labels=b["input_ids"], use_cache=False).loss


def _factory_loss(model: nn.Module, b: Batch) -> torch.Tensor:
    return next_token_loss(_logits_of(model(b["input_ids"])), b["input_ids"])


def _is_hf_causal_lm(module: nn.Module) -> bool:
    return hasattr(module, "config") and hasattr(module, "loss_function")


def build_from_factory(factory: Callable[[], Any], name: str, training: TrainingSpec) -> BuiltModel:
    """Call the factory (fake mode is active: its tensors are fake, on the fake "cpu" device)."""
    module = call_factory(factory, name)
    vocab, seq = _vocab_of(module, name), training.seq_len
    return BuiltModel(
        module=module,
        block_types=None,
        make_batch=lambda mb: {"input_ids": torch.randint(0, vocab, (mb, seq))},
        loss=_hf_loss if _is_hf_causal_lm(module) else _factory_loss,
        what=f"{type(module).__name__} from factory {name}",
    )


# --- specs -----------------------------------------------------------------------------
@contextlib.contextmanager
def _weight_init(enabled: bool) -> Iterator[None]:
    """Under fake tensors, skip weight init (some inits, e.g. SigLIP's truncated normal, are
    data-dependent); values do not change memory."""
    if enabled:
        yield
        return
    from transformers.initialization import no_init_weights

    with no_init_weights():
        yield


def _hf_model(spec: TransformerSpec, init: bool) -> nn.Module:
    with _weight_init(init):
        model = build_hf_model(spec)
    model.tie_weights()  # no_init_weights skips the tying post_init would do
    return model


class VisionLanguageModel(nn.Module):
    """LLaVA-style: vision tower -> projector -> image tokens prepended to the text."""

    def __init__(
        self, vision: nn.Module, projector: nn.Module, language_model: nn.Module, image_tokens: int, skip: int = 0
    ) -> None:
        super().__init__()
        self.vision = vision
        self.projector = projector
        self.language_model = language_model
        self.image_tokens = image_tokens
        self.skip = skip
        """Leading encoder tokens dropped: CLIP's class token (LLaVA's "default" feature select)."""

    def forward(self, pixel_values: torch.Tensor, input_ids: torch.Tensor) -> Any:
        feats = self.vision(pixel_values=pixel_values).last_hidden_state[:, self.skip : self.skip + self.image_tokens]
        img = self.projector(feats.to(self.projector[0].weight.dtype))
        text = self.language_model.get_input_embeddings()(input_ids)
        embeds = torch.cat((img.to(text.dtype), text), dim=1)
        labels = torch.cat((torch.full(img.shape[:2], -100, dtype=input_ids.dtype), input_ids), dim=1)
        return self.language_model(inputs_embeds=embeds, labels=labels, use_cache=False)


def _block_names(module: nn.Module) -> tuple[str, ...]:
    return tuple(dict.fromkeys(type(s.module).__name__ for s in find_blocks(module)))


def _set_trainable(module: nn.Module, trains: bool) -> None:
    for p in module.parameters():
        p.requires_grad_(trains)


def build_from_spec(model: MultimodalSpec, training: TrainingSpec, *, init: bool = True) -> BuiltModel:
    """Decoder alone, or vision + projector + decoder. The trace calls it under FakeTensorMode
    with init=False: parameters are fake tensors on the fake "cpu" device from the start
    (materialising meta parameters with to_empty under fake mode trips over the weakrefs fake
    mode keeps); a real run calls it with init=True."""
    param = _DTYPES[training.param_dtype]
    frozen = _DTYPES[training.compute_dtype]
    b, seq = model.backbone, training.seq_len
    if model.vision is None:
        with default_dtype(param):
            lm = _hf_model(b, init)
        return BuiltModel(
            module=lm,
            block_types=None,
            make_batch=lambda mb: {"input_ids": torch.randint(0, b.vocab, (mb, seq))},
            loss=_hf_loss,
            what=f"transformers {type(lm).__name__} for {b.name}",
        )
    v, n_img = model.vision, image_tokens(model, training)
    if n_img > v.num_patches:
        raise SpecError(
            f"--image-tokens {n_img} is more than {v.name}'s {v.num_patches} patches: the trace "
            "prepends the encoder's tokens; use at most that many"
        )
    with default_dtype(param if model.vision_trains else frozen):
        vision = _hf_model(v, init)
    with default_dtype(param if model.backbone_trains else frozen):
        lm = _hf_model(b, init)
    with default_dtype(param):
        projector = nn.Sequential(nn.Linear(v.hidden, b.hidden), nn.GELU(), nn.Linear(b.hidden, b.hidden))
    _set_trainable(vision, model.vision_trains)
    _set_trainable(lm, model.backbone_trains)
    vlm = VisionLanguageModel(vision, projector, lm, n_img, skip=v.positions - v.num_patches)
    px = (v.channels, v.image_size, v.image_size)
    px_dtype = param if model.vision_trains else frozen
    return BuiltModel(
        module=vlm,
        block_types=_block_names(vision) + _block_names(lm),
        make_batch=lambda mb: {
            "pixel_values": torch.randn(mb, *px, dtype=px_dtype),
            "input_ids": torch.randint(0, b.vocab, (mb, seq)),
        },
        loss=lambda m, batch: m(batch["pixel_values"], batch["input_ids"]).loss,
        what=(
            f"{type(vision).__name__} + projector + {type(lm).__name__} ({model.mode}: "
            f"{n_img} image tokens prepended; frozen parts in {training.compute_dtype})"
        ),
    )

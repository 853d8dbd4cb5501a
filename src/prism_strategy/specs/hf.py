"""Bridge to Hugging Face configs: read a config.json into a TransformerSpec, and build the
transformers config (and a meta-device model) back from a spec. transformers is optional:
only `to_hf_config` / `build_meta_model` import it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.model import TransformerSpec

# model_type -> architecture facts transformers hard-codes for that family.
_DECODER_FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {"norm": "rmsnorm", "qk_norm": "none"},
    "mistral": {"norm": "rmsnorm", "qk_norm": "none"},
    "qwen2": {"norm": "rmsnorm", "qk_norm": "none", "qkv_bias": True, "o_bias": False},
    "qwen3": {"norm": "rmsnorm", "qk_norm": "per_head"},
    "olmo": {"norm": "layernorm_noparam", "qk_norm": "none"},
    "olmo2": {"norm": "rmsnorm", "qk_norm": "full"},
    "olmo3": {"norm": "rmsnorm", "qk_norm": "full"},
}
_VISION_TYPES = ("siglip_vision_model", "siglip", "siglip2_vision_model", "siglip2")


def supported_model_types() -> tuple[str, ...]:
    return tuple(_DECODER_FAMILIES) + _VISION_TYPES


def load_hf_config(path: Path) -> TransformerSpec:
    try:
        cfg = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"cannot read model config {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise SpecError(f"{path} is not valid JSON (line {e.lineno}: {e.msg}); pass a Hugging Face config.json") from None
    if not isinstance(cfg, dict):
        raise SpecError(f"{path} is not a Hugging Face config (expected a JSON object)")
    return spec_from_hf_dict(cfg, name=Path(path).parent.name or Path(path).stem, source=str(path))


MAX_SIZE = 2**40
"""Largest layer count / width / vocabulary taken as real (larger is a mangled config)."""


def _int(cfg: dict, key: str, where: str, default: Any = None) -> int:
    """A size from the config: an integer in [1, 2**40] (SpecError naming the key otherwise)."""
    v = cfg.get(key) if cfg.get(key) is not None else default
    if v is None:
        raise SpecError(f"{where}: config has no {key!r}; is this a transformer config.json?")
    if isinstance(v, bool) or not isinstance(v, int):
        raise SpecError(f"{where}: {key} must be an integer, got {v!r}")
    if not 1 <= v <= MAX_SIZE:
        raise SpecError(f"{where}: {key} must be between 1 and {MAX_SIZE}, got {v}")
    return v


def _head_dim(cfg: dict, hidden: int, heads: int, where: str) -> int:
    if cfg.get("head_dim") is None and hidden % heads:
        raise SpecError(f"{where}: hidden_size {hidden} is not a multiple of num_attention_heads {heads}; "
                        "give head_dim in the config")
    return _int(cfg, "head_dim", where, hidden // heads)


def spec_from_hf_dict(cfg: dict, *, name: str, source: str = "") -> TransformerSpec:
    mt = cfg.get("model_type")
    where = source or name
    if mt in ("siglip", "siglip2") and isinstance(cfg.get("vision_config"), dict):
        cfg, mt = cfg["vision_config"], f"{mt}_vision_model"
    if mt in _VISION_TYPES:
        return _vision_spec(cfg, name=name, source=source, model_type=mt)
    if mt not in _DECODER_FAMILIES:
        raise SpecError(f"{where}: model_type {mt!r} is not supported; supported: {', '.join(supported_model_types())}")
    fam = _DECODER_FAMILIES[mt]
    hidden = _int(cfg, "hidden_size", where)
    heads = _int(cfg, "num_attention_heads", where)
    bias = bool(cfg.get("attention_bias", False))
    return TransformerSpec(
        name=name, kind="decoder", hf_model_type=mt, source=source or f"config.json ({mt})",
        layers=_int(cfg, "num_hidden_layers", where), hidden=hidden, heads=heads,
        kv_heads=_int(cfg, "num_key_value_heads", where, heads),
        head_dim=_head_dim(cfg, hidden, heads, where),
        ffn=_int(cfg, "intermediate_size", where), vocab=_int(cfg, "vocab_size", where),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=fam.get("qkv_bias", bias), o_bias=fam.get("o_bias", bias),
        mlp_bias=bool(cfg.get("mlp_bias", False)), mlp="swiglu", norm=fam["norm"], qk_norm=fam["qk_norm"],
        max_positions=_int(cfg, "max_position_embeddings", where),
    )


def _vision_spec(cfg: dict, *, name: str, source: str, model_type: str) -> TransformerSpec:
    where = source or name
    hidden = _int(cfg, "hidden_size", where, 768)
    heads = _int(cfg, "num_attention_heads", where, 12)
    return TransformerSpec(
        name=name, kind="vision", hf_model_type="siglip_vision_model", source=source or model_type,
        layers=_int(cfg, "num_hidden_layers", where, 12), hidden=hidden, heads=heads, kv_heads=heads,
        head_dim=_head_dim({}, hidden, heads, where), ffn=_int(cfg, "intermediate_size", where, 3072),
        qkv_bias=True, o_bias=True, mlp_bias=True, mlp="gelu", norm="layernorm",
        image_size=_int(cfg, "image_size", where, 224), patch_size=_int(cfg, "patch_size", where, 16),
        channels=_int(cfg, "num_channels", where, 3), pooling_head=bool(cfg.get("vision_use_head", True)),
    )


def to_hf_config(spec: TransformerSpec):
    """The transformers config object for this spec (needs transformers)."""
    import transformers

    if spec.kind == "vision":
        return transformers.SiglipVisionConfig(
            hidden_size=spec.hidden, intermediate_size=spec.ffn, num_hidden_layers=spec.layers,
            num_attention_heads=spec.heads, num_channels=spec.channels, image_size=spec.image_size,
            patch_size=spec.patch_size, vision_use_head=spec.pooling_head,
        )
    cls = transformers.AutoConfig.for_model(spec.hf_model_type).__class__
    kw: dict[str, Any] = dict(
        vocab_size=spec.vocab, hidden_size=spec.hidden, intermediate_size=spec.ffn,
        num_hidden_layers=spec.layers, num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads,
        max_position_embeddings=spec.max_positions, tie_word_embeddings=spec.tied_embeddings,
        attention_bias=spec.qkv_bias,
    )
    if spec.hf_model_type in ("llama", "mistral", "qwen3"):
        kw["head_dim"] = spec.head_dim
    if spec.hf_model_type in ("llama",):
        kw["mlp_bias"] = spec.mlp_bias
    return cls(**kw)


def build_meta_model(spec: TransformerSpec):
    """The real transformers model for this spec, on the meta device (no memory, no download)."""
    import torch
    import transformers

    cfg = to_hf_config(spec)
    with torch.device("meta"):
        if spec.kind == "vision":
            return transformers.SiglipVisionModel(cfg)
        return transformers.AutoModelForCausalLM.from_config(cfg)

"""Bridge to Hugging Face configs: read a config.json into a TransformerSpec, and build the
transformers config (and a meta-device model) back from a spec. transformers is optional:
only `to_hf_config` / `build_meta_model` import it."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.hf_families import DECODERS, MAX_SIZE, Config, hf_kwargs, read_family
from prism_strategy.specs.model import TransformerSpec
from prism_strategy.specs.safe_files import load_json

__all__ = [
    "MAX_SIZE",
    "build_hf_model",
    "build_meta_model",
    "load_hf_config",
    "spec_from_hf_dict",
    "supported_model_types",
    "to_hf_config",
]

_VISION_TYPES = ("siglip_vision_model", "siglip", "siglip2_vision_model", "siglip2", "clip_vision_model", "clip")
_TEXT_WRAPPERS = {"gemma3": "gemma3_text"}
"""Multimodal configs whose text_config is a supported decoder (Gemma 3 4B and larger)."""


def preset_example() -> str:
    """The installed path of a preset TOML a user can copy and edit (data/models/llama-2-7b.toml)."""
    return str(resources.files("prism_strategy") / "data" / "models" / "llama-2-7b.toml")


def supported_model_types() -> tuple[str, ...]:
    return tuple(DECODERS) + tuple(_TEXT_WRAPPERS) + _VISION_TYPES


def unsupported(where: str, model_type: Any) -> SpecError:
    what = f"model_type {model_type!r} is not supported" if model_type is not None else "config has no model_type"
    return SpecError(
        f"{where}: {what}; supported: {', '.join(supported_model_types())}; or describe the model as a "
        f"preset TOML (TransformerSpec fields: copy {preset_example()}) and pass its path to --model"
    )


def load_hf_config(path: Path) -> TransformerSpec:
    cfg = load_json(path, "model config")
    if not isinstance(cfg, dict):
        raise SpecError(f"{path} is not a Hugging Face config (expected a JSON object)")
    return spec_from_hf_dict(cfg, name=_model_name(cfg, Path(path)), source=str(path))


def _model_name(cfg: dict, path: Path) -> str:
    """The model's own name when its config records one (`_name_or_path`, as save_pretrained
    writes it: "Qwen/Qwen2.5-7B" names it Qwen2.5-7B), else its folder's name, as written (any
    script); a bare config.json in the working folder takes that folder's name. A folder whose
    name says nothing (GENERIC_FOLDERS: hf, model, checkpoint, ...) gives way to the config's own
    model_type and shape (`llama-32x4096`)."""
    recorded = cfg.get("_name_or_path")
    if isinstance(recorded, str) and recorded.strip("/ "):
        return recorded.rstrip("/").rsplit("/", 1)[-1]
    folder = path.absolute().parent.name
    if folder and folder.lower() not in GENERIC_FOLDERS:
        return folder
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    kind, layers, hidden = (text.get(k) for k in ("model_type", "num_hidden_layers", "hidden_size"))
    if isinstance(kind, str) and isinstance(layers, int) and isinstance(hidden, int):
        return f"{kind}-{layers}x{hidden}"  # the config's own shape, not a folder that names nothing
    return folder or path.stem


GENERIC_FOLDERS = frozenset(
    {
        "hf",
        "model",
        "models",
        "config",
        "configs",
        "checkpoint",
        "checkpoints",
        "ckpt",
        "assets",
        "weights",
        "pretrained",
        "base",
        "output",
        "outputs",
        "tmp",
        ".",
    }
)
"""Folder names that say nothing about the model (torchtitan's assets/hf/, a run's checkpoint/)."""


def spec_from_hf_dict(cfg: dict, *, name: str, source: str = "") -> TransformerSpec:
    mt = cfg.get("model_type")
    where = source or name
    if mt is not None and not isinstance(mt, str):
        raise SpecError(
            f'{where}: model_type must be a string such as "llama", got a {type(mt).__name__}; '
            "fix the config.json (transformers writes one name)"
        )
    if mt in ("siglip", "siglip2", "clip") and isinstance(cfg.get("vision_config"), dict):
        cfg, mt = cfg["vision_config"], f"{mt}_vision_model"
    if mt in _TEXT_WRAPPERS and isinstance(cfg.get("text_config"), dict):
        cfg, mt = cfg["text_config"], _TEXT_WRAPPERS[mt]
    if mt in _VISION_TYPES:
        return _vision_spec(cfg, name=name, source=source, model_type=mt)
    if not isinstance(mt, str) or mt not in DECODERS:
        raise unsupported(where, mt)
    return TransformerSpec(
        name=name,
        kind="decoder",
        hf_model_type=mt,
        source=source or f"config.json ({mt})",
        **read_family(cfg, mt, where),
    )


def _vision_spec(cfg: dict, *, name: str, source: str, model_type: str) -> TransformerSpec:
    c = Config(cfg, source or name)
    hidden, heads = c.int("hidden_size", 768), c.int("num_attention_heads", 12)
    clip = model_type.startswith("clip")
    family = (
        dict(hf_model_type="clip_vision_model", cls_token=True, patch_bias=False, pre_norm=True)
        if clip
        else dict(hf_model_type="siglip_vision_model", pooling_head=c.bool("vision_use_head", True))
    )
    return TransformerSpec(
        name=name,
        kind="vision",
        source=source or model_type,
        layers=c.layers(12),
        hidden=hidden,
        heads=heads,
        kv_heads=heads,
        head_dim=c.head_dim(hidden, heads, honoured=False),
        ffn=c.int("intermediate_size", 3072),
        qkv_bias=True,
        o_bias=True,
        mlp_bias=True,
        mlp="gelu",
        norm="layernorm",
        image_size=c.int("image_size", 224),
        patch_size=c.int("patch_size", 32 if clip else 16),
        channels=c.int("num_channels", 3),
        **family,
    )


def to_hf_config(spec: TransformerSpec):
    """The transformers config object for this spec (needs transformers)."""
    import transformers

    if spec.kind == "vision":
        cls = (
            transformers.CLIPVisionConfig
            if spec.hf_model_type == "clip_vision_model"
            else transformers.SiglipVisionConfig
        )
        extra = {} if spec.hf_model_type == "clip_vision_model" else {"vision_use_head": spec.pooling_head}
        return cls(
            hidden_size=spec.hidden,
            intermediate_size=spec.ffn,
            num_hidden_layers=spec.layers,
            num_attention_heads=spec.heads,
            num_channels=spec.channels,
            image_size=spec.image_size,
            patch_size=spec.patch_size,
            **extra,
        )
    cls = transformers.AutoConfig.for_model(spec.hf_model_type).__class__
    return cls(**hf_kwargs(spec))


def build_hf_model(spec: TransformerSpec):
    """The real transformers model for this spec, on the current default device."""
    import transformers

    cfg = to_hf_config(spec)
    if spec.kind == "vision":
        cls = (
            transformers.CLIPVisionModel
            if spec.hf_model_type == "clip_vision_model"
            else transformers.SiglipVisionModel
        )
        return cls(cfg)
    return transformers.AutoModelForCausalLM.from_config(cfg)


def build_meta_model(spec: TransformerSpec):
    """The real transformers model for this spec, on the meta device (no memory, no download)."""
    import torch

    with torch.device("meta"):
        return build_hf_model(spec)

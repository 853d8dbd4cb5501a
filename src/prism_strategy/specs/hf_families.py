"""What each Hugging Face model family builds, read from transformers 5's modelling code
(transformers/models/<family>/modeling_*.py and configuration_*.py), family by family:
`read_family` turns a config.json dict into TransformerSpec fields, `hf_kwargs` the spec back
into that family's config arguments. Defaults are the config classes' own (a config.json omits
what equals them); tests check both directions against models built on the meta device.

Facts per family (the source is the modelling file named):
- llama, mistral, qwen2, qwen3, olmo, olmo2, olmo3: q/k/v/o + gated MLP; Mistral hard-codes
  no biases; Qwen2 biases q/k/v only; Qwen3 RMS-norms q and k per head; OLMo's LayerNorm has
  no parameters; OLMo-2/3 norm q and k over their full width.
- gpt2: Conv1D c_attn (fused q|k|v) and c_proj with biases, GELU MLP c_fc/c_proj (n_inner,
  default 4 x hidden), LayerNorm with bias, a learned position table wpe (n_positions rows),
  LM head tied by default.
- gpt_neox (Pythia): fused query_key_value and dense with biases (attention_bias), GELU MLP
  with biases, LayerNorm; use_parallel_residual changes the dataflow, not the parameters.
- gemma2, gemma3_text: four RMSNorms per block (input, post-attention, pre- and post-MLP),
  gated GELU MLP, head_dim 256 by default, tied embeddings; Gemma 3 adds per-head q/k norms;
  the embedding is scaled by sqrt(hidden) (a buffer, no parameter); sliding-window layers
  change attention's reach, not the parameters.
- phi3: fused qkv_proj and gate_up_proj, no biases.
- starcoder2: LayerNorm with bias, GELU MLP c_fc/c_proj, biases everywhere (use_bias).
- mixtral, qwen2_moe, qwen3_moe, olmoe: a router Linear(hidden, E) without bias and E experts
  stored as two 3-D tensors (gate_up_proj [E, 2I, H], down_proj [E, H, I]); Qwen2-MoE adds a
  shared expert (gated MLP) with a sigmoid gate Linear(hidden, 1); in the Qwen MoEs a block is
  dense (intermediate_size) when its index is in mlp_only_layers or (index + 1) is not a
  multiple of decoder_sparse_step; OLMoE norms q and k over their full width.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.model import MAX_LAYERS

MAX_SIZE = 2**40
"""Largest layer count / width / vocabulary taken as real (larger is a mangled config)."""


class Config:
    """A config.json dict read with one family's defaults, every size checked."""

    def __init__(
        self, cfg: dict, where: str, defaults: dict[str, Any] | None = None, aliases: dict[str, str] | None = None
    ) -> None:
        self.cfg = {(aliases or {}).get(k, k): v for k, v in cfg.items()}
        self.where, self.defaults = where, defaults or {}

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def int(self, key: str, default: Any = None, minimum: int = 1) -> int:
        v = self.cfg.get(key)
        if v is None:
            v = self.defaults.get(key, default)
        if v is None:
            raise SpecError(f"{self.where}: config has no {key!r}; is this a transformer config.json?")
        if isinstance(v, bool) or not isinstance(v, int):
            raise SpecError(f"{self.where}: {key} must be an integer, got {v!r}")
        if not minimum <= v <= MAX_SIZE:
            raise SpecError(f"{self.where}: {key} must be between {minimum} and {MAX_SIZE}, got {v}")
        return v

    def layers(self, default: Any = None) -> int:
        """num_hidden_layers, at most MAX_LAYERS (more than any real model has)."""
        v = self.cfg.get("num_hidden_layers")
        if isinstance(v, int) and not isinstance(v, bool) and v > MAX_LAYERS:
            raise SpecError(
                f"{self.where}: num_hidden_layers {v:,} is more than any real model has (at most {MAX_LAYERS:,} "
                "taken, docs/model.md); check the config's layer count"
            )
        return self.int("num_hidden_layers", default)

    def bool(self, key: str, default: bool = False) -> bool:
        v = self.cfg.get(key)
        v = self.defaults.get(key, default) if v is None else v
        if not isinstance(v, bool):
            raise SpecError(f"{self.where}: {key} must be true or false, got {v!r}")
        return v

    def head_dim(self, hidden: int, heads: int, honoured: bool = True) -> int:
        """The family's head_dim: the config's (when the modelling code reads it), else its class
        default, else hidden / heads."""
        if honoured and (self.has("head_dim") or self.defaults.get("head_dim")):
            return self.int("head_dim")
        if hidden % heads:
            raise SpecError(
                f"{self.where}: hidden_size {hidden} is not a multiple of num_attention_heads {heads}; "
                "give head_dim in the config"
            )
        return hidden // heads


def _sizes(c: Config, honours_head_dim: bool = True) -> dict[str, Any]:
    hidden, heads = c.int("hidden_size"), c.int("num_attention_heads")
    return dict(
        layers=c.layers(),
        hidden=hidden,
        heads=heads,
        kv_heads=c.int("num_key_value_heads", heads),
        head_dim=c.head_dim(hidden, heads, honours_head_dim),
        ffn=c.int("intermediate_size"),
        vocab=c.int("vocab_size"),
        max_positions=c.int("max_position_embeddings"),
        tied_embeddings=c.bool("tie_word_embeddings"),
    )


def _dense_layers(c: Config, layers: int) -> int:
    """Qwen MoE blocks that stay dense: in mlp_only_layers, or (i + 1) not a multiple of the step.
    Counted without a loop over the layers: the non-multiples, plus the listed multiples."""
    step, only = c.int("decoder_sparse_step", 1), c.cfg.get("mlp_only_layers") or []
    if not isinstance(only, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in only):
        raise SpecError(f"{c.where}: mlp_only_layers must be a list of layer indices, got {only!r}")
    listed_sparse = {i for i in only if 0 <= i < layers and (i + 1) % step == 0}
    return layers - layers // step + len(listed_sparse)


def _moe(c: Config, layers: int, experts_key: str, ffn_key: str, sparse_step: bool = False) -> dict[str, Any]:
    """MoE fields; none when no block is sparse (no experts, or every block dense)."""
    e = c.int(experts_key, minimum=0)
    dense = _dense_layers(c, layers) if sparse_step else 0
    if e == 0 or dense == layers:
        return {}
    k = c.int("num_experts_per_tok")
    if k > e:
        raise SpecError(f"{c.where}: num_experts_per_tok {k} is more than the {e} experts")
    return dict(experts=e, experts_per_token=k, expert_ffn=c.int(ffn_key), dense_layers=dense)


def _llama(c: Config) -> dict[str, Any]:
    b = c.bool("attention_bias")
    return dict(qkv_bias=b, o_bias=b, mlp_bias=c.bool("mlp_bias"))


def _attention_bias(c: Config) -> dict[str, Any]:
    b = c.bool("attention_bias")
    return dict(qkv_bias=b, o_bias=b)


def _qwen2_moe(c: Config, layers: int) -> dict[str, Any]:
    moe = _moe(c, layers, "num_experts", "moe_intermediate_size", sparse_step=True)
    if moe:
        moe |= dict(shared_expert_ffn=c.int("shared_expert_intermediate_size", minimum=0), shared_expert_gate=True)
    return dict(qkv_bias=c.bool("qkv_bias", True), **moe)


def _qwen3_moe(c: Config, layers: int) -> dict[str, Any]:
    return dict(
        qk_norm="per_head",
        **_attention_bias(c),
        **_moe(c, layers, "num_experts", "moe_intermediate_size", sparse_step=True),
    )


def _gpt2(c: Config) -> dict[str, Any]:
    if c.bool("add_cross_attention"):
        raise SpecError(
            f"{c.where}: add_cross_attention is set: a GPT-2 with cross-attention is not a causal LM this tool plans"
        )
    return dict(
        norm="layernorm",
        mlp="gelu",
        qkv_bias=True,
        o_bias=True,
        mlp_bias=True,
        fused_qkv=True,
        position_embeddings=c.int("max_position_embeddings"),
    )


_RMS = dict(norm="rmsnorm")
_GEMMA = dict(norm="rmsnorm", block_norms=4)

Reader = Callable[[Config, int], dict[str, Any]]
# model_type -> (config-class defaults, head_dim honoured, family fields)
DECODERS: dict[str, tuple[dict[str, Any], bool, Reader]] = {
    "llama": ({}, True, lambda c, n: _RMS | _llama(c)),
    "mistral": ({"num_key_value_heads": 8}, True, lambda c, n: dict(_RMS)),
    "qwen2": ({"num_key_value_heads": 32}, True, lambda c, n: _RMS | dict(qkv_bias=True)),
    "qwen3": (
        {"num_key_value_heads": 32, "head_dim": 128},
        True,
        lambda c, n: _RMS | dict(qk_norm="per_head") | _attention_bias(c),
    ),
    "olmo": ({}, True, lambda c, n: dict(norm="layernorm_noparam") | _attention_bias(c)),
    "olmo2": ({}, True, lambda c, n: _RMS | dict(qk_norm="full") | _attention_bias(c)),
    "olmo3": ({}, True, lambda c, n: _RMS | dict(qk_norm="full") | _attention_bias(c)),
    "gpt2": ({"tie_word_embeddings": True}, False, lambda c, n: _gpt2(c)),
    "gpt_neox": (
        {},
        False,
        lambda c, n: dict(
            norm="layernorm",
            mlp="gelu",
            fused_qkv=True,
            mlp_bias=True,
            qkv_bias=c.bool("attention_bias", True),
            o_bias=c.bool("attention_bias", True),
        ),
    ),
    "gemma2": (
        {"num_key_value_heads": 4, "head_dim": 256, "tie_word_embeddings": True},
        True,
        lambda c, n: _GEMMA | _attention_bias(c),
    ),
    "gemma3_text": (
        {"num_key_value_heads": 4, "head_dim": 256, "tie_word_embeddings": True},
        True,
        lambda c, n: _GEMMA | dict(qk_norm="per_head") | _attention_bias(c),
    ),
    "phi3": ({}, True, lambda c, n: _RMS | dict(fused_qkv=True, fused_gate_up=True)),
    "starcoder2": (
        {"num_key_value_heads": 2, "tie_word_embeddings": True},
        True,
        lambda c, n: dict(
            norm="layernorm",
            mlp="gelu",
            qkv_bias=c.bool("use_bias", True),
            o_bias=c.bool("use_bias", True),
            mlp_bias=c.bool("use_bias", True),
        ),
    ),
    "mixtral": (
        {"num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2},
        True,
        lambda c, n: _RMS | _moe(c, n, "num_local_experts", "intermediate_size"),
    ),
    "qwen2_moe": (
        {
            "num_key_value_heads": 16,
            "num_experts": 60,
            "num_experts_per_tok": 4,
            "moe_intermediate_size": 1408,
            "shared_expert_intermediate_size": 5632,
        },
        True,
        lambda c, n: _RMS | _qwen2_moe(c, n),
    ),
    "qwen3_moe": (
        {"num_key_value_heads": 4, "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768},
        True,
        lambda c, n: _RMS | _qwen3_moe(c, n),
    ),
    "olmoe": (
        {"num_experts": 64, "num_experts_per_tok": 8},
        True,
        lambda c, n: _RMS | dict(qk_norm="full") | _attention_bias(c) | _moe(c, n, "num_experts", "intermediate_size"),
    ),
}
ALIASES = {
    "gpt2": {
        "n_embd": "hidden_size",
        "n_layer": "num_hidden_layers",
        "n_head": "num_attention_heads",
        "n_positions": "max_position_embeddings",
        "n_inner": "intermediate_size",
    },
    "mixtral": {"num_experts": "num_local_experts"},
    "qwen3_moe": {"num_local_experts": "num_experts"},
    "olmoe": {"num_local_experts": "num_experts"},
}


SLIDING_PATTERN = {"gemma2": 2, "gemma3_text": 6}
"""Without layer_types, layer i slides when (i + 1) % pattern != 0 (Gemma2Config / Gemma3TextConfig
__post_init__; Gemma 3's sliding_window_pattern); the Mistral-like families slide on every layer
when sliding_window is set (their masks: create_sliding_window_causal_mask)."""
SLIDING_DEFAULT = {"gemma2": 4096, "gemma3_text": 4096}


def _sliding(c: Config, model_type: str, layers: int) -> dict[str, Any]:
    types = c.cfg.get("layer_types")
    window = c.cfg.get("sliding_window", SLIDING_DEFAULT.get(model_type))
    if isinstance(types, list) and len(types) == layers:
        n = sum(t == "sliding_attention" for t in types)
    elif model_type in SLIDING_PATTERN:
        pattern = c.int("sliding_window_pattern", SLIDING_PATTERN[model_type])
        n = layers - layers // pattern  # the i with (i + 1) % pattern != 0
    elif model_type in ("mistral", "mixtral", "starcoder2", "phi3"):
        n = layers
    else:
        n = 0  # the Qwen families slide only with use_sliding_window, above max_window_layers: not read
    if not n or window is None:
        return {}
    return dict(sliding_window=c.int("sliding_window", window), sliding_layers=n)


SECONDARY = {  # (num_attention_heads, vocab_size, max_position_embeddings) of each config class
    "llama": (32, 32000, 2048),
    "mistral": (32, 32000, 131072),
    "qwen2": (32, 151936, 32768),
    "qwen3": (32, 151936, 32768),
    "olmo": (32, 50304, 2048),
    "olmo2": (32, 50304, 2048),
    "olmo3": (32, 50304, 2048),
    "gpt2": (12, 50257, 1024),
    "gpt_neox": (64, 50432, 2048),
    "gemma2": (8, 256000, 8192),
    "gemma3_text": (8, 262208, 131072),
    "phi3": (32, 32064, 4096),
    "starcoder2": (24, 49152, 4096),
    "mixtral": (32, 32000, 131072),
    "qwen2_moe": (16, 151936, 32768),
    "qwen3_moe": (32, 151936, 32768),
    "olmoe": (16, 50304, 4096),
}
"""Defaults a config.json may lean on (Gemma 3's text_config omits its 8 heads and its vocabulary);
hidden_size, num_hidden_layers and intermediate_size stay required (a config without them is not
one of these models)."""


def read_family(cfg: dict, model_type: str, where: str) -> dict[str, Any]:
    """TransformerSpec fields of a decoder config.json of a known family."""
    defaults, honours_head_dim, reader = DECODERS[model_type]
    defaults = (
        dict(zip(("num_attention_heads", "vocab_size", "max_position_embeddings"), SECONDARY[model_type])) | defaults
    )
    c = Config(cfg, where, defaults, ALIASES.get(model_type))
    if model_type == "gpt2":
        c.defaults |= {"intermediate_size": 4 * c.int("hidden_size")}
    sizes = _sizes(c, honours_head_dim)
    return sizes | reader(c, sizes["layers"]) | _sliding(c, model_type, sizes["layers"])


def hf_kwargs(spec: Any) -> dict[str, Any]:
    """The family's config arguments that rebuild this spec (the inverse of read_family)."""
    mt = spec.hf_model_type
    if mt not in DECODERS:
        raise SpecError(
            f"model {spec.name!r}: hf_model_type {mt!r} is not a family this tool builds with transformers "
            f"({', '.join(DECODERS)}); plan works from the preset alone, --traced and bench need one of these"
        )
    kw: dict[str, Any] = dict(
        vocab_size=spec.vocab,
        hidden_size=spec.hidden,
        intermediate_size=spec.ffn,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=spec.tied_embeddings,
        pad_token_id=None,
    )  # a class default may lie outside a small vocab
    if DECODERS[mt][1] and (spec.head_dim != spec.hidden // spec.heads or DECODERS[mt][0].get("head_dim")):
        kw["head_dim"] = spec.head_dim
    if mt in ("llama", "qwen3", "olmo", "olmo2", "olmo3", "gemma2", "gemma3_text", "gpt_neox", "qwen3_moe", "olmoe"):
        kw["attention_bias"] = spec.qkv_bias
    if mt == "llama":
        kw["mlp_bias"] = spec.mlp_bias
    if mt == "starcoder2":
        kw["use_bias"] = spec.qkv_bias
    if mt == "gpt2":
        kw = dict(
            vocab_size=spec.vocab,
            n_embd=spec.hidden,
            n_layer=spec.layers,
            n_head=spec.heads,
            n_positions=spec.position_embeddings,
            n_inner=spec.ffn,
            tie_word_embeddings=spec.tied_embeddings,
            pad_token_id=None,
        )
    if mt in ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe"):
        kw["num_local_experts" if mt == "mixtral" else "num_experts"] = spec.experts
        if spec.moe:
            kw["num_experts_per_tok"] = spec.experts_per_token
    if mt in ("qwen2_moe", "qwen3_moe") and spec.moe:
        kw |= dict(
            moe_intermediate_size=spec.expert_ffn, decoder_sparse_step=1, mlp_only_layers=list(range(spec.dense_layers))
        )
    if mt == "qwen2_moe":
        kw["qkv_bias"] = spec.qkv_bias
        if spec.moe:
            kw["shared_expert_intermediate_size"] = spec.shared_expert_ffn
    return kw

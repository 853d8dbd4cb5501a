"""Every supported family read from a config.json counts exactly the parameters transformers
builds for it on the meta device: small configs built from the Config classes (their full dict
and the diff dict, which leaves out what equals the class defaults) and the published shapes in
tests/fixtures/hf/*/config.json. The tensor lists (what the engines shard and bucket) match too."""

import json
from pathlib import Path

import pytest

from prism_strategy.specs import SpecError, load_model
from prism_strategy.specs.hf import build_meta_model, spec_from_hf_dict, supported_model_types
from prism_strategy.specs.parts import transformer_tensors

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

FIXTURES = Path(__file__).parents[2] / "fixtures" / "hf"
H, L, V = dict(hidden_size=64, num_attention_heads=4), dict(num_hidden_layers=3), dict(vocab_size=101)
MOE = dict(num_experts=6, num_experts_per_tok=2, moe_intermediate_size=48)
SMALL = {  # sizes away from every class default, so the diff dict exercises the loader's defaults
    "llama": H | L | V | dict(num_key_value_heads=2, intermediate_size=200, attention_bias=True, mlp_bias=True),
    "qwen3": H | L | V | dict(num_key_value_heads=2, intermediate_size=200),
    "gpt2": dict(n_embd=64, n_layer=3, n_head=4, vocab_size=101, n_positions=77),
    "gpt_neox": H | L | V | dict(intermediate_size=200, max_position_embeddings=99),
    "gemma2": H | L | V | dict(num_key_value_heads=2, head_dim=24, intermediate_size=200),
    "gemma3_text": H
    | L
    | V
    | dict(num_key_value_heads=2, head_dim=24, intermediate_size=200, tie_word_embeddings=False),
    "phi3": H | L | V | dict(num_key_value_heads=2, intermediate_size=200, pad_token_id=None),
    "mistral": H | L | V | dict(num_key_value_heads=2, intermediate_size=200),
    "mixtral": H
    | L
    | V
    | dict(num_key_value_heads=2, intermediate_size=48, num_local_experts=5, num_experts_per_tok=2),
    "qwen2_moe": H
    | V
    | MOE
    | dict(
        num_hidden_layers=4,
        num_key_value_heads=2,
        intermediate_size=200,
        shared_expert_intermediate_size=96,
        decoder_sparse_step=2,
        mlp_only_layers=[3],
    ),
    "qwen3_moe": H
    | V
    | MOE
    | dict(num_hidden_layers=4, num_key_value_heads=2, head_dim=32, intermediate_size=200, mlp_only_layers=[0]),
    "olmoe": H | L | V | dict(num_key_value_heads=2, intermediate_size=48, num_experts=6, num_experts_per_tok=2),
    "starcoder2": H | L | V | dict(num_key_value_heads=2, intermediate_size=200),
}
PUBLISHED = {  # model card totals (safetensors metadata) agree with the meta-device counts
    "gpt2": 124_439_808,
    "pythia-1b": 1_011_781_632,
    "gemma-2-9b": 9_241_705_984,
    "gemma-3-1b": 999_885_952,
    "phi-3-mini-4k": 3_821_079_552,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    "qwen1.5-moe-a2.7b": 14_315_784_192,
    "qwen3-30b-a3b": 30_532_122_624,
    "olmoe-1b-7b": 6_919_161_856,
    "starcoder2-7b": 7_173_923_840,
    "clip-vit-large-patch14-336": 303_507_456,
}


def unique_params(model) -> list:
    return list({id(p): p for p in model.parameters()}.values())


def meta_causal_lm(cfg):
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(cfg)


def spec_tensors(spec) -> list[int]:
    mods = spec.embed_modules() + [m for b in spec.stack for m in b] + spec.head_modules()
    return sorted(n for m in mods for n, _ in m)


@pytest.mark.parametrize("model_type", sorted(SMALL))
def test_small_config_counts_equal_transformers_meta_model(model_type):
    cfg = transformers.AutoConfig.for_model(model_type, **SMALL[model_type])
    params = unique_params(meta_causal_lm(cfg))
    for d in (cfg.to_dict(), cfg.to_diff_dict()):
        spec = spec_from_hf_dict(d, name=model_type)
        assert spec.total_params == sum(p.numel() for p in params)
        assert spec_tensors(spec) == sorted(p.numel() for p in params)
        assert transformer_tensors(spec) == len(params)
    rebuilt = unique_params(build_meta_model(spec))  # the spec back to transformers (traced, bench)
    assert sorted(p.numel() for p in rebuilt) == sorted(p.numel() for p in params)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_shape_counts_equal_transformers_meta_model(name):
    path = FIXTURES / name / "config.json"
    d = json.loads(path.read_text())
    if d["model_type"] == "clip":
        with torch.device("meta"):
            model = transformers.CLIPVisionModel(transformers.CLIPVisionConfig(**d["vision_config"]))
    else:
        model = meta_causal_lm(transformers.AutoConfig.for_model(**d))
    spec = load_model(str(path))
    assert spec.total_params == sum(p.numel() for p in unique_params(model)) == PUBLISHED[name]
    assert spec_tensors(spec) == sorted(p.numel() for p in unique_params(model))


def test_moe_split_by_hand():
    # Mixtral-8x7B per block: attention 4096*(4096 + 2*1024 + 4096), router 8*4096, experts 3*4096*14336 each
    spec = load_model(str(FIXTURES / "mixtral-8x7b" / "config.json"))
    attn, expert = 4096 * (4096 + 2 * 1024 + 4096), 3 * 4096 * 14336
    assert spec.block_matmul_params == attn + 8 * 4096  # autocast casts no expert (grouped_mm is not autocast-enabled)
    assert spec.active_matmul_params == attn + 8 * 4096 + 2 * expert
    assert spec.active_ffn == 2 * 14336


def test_qwen_moe_dense_layers_from_sparse_step_and_mlp_only_layers():
    spec = spec_from_hf_dict(transformers.Qwen2MoeConfig(**SMALL["qwen2_moe"]).to_diff_dict(), name="q")
    assert (spec.moe_layers, spec.dense_layers) == (1, 3)  # sparse at i=1 (step 2, i=3 listed dense)
    assert spec.block_params == max(sum(n for m in b for n, _ in m) for b in spec.stack)


def test_gemma3_multimodal_config_reads_its_text_part():
    text = json.loads((FIXTURES / "gemma-3-1b" / "config.json").read_text())
    spec = spec_from_hf_dict({"model_type": "gemma3", "text_config": text, "vision_config": {}}, name="g")
    assert spec.hf_model_type == "gemma3_text" and spec.total_params == PUBLISHED["gemma-3-1b"]


def test_clip_encoder_tokens_and_llava_image_tokens():
    spec = load_model(str(FIXTURES / "clip-vit-large-patch14-336" / "config.json"))
    assert spec.kind == "vision" and spec.num_patches == 576 and spec.positions == 577  # + the class token


@pytest.mark.parametrize("text", ['{"model_type": "bert", "hidden_size": 8}', '{"hidden_size": 8}'])
def test_unsupported_family_names_the_supported_ones_and_the_preset_route(tmp_path, text):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(SpecError) as e:
        load_model(str(path))
    msg = str(e.value)
    assert "\n" not in msg and all(mt in msg for mt in supported_model_types())
    assert "preset TOML" in msg and "data/models/llama-2-7b.toml" in msg
    from prism_strategy.specs.presets import DATA

    assert (DATA / "models" / "llama-2-7b.toml").is_file()  # the example it points to exists


def test_gpt2_cross_attention_refused():
    with pytest.raises(SpecError, match="cross-attention"):
        spec_from_hf_dict({"model_type": "gpt2", "add_cross_attention": True} | SMALL["gpt2"], name="g")


def test_vision_image_smaller_than_a_patch_refused():
    with pytest.raises(SpecError, match="no patch fits"):
        spec_from_hf_dict({"model_type": "clip", "vision_config": {"image_size": 4, "patch_size": 14}}, name="c")


@pytest.mark.parametrize("name", ["gemma-2-9b", "mixtral-8x7b", "qwen3-30b-a3b", "clip-vit-large-patch14-336"])
def test_family_presets_equal_their_config_and_transformers(name):
    from prism_strategy.specs import model_names

    assert name in model_names()
    preset, config = load_model(name), load_model(str(FIXTURES / name / "config.json"))
    assert preset.total_params == config.total_params == PUBLISHED[name]
    assert sum(p.numel() for p in unique_params(build_meta_model(preset))) == PUBLISHED[name]


@pytest.mark.parametrize("model_type", sorted(SMALL) + ["clip"])
def test_blocks_the_runtime_wraps_hold_the_spec_blocks(model_type):
    """FSDP2 units: runtime/blocks.find_blocks on the real model gives the blocks (and, for CLIP, the
    embeddings) the engines' model shards, each with the spec's parameters; the rest is the root."""
    from prism_strategy.engines.base import part_modules
    from prism_strategy.runtime.blocks import find_blocks
    from prism_strategy.specs.parts import Part

    if model_type == "clip":
        d = json.loads((FIXTURES / "clip-vit-large-patch14-336" / "config.json").read_text())
        cfg = transformers.CLIPVisionConfig(**(d["vision_config"] | {"num_hidden_layers": 2}))
        with torch.device("meta"):
            model = transformers.CLIPVisionModel(cfg)
        spec = spec_from_hf_dict(cfg.to_dict(), name="clip")
    else:
        cfg = transformers.AutoConfig.for_model(model_type, **SMALL[model_type])
        model, spec = meta_causal_lm(cfg), spec_from_hf_dict(cfg.to_dict(), name=model_type)
    real = [sum(p.numel() for p in b.module.parameters()) for b in find_blocks(model)]
    pm = part_modules(
        Part(name="m", spec=spec, params=spec.total_params, trains=True, backward=True, tokens=1, tensors=0)
    )
    units = ([pm.embed] if pm.embed_unit else []) + pm.blocks
    spec_units = [sum(n for m in u for n, _ in m) for u in units]
    assert sorted(real) == sorted(spec_units)  # the spec keeps an MoE's dense-block count, not their positions
    assert real == spec_units or spec.dense_layers
    assert sum(p.numel() for p in unique_params(model)) - sum(real) == (
        spec.root_params if not pm.embed_unit else spec.root_params - spec.embed_params
    )


def test_gemma3_text_config_leaning_on_class_defaults():
    # Gemma 3 4B's text_config names only what differs from Gemma3TextConfig (no heads, kv heads,
    # head_dim or vocabulary): the class's 8 heads, 4 kv heads, head_dim 256 and 262,208 tokens apply
    text = {
        "model_type": "gemma3_text",
        "hidden_size": 2560,
        "intermediate_size": 10240,
        "num_hidden_layers": 34,
        "sliding_window": 1024,
    }
    spec = spec_from_hf_dict({"model_type": "gemma3", "text_config": text}, name="g")
    model = meta_causal_lm(transformers.Gemma3TextConfig(**{k: v for k, v in text.items() if k != "model_type"}))
    assert (spec.heads, spec.kv_heads, spec.head_dim, spec.vocab) == (8, 4, 256, 262208)
    assert spec.total_params == sum(p.numel() for p in unique_params(model))


def test_preset_of_an_unbuildable_family_is_one_clear_error():
    from prism_strategy.specs.hf import to_hf_config
    from prism_strategy.specs.model import TransformerSpec

    spec = TransformerSpec(
        name="mine",
        hf_model_type="mamba",
        layers=2,
        hidden=8,
        heads=2,
        kv_heads=2,
        head_dim=4,
        ffn=16,
        vocab=10,
        max_positions=32,
    )
    assert spec.total_params > 0  # planning needs no transformers family
    with pytest.raises(SpecError, match="--traced and bench need one of these"):
        to_hf_config(spec)

"""Model, training and platform specs: exact parameter counts, loaders, validation."""

import json

import pytest

from prism_strategy.specs import (
    Layout,
    MultimodalSpec,
    SpecError,
    TrainingSpec,
    TransformerSpec,
    load_model,
    load_platform,
    model_names,
    platform_names,
)
from prism_strategy.specs.hf import spec_from_hf_dict

REQUIRED_MODELS = {
    "olmo-1b",
    "olmo-7b",
    "olmo-3-7b",
    "qwen3-0.6b",
    "qwen3-1.7b",
    "qwen3-4b",
    "qwen3-8b",
    "llama-2-7b",
    "auroragpt-2b",
    "siglip2-base-patch16-224",
    "siglip2-so400m-patch14-384",
    # PRISM's production encoders (issue 34; huggingface/transformers@f9dc3e13 convert_siglip2_to_hf.py)
    "siglip2-base-patch16-256",
    "siglip2-large-patch16-256",
    "siglip2-so400m-patch16-256",
    "siglip2-giant-opt-patch16-256",
}
REQUIRED_PLATFORMS = {"aurora", "aurora-composite", "polaris", "dgx-h100", "dgx-h200", "cpu"}


def tiny(**kw) -> TransformerSpec:
    base = dict(name="tiny", layers=2, hidden=8, heads=2, kv_heads=1, head_dim=4, ffn=16, vocab=10, max_positions=32)
    return TransformerSpec(**{**base, **kw})


def test_presets_present():
    assert REQUIRED_MODELS <= set(model_names())
    assert REQUIRED_PLATFORMS <= set(platform_names())


def test_tiny_llama_count_by_hand():
    # embed 10*8; block: q 8*8, k 8*4, v 8*4, o 8*8, mlp 3*8*16, 2 rmsnorm 8; final norm 8; untied head 10*8
    block = 64 + 32 + 32 + 64 + 384 + 16
    assert tiny().total_params == 80 + 2 * block + 8 + 80
    assert tiny(tied_embeddings=True).total_params == 80 + 2 * block + 8


def test_variants_by_hand():
    assert tiny(qk_norm="per_head").block_params - tiny().block_params == 2 * 4
    assert tiny(qk_norm="full").block_params - tiny().block_params == 8 + 4
    assert tiny(qkv_bias=True, o_bias=True).block_params - tiny().block_params == 8 + 4 + 4 + 8
    assert tiny(norm="layernorm_noparam").block_params - tiny().block_params == -16
    assert tiny(norm="layernorm").block_params - tiny().block_params == 16


def test_auroragpt_2b_architecture():
    m = load_model("auroragpt-2b")
    assert (m.hidden, m.layers, m.heads, m.kv_heads, m.ffn, m.vocab, m.tied_embeddings) == (
        2048,
        12,
        16,
        4,
        11008,
        256128,
        False,
    )


def test_known_published_sizes():
    # Published totals (model cards): Qwen3-0.6B 0.60B with tied embeddings, Llama-2-7B 6.74B.
    assert round(load_model("qwen3-0.6b").total_params / 1e9, 2) == 0.60
    assert load_model("llama-2-7b").total_params == 6_738_415_616


@pytest.mark.parametrize("name", sorted(REQUIRED_MODELS))
def test_param_count_equals_transformers_meta_model(name):
    pytest.importorskip("transformers")
    from prism_strategy.specs.hf import build_meta_model

    spec = load_model(name)
    model = build_meta_model(spec)
    assert sum(p.numel() for p in model.parameters()) == spec.total_params


def test_hf_config_roundtrip(tmp_path):
    cfg = {
        "model_type": "qwen3",
        "hidden_size": 1024,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 3072,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "max_position_embeddings": 40960,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    spec = load_model(str(path))
    assert spec.total_params == load_model("qwen3-0.6b").total_params
    assert load_model(str(tmp_path)).total_params == spec.total_params


def test_siglip_full_config_reads_vision_part():
    spec = spec_from_hf_dict(
        {
            "model_type": "siglip",
            "vision_config": {"hidden_size": 768, "image_size": 224, "patch_size": 16, "vision_use_head": False},
        },
        name="s",
    )
    assert spec.kind == "vision" and spec.num_patches == 196
    assert spec.total_params == load_model("siglip2-base-patch16-224").total_params


@pytest.mark.parametrize(
    "text, match",
    [
        ("{not json", "not valid JSON"),
        ('{"model_type": "bert"}', "not supported"),
        ('{"model_type": "llama", "hidden_size": "big"}', "must be an integer"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_bad_config_json(tmp_path, text, match):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(SpecError, match=match):
        load_model(str(path))


def test_unknown_model_lists_presets():
    with pytest.raises(SpecError, match="qwen3-0.6b"):
        load_model("gpt-17")


def test_malformed_platform_toml(tmp_path):
    bad = tmp_path / "p.toml"
    bad.write_text("name = 'x'\ndevices_per_node = [")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_platform(str(bad))
    bad.write_text("name = 'x'\nbase = 'dgx-a100-40'\ndevice = 'tpu'\n")
    with pytest.raises(SpecError, match="field device"):
        load_platform(str(bad))


def test_user_platform_file(tmp_path):
    from prism_strategy.specs.presets import DATA  # a user copies a preset and edits it

    text = (DATA / "platforms" / "polaris.toml").read_text().replace('name = "polaris"', 'name = "mine"')
    text = text.replace("memory_gib = 40.0", "memory_gib = 80.0")
    f = tmp_path / "mine.toml"
    f.write_text(text)
    assert load_platform(str(f)).hardware.memory_gib == 80.0


def test_multimodal_trainable_by_mode():
    b, v = load_model("qwen3-0.6b"), load_model("siglip2-base-patch16-224")
    proj = 768 * 1024 + 1024 + 1024 * 1024 + 1024
    assert MultimodalSpec(backbone=b, vision=v, mode="projector").trainable_params == proj
    assert MultimodalSpec(backbone=b, vision=v, mode="encoder-projector").trainable_params == proj + v.total_params
    assert MultimodalSpec(backbone=b, vision=v, mode="e2e").trainable_params == proj + v.total_params + b.total_params
    with pytest.raises(SpecError, match="--vision"):
        MultimodalSpec(backbone=b, mode="projector")


def test_precision_presets():
    mixed, pure = TrainingSpec.from_precision("bf16-mixed"), TrainingSpec.from_precision("bf16-pure")
    assert (mixed.param_bytes, mixed.grad_bytes, mixed.optim_bytes) == (4, 4, 8)
    assert (pure.param_bytes, pure.grad_bytes, pure.optim_bytes) == (2, 2, 4)
    assert TrainingSpec.from_precision("fp32", optimizer="sgd").optim_bytes == 4
    with pytest.raises(SpecError, match="bf16-mixed"):
        TrainingSpec.from_precision("fp8")


@pytest.mark.parametrize("kw", [dict(seq_len=0), dict(micro_batch=-1), dict(ckpt_freq=-1), dict(global_batch=0)])
def test_training_rejects_bad_sizes(kw):
    with pytest.raises(SpecError):
        TrainingSpec(**kw)


def test_layout():
    lay = Layout.for_platform(load_platform("aurora"), 2)
    assert (lay.world, str(lay)) == (24, "NODES(2)-RPN(12)")
    with pytest.raises(SpecError):
        Layout(nodes=0, ranks_per_node=4)

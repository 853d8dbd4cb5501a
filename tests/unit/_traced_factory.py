"""A `module:function` model factory the traced tests name by string ('_traced_factory:make_tiny'):
it must be importable by name, so it lives on pytest's pythonpath (tests/unit), not in a test file."""

from __future__ import annotations

from torch import nn

from prism_strategy.specs import TransformerSpec

TINY = TransformerSpec(
    name="tiny",
    hf_model_type="llama",
    layers=2,
    hidden=128,
    heads=4,
    kv_heads=2,
    head_dim=32,
    ffn=256,
    vocab=1024,
    max_positions=512,
)


def make_tiny() -> nn.Module:
    """TINY built by transformers, as a user's factory builds its model."""
    import transformers

    from prism_strategy.specs.hf import to_hf_config

    return transformers.AutoModelForCausalLM.from_config(to_hf_config(TINY))

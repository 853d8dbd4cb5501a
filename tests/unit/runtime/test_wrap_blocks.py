"""Finding transformer blocks (HF `_no_split_modules`, override, fallback) and checkpointing every k-th."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from prism_strategy.runtime.blocks import apply_checkpointing, checkpointed_count, find_blocks

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
from tiny_llama import MLP, TinyBlock, TinyConfig, TinyLlama, lm_loss  # noqa: E402


def test_blocks_from_no_split_modules():
    m = TinyLlama(TinyConfig(layers=3))
    blocks = find_blocks(m)
    assert [b.module for b in blocks] == list(m.layers)
    assert {b.name for b in blocks} == {"0", "1", "2"}


def test_blocks_of_a_transformers_model():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    with torch.device("meta"):
        m = transformers.LlamaForCausalLM(cfg)
    assert [type(b.module).__name__ for b in find_blocks(m)] == ["LlamaDecoderLayer"] * 2


def test_block_types_override_by_class_or_name():
    m = TinyLlama(TinyConfig(layers=2))
    assert len(find_blocks(m, MLP)) == 2
    assert len(find_blocks(m, ("MLP",))) == 2
    assert len(find_blocks(m, (TinyBlock, MLP))) == 2  # outermost matches only


def test_fallback_is_the_longest_module_list_of_one_class():
    m = nn.Sequential(nn.Linear(2, 2), nn.ModuleList(nn.Linear(2, 2) for _ in range(3)))
    assert len(find_blocks(m)) == 3
    assert find_blocks(nn.Linear(2, 2)) == []


def test_fallback_when_no_split_modules_names_nothing_present():
    m = TinyLlama(TinyConfig(layers=2))
    m._no_split_modules = ["SomeOtherLayer"]
    assert [b.module for b in find_blocks(m)] == list(m.layers)


@pytest.mark.parametrize("every, wrapped", [(0, []), (1, [0, 1, 2, 3]), (2, [1, 3]), (3, [2]), (5, [])])
def test_checkpoint_every_kth_block(every, wrapped):
    m = TinyLlama(TinyConfig(layers=4))
    blocks = apply_checkpointing(find_blocks(m), every=every)
    assert [i for i, b in enumerate(m.layers) if type(b).__name__ == "CheckpointWrapper"] == wrapped
    assert checkpointed_count(blocks) == len(wrapped)
    assert [b.module for b in blocks] == list(m.layers)


def test_checkpointing_keeps_results_and_state_dict_names():
    torch.manual_seed(0)
    plain = TinyLlama(TinyConfig(layers=2))
    torch.manual_seed(0)
    ckpt = TinyLlama(TinyConfig(layers=2))
    apply_checkpointing(find_blocks(ckpt), every=1)
    tokens = torch.randint(0, 128, (2, 8))
    for m in (plain, ckpt):
        lm_loss(m(tokens), tokens).backward()
    for (name, p), (_, q) in zip(plain.named_parameters(), ckpt.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    assert sorted(get_model_state_dict(ckpt)) == sorted(plain.state_dict())

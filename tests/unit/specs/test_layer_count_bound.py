"""Issue 38 item 3: work bounded by the size of the answer, not of the layer count. Layer counts
are handled as runs of identical blocks everywhere (TransformerSpec.stack_groups, the HF family
readers' dense and sliding counts), and a count no real model has (specs/model.MAX_LAYERS) is
refused in one line.

Truth: the per-layer definitions transformers writes (Qwen2/3-MoE's decoder layer is sparse when
its index is not in mlp_only_layers and (index + 1) % decoder_sparse_step == 0; Gemma 2/3 layer i
slides when (i + 1) % sliding_window_pattern != 0), evaluated layer by layer in the test; and the
work a plan does, counted (Python calls and peak traced allocations, both deterministic) at 1,000
and at MAX_LAYERS layers: a loop or a list per layer adds at least one call or one pointer per
layer, so the growth per added layer must stay far below that."""

from __future__ import annotations

import json
import sys
import tracemalloc
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prism_strategy.cli import app
from prism_strategy.flags import plan
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.hf import spec_from_hf_dict
from prism_strategy.specs.model import MAX_LAYERS

HF = Path(__file__).resolve().parents[2] / "fixtures" / "hf"
QWEN3_MOE = json.loads((HF / "qwen3-30b-a3b" / "config.json").read_text())
GEMMA3 = json.loads((HF / "gemma-3-1b" / "config.json").read_text())
LLAMA_LIKE = json.loads((HF / "qwen2.5-7b" / "config.json").read_text())


def _dense_by_layer(layers: int, step: int, only: list[int]) -> int:
    return sum(1 for i in range(layers) if i in only or (i + 1) % step)


@pytest.mark.parametrize(
    "layers, step, only",
    [(48, 1, []), (48, 2, []), (7, 3, []), (10, 2, [0, 1, 3, 3, 9, 12, -1]), (5, 1, [4]), (6, 4, [3, 0])],
)
def test_qwen_moe_dense_count_equals_the_layer_by_layer_definition(layers, step, only):
    cfg = QWEN3_MOE | {"num_hidden_layers": layers, "decoder_sparse_step": step, "mlp_only_layers": only}
    dense = _dense_by_layer(layers, step, only)
    if dense == layers:  # every block dense: read as a dense model
        assert not spec_from_hf_dict(cfg, name="q").moe
        return
    assert spec_from_hf_dict(cfg, name="q").dense_layers == dense


@pytest.mark.parametrize("layers, pattern", [(26, 6), (1, 6), (6, 6), (13, 2), (5, 1)])
def test_gemma_sliding_count_equals_the_layer_by_layer_definition(layers, pattern):
    cfg = GEMMA3 | {"num_hidden_layers": layers, "sliding_window_pattern": pattern}
    expected = sum(1 for i in range(layers) if (i + 1) % pattern)
    assert spec_from_hf_dict(cfg, name="g").sliding_layers == expected


@pytest.mark.parametrize("cfg", [LLAMA_LIKE, QWEN3_MOE, GEMMA3], ids=["qwen2.5", "qwen3-moe", "gemma3"])
@pytest.mark.parametrize("layers", [MAX_LAYERS + 1, 10**9, 10**12])
def test_more_layers_than_any_model_exit_2_in_one_line(tmp_path, cfg, layers):
    (tmp_path / "config.json").write_text(json.dumps(cfg | {"num_hidden_layers": layers}))
    r = CliRunner().invoke(app, ["plan", "--model", str(tmp_path), "--platform", "dgx-h100", "--nodes", "1"])
    assert r.exit_code == 2, r.output
    line = r.output.strip()
    assert "\n" not in line and "num_hidden_layers" in line and f"{MAX_LAYERS:,}" in line


def test_a_preset_past_the_bound_is_refused_and_the_bound_itself_is_taken():
    cfg = LLAMA_LIKE | {"num_hidden_layers": MAX_LAYERS}
    assert spec_from_hf_dict(cfg, name="deep").layers == MAX_LAYERS
    with pytest.raises(SpecError, match="more than any real model"):
        spec_from_hf_dict(cfg | {"num_hidden_layers": MAX_LAYERS + 1}, name="deeper")


def _work(folder: Path, cfg: dict, layers: int) -> tuple[int, int]:
    """(Python calls, peak traced bytes) of one plan of this config at this depth."""
    d = folder / str(layers)
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg | {"num_hidden_layers": layers}))
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += event == "call"

    tracemalloc.start()
    sys.setprofile(count)
    try:
        plan(str(d), platform="dgx-h100", nodes=1, seq_len=256)
    finally:
        sys.setprofile(None)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return calls, peak


SMALL = 1_000


@pytest.mark.parametrize(
    "cfg",
    [LLAMA_LIKE, QWEN3_MOE | {"decoder_sparse_step": 2}, GEMMA3],
    ids=["qwen2.5", "qwen3-moe-half-dense", "gemma3"],
)
def test_a_plan_does_not_work_per_layer(tmp_path, cfg):
    plan(str(HF / "qwen2.5-7b"), platform="dgx-h100", nodes=1, seq_len=256)  # imports, presets, first-use caches
    small_calls, small_peak = _work(tmp_path, cfg, SMALL)
    big_calls, big_peak = _work(tmp_path, cfg, MAX_LAYERS)
    added = MAX_LAYERS - SMALL
    assert (big_calls - small_calls) / added < 0.05, (small_calls, big_calls)
    assert (big_peak - small_peak) / added < 1.0, (small_peak, big_peak)  # one list entry is 8 bytes

"""Tokens/s per device and MFU on every plan option, from PaLM's formula (appendix B, as nanoGPT's
estimate_mfu uses it) written out here independently: model FLOPs per token = 6 N + 6 L T q
(N: matmul parameters incl. the LM head; causal attention halves PaLM's 12 L T q), recompute
excluded, against the platform's peak."""

import json

import pytest
from typer.testing import CliRunner

from prism_strategy.cli import app
from prism_strategy.flags import plan
from prism_strategy.specs import load_model, load_platform

runner = CliRunner()


@pytest.mark.parametrize("ckpt", [0, 1])
def test_mfu_is_palms_model_flops_over_the_peak(ckpt):
    p = plan("qwen3-0.6b", platform="dgx-h100", nodes=2, seq_len=2048, ckpt_freq=ckpt)
    m, h100 = load_model("qwen3-0.6b"), load_platform("dgx-h100")
    T = 2048
    n = m.layers * m.block_matmul_params + m.vocab * m.hidden
    flops_per_token = 6 * n + 6 * m.layers * T * m.q_width
    for o in p.options:
        per_dev = o.samples_per_s / 16
        assert o.tokens_per_s_per_device == pytest.approx(per_dev * T)
        assert o.mfu == pytest.approx(per_dev * T * flops_per_token / (h100.hardware.peak_tflops_bf16 * 1e12), rel=1e-6)
        assert 0 < o.mfu < h100.compute.achievable_fraction + 1e-9  # never above what the compute model allows


def test_plan_json_and_table_show_tokens_per_device_and_mfu():
    args = ["plan", "--model", "olmo-7b", "--platform", "dgx-h100", "--nodes", "2"]
    d = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    for o in d["options"]:
        assert o["tokens_per_s_per_device"] > 0 and 0 < o["mfu"] < 1
    assert "989 TF/s bf16" in d["options"][0]["provenance"]["mfu"]
    r = runner.invoke(app, args, env={"COLUMNS": "100"})
    assert "tok/s/dev" in r.stdout and "MFU" in r.stdout and "989 TF/s bf16 peak" in " ".join(r.stdout.split())
    assert all(len(line) <= 100 for line in r.stdout.splitlines())

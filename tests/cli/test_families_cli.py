"""`plan` with the families a user brings as a config.json: Gemma 2 on two DGX H100 nodes, an MoE,
CLIP ViT-L/14-336 as a --vision config path, and an unknown family (exit 2, one line)."""

import json
from pathlib import Path

from typer.testing import CliRunner

from prism_strategy.cli import app

runner = CliRunner()
HF = Path(__file__).parent.parent / "fixtures" / "hf"
GEMMA2_9B = 9_241_705_984  # transformers' Gemma2ForCausalLM on the meta device (tests/unit/specs/test_hf_families.py)
CLIP_L14_336 = 303_507_456  # transformers' CLIPVisionModel on the meta device (same test)


def plan_json(*args):
    r = runner.invoke(app, ["plan", *args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_gemma2_config_plans_on_two_dgx_h100_nodes():
    d = plan_json("--model", str(HF / "gemma-2-9b" / "config.json"), "--platform", "dgx-h100", "--nodes", "2")
    assert d["inputs"]["params"]["total"] == GEMMA2_9B and d["inputs"]["world_size"] == 16
    assert d["recommended"] and any(o["feasible"] for o in d["options"])
    assert any("Gemma 2" in r and "eager" in r for r in d["reasons"])
    r = runner.invoke(app, ["plan", "--model", str(HF / "gemma-2-9b"), "--platform", "dgx-h100", "--nodes", "2"])
    assert r.exit_code == 0 and "recommended:" in r.output  # the folder works as the file does


def test_moe_config_plan_says_data_parallel_only():
    d = plan_json(
        "--model",
        str(HF / "qwen3-30b-a3b" / "config.json"),
        "--platform",
        "dgx-h100",
        "--nodes",
        "2",
        "--seq-len",
        "2048",
    )
    assert d["inputs"]["params"]["total"] == 30_532_122_624
    assert any("data parallelism only" in r for r in d["reasons"])


def test_clip_config_path_as_vision_encoder():
    clip = HF / "clip-vit-large-patch14-336" / "config.json"
    d = plan_json("--model", "qwen3-0.6b", "--vision", str(clip), "--mode", "projector", "--platform", "dgx-h100")
    plain = plan_json("--model", "qwen3-0.6b", "--platform", "dgx-h100")
    projector = 1024 * 1024 + 1024 + 1024 * 1024 + 1024  # LLaVA MLP: CLIP width 1024 -> Qwen3-0.6B width 1024
    assert d["inputs"]["params"]["total"] == plain["inputs"]["params"]["total"] + CLIP_L14_336 + projector
    assert d["inputs"]["params"]["trainable"] == projector
    assert d["inputs"]["image_tokens"] == 576  # 24 x 24 patches; LLaVA drops the class token


def test_unknown_family_exits_2_with_one_line(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "mamba", "hidden_size": 768}')
    r = runner.invoke(app, ["plan", "--model", str(tmp_path / "config.json")])
    assert r.exit_code == 2 and "Traceback" not in r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "'mamba' is not supported" in lines[0] and "gemma2" in lines[0]
    assert "preset TOML" in lines[0] and "llama-2-7b.toml" in lines[0]

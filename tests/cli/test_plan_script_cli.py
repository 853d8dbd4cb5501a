"""`prism-strategy plan --script FILE`: the script's loss, checkpointing, optimizer, precision and
compile become the plan's inputs; flags given win; inputs.script says what came from where."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prism_strategy.cli import app

runner = CliRunner()
SCRIPTS = Path(__file__).parents[1] / "fixtures" / "scripts"
BASE = ["plan", "--model", "tiny-llama", "--platform", "cpu", "--seq-len", "256"]


def plan_json(*args) -> dict:
    r = runner.invoke(app, [*BASE, *args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def memory(d: dict) -> list:
    return [(o["strategy"], o["ckpt_freq"], o["micro_batch"], o["memory_gib"]) for o in d["options"]]


def test_liger_and_selective_checkpointing_plan_chunked_and_sac_and_say_so():
    """Issue 17's done-when: Liger's fused linear cross-entropy + selective checkpointing."""
    d = plan_json("--script", str(SCRIPTS / "liger_sac.py"))
    assert d["inputs"]["loss"] == "chunked" and d["inputs"]["ckpt_freq"] == "sac"
    assert {o["ckpt_freq"] for o in d["options"]} == {"sac"}
    section = d["inputs"]["script"]
    assert section["file"].endswith("liger_sac.py")
    for key, value in (("loss", "chunked"), ("ckpt_freq", "sac")):
        e = section["inputs"][key]
        assert (e["read"], e["planned"], e["by"]) == (value, value, "script")
        code = (SCRIPTS / "liger_sac.py").read_text().splitlines()[e["line"] - 1].strip()
        assert e["evidence"] in (code, code[:97] + "...")
    # the read values are the plan's inputs: the same plan as the flags that say the same
    flags = plan_json("--loss", "chunked", "--ckpt-freq", "sac", "--reduce-dtype", "fp32")
    assert memory(d) == memory(flags)
    assert memory(d) != memory(plan_json("--ckpt-freq", "sac", "--reduce-dtype", "fp32"))  # the loss read counts


def line_of(name: str, text: str) -> int:
    return next(i for i, line in enumerate((SCRIPTS / name).read_text().splitlines(), 1) if text in line)


def test_human_output_names_the_lines():
    r = runner.invoke(app, [*BASE, "--script", str(SCRIPTS / "liger_sac.py")])
    assert r.exit_code == 0, r.output
    block = r.stdout[r.stdout.index("script ") :].splitlines()
    flce, sac = line_of("liger_sac.py", "apply_liger_kernel_to_llama()"), line_of("liger_sac.py", "context_fn=")
    assert f"  loss chunked (line {flce}: apply_liger_kernel_to_llama())" in block
    assert any(b.startswith(f"  checkpointing sac (line {sac}: ") for b in block)
    assert "  compile: could not tell; assumed eager (no torch.compile read)" in block
    assert (
        "    the plan for it (predicted): fits: "
        in block[block.index(next(b for b in block if "the script runs" in b)) + 2]
    )
    assert max(map(len, block)) <= 100


def test_a_flag_given_wins_and_the_json_says_so():
    d = plan_json("--script", str(SCRIPTS / "liger_sac.py"), "--loss", "fused")
    assert d["inputs"]["loss"] == "fused" and d["inputs"]["ckpt_freq"] == "sac"
    e = d["inputs"]["script"]["inputs"]["loss"]
    assert (e["read"], e["planned"], e["by"]) == ("chunked", "fused", "command line")
    assert (
        f"the script's chunked (line {line_of('liger_sac.py', 'apply_liger_kernel_to_llama()')}) is not used"
        in e["note"]
    )


def test_no_compile_overrides_the_scripts_compile():
    d = plan_json("--script", str(SCRIPTS / "torchtitan_style.py"), "--no-compile")
    e = d["inputs"]["script"]["inputs"]["compile"]
    assert d["inputs"]["compile"] is False and (e["read"], e["by"]) == (True, "command line")
    assert e["note"].startswith("--no-compile given on the command line; the script's on (line ")


def test_torchtitan_style_and_hf_trainer_scripts():
    t = plan_json("--script", str(SCRIPTS / "torchtitan_style.py"))["inputs"]
    assert (t["ckpt_freq"], t["optimizer"], t["precision"], t["compile"], t["loss"]) == (
        2,
        "adamw-foreach",
        "bf16-mixed",
        True,
        "upcast",
    )
    h = plan_json("--script", str(SCRIPTS / "hf_trainer.py"))["inputs"]
    assert (h["ckpt_freq"], h["optimizer"], h["optimizer_impl"], h["precision"]) == (
        1,
        "adamw-fused",
        "fused",
        "bf16-mixed",
    )
    assert h["script"]["inputs"]["strategy"]["by"] == "assumed"


def test_a_script_that_tells_nothing_plans_the_defaults_and_lists_what_it_could_not_tell():
    d = plan_json("--script", str(SCRIPTS / "opaque.py"))
    assert memory(d) == memory(plan_json())
    untold = d["inputs"]["script"]["could_not_tell"]
    assert any(u.startswith("loss: could not tell; assumed upcast") for u in untold)
    assert any(u.startswith("checkpointing: could not tell; assumed auto") for u in untold)
    assert len(untold) == 6


def test_without_script_the_json_has_no_script_section():
    assert "script" not in plan_json()["inputs"]


@pytest.mark.parametrize(
    "content, fragment",
    [
        (None, "No such file or directory"),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00", "binary file"),
        (b"this is: not python (\n", "not valid Python"),
        ("dir", "Is a directory"),
    ],
)
def test_an_unreadable_script_is_one_line_and_exit_2(tmp_path, content, fragment):
    path = tmp_path / "train.py"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    r = runner.invoke(app, [*BASE, "--script", str(path)])
    assert r.exit_code == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "--script" in err[0] and fragment in err[0]
    assert r.stdout == ""


def test_a_bad_value_read_from_the_script_is_one_line_naming_the_script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(
        "for i, layer in enumerate(layers):\n    if i % 7 == 0:\n        layers[i] = checkpoint_wrapper(layer)\n"
    )
    r = runner.invoke(app, [*BASE, "--script", str(path)])  # tiny-llama has 2 blocks
    assert r.exit_code == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "--ckpt-freq 7 is larger than the model's" in err[0]
    assert f"--script {path} set ckpt_freq 7 (line 3)" in err[0]
    ok = runner.invoke(app, [*BASE, "--script", str(path), "--ckpt-freq", "1", "--json"])
    assert ok.exit_code == 0 and json.loads(ok.stdout)["inputs"]["ckpt_freq"] == 1


def test_nanogpt_plans_its_own_global_batch():
    # karpathy/nanoGPT train.py: batch_size 12 x gradient_accumulation_steps 40, divided by the
    # world size (config/train_gpt2.py: 12 x 1024 x 5 accumulation x 8 GPUs = 491,520 tokens)
    script = Path(__file__).parents[1] / "fixtures" / "scripts" / "nanogpt_train.py"
    args = ["plan", "--script", str(script), "--model", "qwen3-0.6b", "--platform", "dgx-a100-40", "--json"]
    r = CliRunner().invoke(app, [*args, "--seq-len", "1024"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["inputs"]["micro_batch"] == 12 and d["inputs"]["global_batch"] == 480
    assert {(o["micro_batch"], o["grad_accum"]) for o in d["options"] if o["feasible"]} == {(12, 5)}


def test_a_scripts_lora_config_is_planned_as_adapters():
    # huggingface/peft's DeepSpeed ZeRO-3 example: LoraConfig(r=8), no target_modules (peft's llama default q, v)
    script = Path(__file__).parents[1] / "fixtures" / "scripts" / "peft_lora_clm_ds_zero3.py"
    args = ["plan", "--script", str(script), "--model", "llama-2-7b", "--platform", "dgx-a100-40", "--json"]
    r = CliRunner().invoke(app, [*args, "--seq-len", "1024"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["inputs"]["params"]["trainable"] == 32 * 2 * 8 * (4096 + 4096)  # 4,194,304
    assert d["inputs"]["script"]["inputs"]["lora"]["line"] == 114

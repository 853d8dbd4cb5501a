"""`plan --script` on public training scripts (sources beside each fixture, *.source.txt):
precision from what the script does, module-level batch constants, fully_shard through **kwargs."""

from pathlib import Path

from prism_strategy.inputs.script import read_plan_inputs

SCRIPTS = Path(__file__).parents[2] / "fixtures" / "scripts"
FSDP2 = Path(__file__).parents[2] / "fixtures" / "doctor" / "official" / "pytorch_examples_fsdp2_example.py"
"""pytorch/examples distributed/FSDP2/example.py (source beside it), shared with the doctor's official files."""


def _line(name: str | Path, text: str) -> int:
    lines = (SCRIPTS / name).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def test_a_script_with_no_cast_no_autocast_and_no_policy_is_fp32_from_its_backward_line():
    # pytorch/examples' DDP tutorial: plain fp32 training (torch's default dtype, autocast never entered)
    r = read_plan_inputs(SCRIPTS / "ddp_multigpu_torchrun.py").get("precision")
    assert r.value == "fp32"
    assert r.line == _line("ddp_multigpu_torchrun.py", "loss.backward()") and "no autocast" in r.note


def test_a_script_that_may_cast_is_not_told_fp32():
    # nanoGPT enters torch.amp.autocast with ptdtype = {...}[dtype], dtype 'bfloat16' or 'float16'
    # (both 2 bytes): bf16-mixed from the autocast line, never fp32 by elimination
    r = read_plan_inputs(SCRIPTS / "nanogpt_train.py").get("precision")
    assert r.value == "bf16-mixed" and r.line == _line("nanogpt_train.py", "torch.amp.autocast(")
    # the FSDP2 example's MixedPrecisionPolicy runs only under --mixed-precision: could not tell
    assert read_plan_inputs(FSDP2).get("precision").value is None


def test_nanogpt_module_level_batch_constants_fix_the_global_batch():
    si = read_plan_inputs(SCRIPTS / "nanogpt_train.py")
    micro, accum, glob = si.get("micro_batch"), si.get("grad_accum"), si.get("global_batch")
    assert micro.value == 12 and micro.line == _line("nanogpt_train.py", "batch_size = 12")
    # gradient_accumulation_steps = 5 * 8 is the job's: train.py divides it by ddp_world_size
    assert accum.value is None
    assert glob.value == 12 * 40 and glob.line == _line("nanogpt_train.py", "gradient_accumulation_steps = 5 * 8")
    assert "configurator" in glob.note and "divides" in glob.note


def test_an_accumulation_constant_no_one_divides_is_each_ranks(tmp_path):
    text = (
        (SCRIPTS / "nanogpt_train.py")
        .read_text()
        .replace("    gradient_accumulation_steps //= ddp_world_size\n", "    pass\n")
    )
    (tmp_path / "train.py").write_text(text)
    si = read_plan_inputs(tmp_path / "train.py")
    assert si.get("grad_accum").value == 40 and si.get("global_batch").value is None


def test_fully_shard_through_a_kwargs_dict_that_never_sets_reshard_is_full_shard():
    r = read_plan_inputs(FSDP2).get("strategy")
    assert r.value == "fsdp_full_shard" and r.line == _line(FSDP2, "fully_shard(model, **fsdp_kwargs)")


def test_fully_shard_whose_kwargs_set_reshard_is_not_guessed(tmp_path):
    text = (
        (FSDP2)
        .read_text()
        .replace(
            "    for layer in model.layers:\n",
            '    fsdp_kwargs["reshard_after_forward"] = args.reshard\n    for layer in model.layers:\n',
            1,
        )
    )
    (tmp_path / "example.py").write_text(text)
    assert read_plan_inputs(tmp_path / "example.py").get("strategy").value is None

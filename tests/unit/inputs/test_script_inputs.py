"""inputs/script.py: what a training script says about the plan's memory inputs."""

from pathlib import Path

import pytest

from prism_strategy.inputs.script import FLAGS, read_plan_inputs

SCRIPTS = Path(__file__).parents[2] / "fixtures" / "scripts"


def line_of(name: str, text: str) -> int:
    """The fixture's line holding `text` (so the tests do not pin line numbers by hand)."""
    lines = (SCRIPTS / name).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


NO_BATCH = dict.fromkeys(("micro_batch", "grad_accum", "global_batch", "lora"))
"""The batch inputs (inputs/script_batch.py) and LoRA (inputs/script_lora.py): none of these fixtures sets them."""


def told(path: Path) -> dict:
    return {r.input: r.value for r in read_plan_inputs(path).reads}


@pytest.mark.parametrize(
    "name, expected, lines",
    [
        (
            "liger_sac.py",
            {
                "loss": "chunked",
                "ckpt_freq": "sac",
                "optimizer": "adamw",
                "precision": "bf16-mixed",
                "reduce_dtype": "fp32",
                "compile": None,
                "strategy": "fsdp_full_shard",
            },
            {"loss": "apply_liger_kernel_to_llama()", "ckpt_freq": "create_selective_checkpoint_contexts, _policy"},
        ),
        (
            "torchtitan_style.py",
            {
                "loss": "upcast",
                "ckpt_freq": 2,
                "optimizer": "adamw-foreach",
                "precision": "bf16-mixed",
                "reduce_dtype": "fp32",
                "compile": True,
                "strategy": "fsdp_full_shard",
            },
            {"ckpt_freq": "if layer_id % ac_freq == 0", "optimizer": "torch.optim.AdamW", "loss": ".float()"},
        ),
        (
            "hf_trainer.py",
            {
                "loss": "upcast",
                "ckpt_freq": 1,
                "optimizer": "adamw-fused",
                "precision": "bf16-mixed",
                "reduce_dtype": None,
                "compile": None,
                "strategy": None,
            },
            {
                "ckpt_freq": "gradient_checkpointing_enable",
                "optimizer": "fused=True",
                "precision": "bf16=True",
                "loss": "Trainer(model=",
            },
        ),
        (
            "fsdp1_env_switch.py",
            {
                "loss": None,
                "ckpt_freq": 1,
                "optimizer": "adamw-loop",
                "precision": "bf16-mixed",
                "reduce_dtype": "fp32",
                "compile": None,
                "strategy": "fsdp_shard_grad_op",
            },
            {"optimizer": "foreach=False", "strategy": "ShardingStrategy.SHARD_GRAD_OP"},
        ),
        ("opaque.py", dict.fromkeys([*FLAGS, "strategy"]), {}),
    ],
)
def test_fixture_scripts_are_read_with_their_lines(name, expected, lines):
    si = read_plan_inputs(SCRIPTS / name)
    assert told(SCRIPTS / name) == NO_BATCH | expected
    for key, text in lines.items():
        got = si.get(key)
        # the ckpt_freq line of torchtitan_style is the wrapper under the `%` test, one below it
        assert got.line in (line_of(name, text), line_of(name, text) + 1), (key, got)
        assert got.evidence and got.evidence.removesuffix("...") in (SCRIPTS / name).read_text()


def test_a_switch_the_job_may_flip_is_named_not_guessed():
    """Liger's patch runs only when the job sets USE_LIGER=1; flash-attn's CE otherwise: could not tell,
    with both candidates and the switch in the note."""
    r = read_plan_inputs(SCRIPTS / "fsdp1_env_switch.py").get("loss")
    assert r.value is None
    assert "chunked" in r.note and "fused" in r.note and "USE_LIGER" in r.note
    assert f"line {line_of('fsdp1_env_switch.py', 'CrossEntropyLoss(inplace')}" in r.note


def test_a_branch_the_values_rule_out_does_not_count():
    """torchtitan_style's op-SAC and full branches are decided false by its ac_config: not sac, not every block."""
    r = read_plan_inputs(SCRIPTS / "torchtitan_style.py").get("ckpt_freq")
    assert r.value == 2 and "one block in 2" in r.note


PRISM_WRAP = (
    "from prism_strategy import init_distributed, wrap\nctx = init_distributed()\n"
    'job = wrap(model, "hsdp_full_shard", ctx=ctx, optimizer=make_opt, ckpt_freq="sac", loss="chunked", '
    "compile=True)\n"
)


@pytest.mark.parametrize(
    "code, key, value, note",
    [
        (
            "from liger_kernel.transformers import apply_liger_kernel_to_qwen2\n"
            "apply_liger_kernel_to_qwen2(fused_linear_cross_entropy=False, cross_entropy=True)\n",
            "loss",
            "fused",
            "cross_entropy",
        ),
        (
            "from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss\nce = LigerFusedLinearCrossEntropyLoss()\n",
            "loss",
            "chunked",
            "",
        ),
        (
            "from torchtune.modules.loss import CEWithChunkedOutputLoss\nce = CEWithChunkedOutputLoss()\n",
            "loss",
            "chunked",
            "",
        ),
        (
            "batches = chunked_sequence(ids)\nout = model(ids, labels=ids)\nout.loss.backward()\n",
            "loss",
            "upcast",
            "the HF model's own loss",
        ),
        (
            "import os\nif os.environ.get('LIGER') == '1':\n    from liger_kernel.transformers import apply_liger_kernel_to_llama\n"
            "    apply_liger_kernel_to_llama()\nout = model(ids, labels=ids)\nout.loss.backward()\n",
            "loss",
            None,
            "line 6: upcast",
        ),
        (
            "from liger_kernel.transformers import AutoLigerKernelForCausalLM\n"
            "m = AutoLigerKernelForCausalLM.from_pretrained('x')\nout = m(ids, labels=ids)\nout.loss.backward()\n",
            "loss",
            "chunked",
            "its default",
        ),
        (
            "from liger_kernel.transformers import LigerCrossEntropyLoss\nce = LigerCrossEntropyLoss()\n",
            "loss",
            "fused",
            "gradient in place",
        ),
        ("import torch.nn.functional as F\nloss = F.cross_entropy(logits, y)\n", "loss", "upcast", "dtype is not read"),
        ("import torch\nopt = torch.optim.AdamW(ps, foreach=True)\n", "optimizer", "adamw-foreach", ""),
        (
            "import torch\nopt = torch.optim.AdamW(ps, fused=args.fused)\n",
            "optimizer",
            None,
            "not values the script fixes",
        ),
        ("import torch\nopt = torch.optim.Adam(ps)\n", "optimizer", "adamw", "Adam planned as AdamW"),
        (
            "from transformers import TrainingArguments\na = TrainingArguments(output_dir='o')\n",
            "optimizer",
            "adamw-fused",
            "torch >= 2.8",
        ),
        (
            "from transformers import TrainingArguments\na = TrainingArguments(output_dir='o', optim='adamw_torch')\n",
            "optimizer",
            "adamw",
            "",
        ),
        (
            "import torch\nmodel = build()\nmodel.to(torch.bfloat16)\nwith torch.autocast('cuda', dtype=torch.bfloat16):\n"
            "    pass\n",
            "precision",
            "bf16-pure",
            "low precision",
        ),
        (
            "from torch.distributed.fsdp import MixedPrecisionPolicy\nimport torch\n"
            "mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16)\n",
            "reduce_dtype",
            "bf16",
            "param_dtype",
        ),
        (
            "from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper\nK = 3\n"
            "for i, layer in enumerate(layers):\n    if i % K == 0:\n        layers[i] = checkpoint_wrapper(layer)\n",
            "ckpt_freq",
            3,
            "one block in 3",
        ),
        (
            "from torch.utils.checkpoint import create_selective_checkpoint_contexts\nSAC = False\nif SAC:\n"
            "    ctx = create_selective_checkpoint_contexts(policy)\n",
            "ckpt_freq",
            None,
            "",
        ),
        (
            "from transformers import TrainingArguments\na = TrainingArguments(output_dir='o', use_liger_kernel=True,"
            " gradient_checkpointing=True, torch_compile=True)\n",
            "loss",
            "chunked",
            "use_liger_kernel",
        ),
        ("import torch\nmodel = torch.compile(model)\n", "compile", True, ""),
        (
            "from transformers import TrainingArguments\na = TrainingArguments(output_dir='o', bf16=args.bf16)\n",
            "precision",
            None,
            "nothing in the script sets it",
        ),
        (
            "if args.gc:\n    model.gradient_checkpointing_enable()\n",
            "ckpt_freq",
            None,
            "runs only under a test the script leaves open",
        ),
        (
            "import os\nif os.environ.get('CKPT', '1') == '1':\n    model.gradient_checkpointing_enable()\n",
            "ckpt_freq",
            1,
            "CKPT unset: the default",
        ),
        ("class Cfg:\n    pass\nprint(args.loss, self.loss)\n", "loss", None, "nothing in the script sets it"),
        (
            "from torch.distributed.device_mesh import init_device_mesh\nfrom torch.distributed.fsdp import fully_shard\n"
            "mesh = init_device_mesh('cuda', (2, 4))\nfully_shard(m, mesh=mesh, reshard_after_forward=False)\n",
            "strategy",
            "hsdp_shard_grad_op",
            "2-D mesh",
        ),
        (PRISM_WRAP, "ckpt_freq", "sac", "wrap(ckpt_freq='sac')"),
        (PRISM_WRAP, "loss", "chunked", ""),
        (PRISM_WRAP, "compile", True, ""),
        (PRISM_WRAP, "strategy", "hsdp_full_shard", ""),
        (PRISM_WRAP.replace('ckpt_freq="sac", ', ""), "ckpt_freq", 0, "its default"),
        (
            "import deepspeed\nds = {'zero_optimization': {'stage': 2}}\ne, *_ = deepspeed.initialize(model=m, config=ds)\n",
            "strategy",
            "zero2",
            "DeepSpeed",
        ),
    ],
)
def test_each_rule(tmp_path, code, key, value, note):
    path = tmp_path / "train.py"
    path.write_text(code)
    r = read_plan_inputs(path).get(key)
    assert r.value == value, r
    assert note in r.note


def test_the_command_line_wins_and_the_section_says_so():
    si = read_plan_inputs(SCRIPTS / "liger_sac.py")
    current = dict(
        loss="fused", ckpt_freq="auto", optimizer="adamw", precision="bf16-mixed", reduce_dtype=None, compile=False
    )
    kwargs, section = si.plan_inputs(current, given={"loss"})
    assert "loss" not in kwargs and kwargs["ckpt_freq"] == "sac" and kwargs["reduce_dtype"] == "fp32"
    loss = section["inputs"]["loss"]
    assert loss["by"] == "command line" and loss["planned"] == "fused" and loss["read"] == "chunked"
    assert "--loss given on the command line" in loss["note"] and "chunked" in loss["note"]
    assert section["inputs"]["ckpt_freq"].items() >= {"by": "script", "planned": "sac", "read": "sac"}.items()
    assert section["could_not_tell"] == ["compile: could not tell; assumed eager (no torch.compile read)"]


def test_nothing_told_plans_the_defaults_and_says_so():
    current = dict(
        loss="upcast", ckpt_freq="auto", optimizer="adamw", precision="bf16-mixed", reduce_dtype=None, compile=False
    )
    kwargs, section = read_plan_inputs(SCRIPTS / "opaque.py").plan_inputs(current, given=set())
    assert kwargs == {}
    assert {e["by"] for e in section["inputs"].values()} == {"assumed"}
    assert (
        "loss: could not tell; assumed upcast (HF default: transformers' ForCausalLMLoss casts the logits to fp32)"
        in section["could_not_tell"]
    )
    assert len(section["could_not_tell"]) == len(FLAGS) - len(NO_BATCH)  # the batch is searched: not untold


def test_plan_for_script_from_python_keywords_win():
    from prism_strategy.flags import plan_for_script

    p = plan_for_script(SCRIPTS / "liger_sac.py", model="tiny-llama", platform="cpu", seq_len=256, loss="fused")
    t = p.scenario.training
    assert (t.loss, t.ckpt_name, t.ckpt_policy) == ("fused", "sac", "sac")
    assert p.script["inputs"]["loss"]["by"] == "keyword" and p.script["inputs"]["ckpt_freq"]["by"] == "script"


def test_a_deepspeed_json_named_by_the_script_is_read_beside_it(tmp_path):
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 3}, "bf16": {"enabled": true}}')
    (tmp_path / "train.py").write_text(
        "import deepspeed\nengine, *_ = deepspeed.initialize(model=m, config='ds.json')\n"
    )
    si = read_plan_inputs(tmp_path / "train.py")
    assert (si.get("strategy").value, si.get("precision").value) == ("zero3", "bf16-mixed")
    assert str(tmp_path / "ds.json") in si.get("strategy").note
    (tmp_path / "ds.json").write_text("not json")
    r = read_plan_inputs(tmp_path / "train.py").get("strategy")
    assert r.value is None and "ds.json: not found or not JSON" in r.note

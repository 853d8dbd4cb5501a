"""Script checks follow values: a wrap policy, a sharding choice or a switch held in a variable,
passed by keyword or **kwargs, chosen by os.environ.get(NAME, default) and resolved with the
launcher's exports when --launcher and --script are given together."""

from pathlib import Path

import pytest

from prism_strategy.diagnose.doctor import DoctorRequest, diagnose

NO_BIND = "launcher-no-cpu-bind-xpu"
"""mpiexec without --cpu-bind on Aurora (a warning these launchers, written for another rule, all get)."""

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "doctor" / "scripts"
LAUNCH = "#!/bin/bash\n{exports}mpiexec -n 24 -ppn 12 python3 train.py\n"


def _launcher(tmp_path: Path, **env: str) -> Path:
    path = tmp_path / "job.sh"
    path.write_text(LAUNCH.format(exports="".join(f"export {k}={v}\n" for k, v in env.items())))
    return path


def _findings(script: str, launchers: tuple[Path, ...] = (), **kw):
    return diagnose(DoctorRequest(scripts=(FIXTURES / script,), launchers=launchers, **kw)).findings


def test_root_only_wrap_under_shard_grad_op_names_the_call_and_the_choice():
    [f] = _findings("bad_root_only_via_variable.py")
    assert (f.rule, f.line) == ("fsdp-root-only-wrap", 21)  # the FSDP(...) call
    for choice in (
        "wrap_policy = None (line 16)",
        "`if sharding == 'shard_grad_op'` (line 15)",
        "os.environ.get('FSDP_SHARDING', 'shard_grad_op') (line 14)",
        "SHARD_GRAD_OP",
    ):
        assert choice in f.message


@pytest.mark.parametrize(("sharding", "found"), [("full_shard", False), ("shard_grad_op", True)])
def test_the_launchers_export_decides_the_wrap_branch(tmp_path, sharding, found):
    findings = _findings("bad_root_only_via_variable.py", (_launcher(tmp_path, FSDP_SHARDING=sharding),))
    wraps = [f for f in findings if f.rule == "fsdp-root-only-wrap"]
    assert bool(wraps) == found
    if found:
        assert f"FSDP_SHARDING={sharding} exported by {tmp_path / 'job.sh'}" in wraps[0].message


@pytest.mark.parametrize(
    ("env", "expect"),
    [
        ({}, "warning"),  # off by default: named, not certain
        ({"TORCH_COMPILE": "1"}, "error"),
        ({"TORCH_COMPILE": "0"}, None),
    ],
)
def test_an_environment_switch_is_read_from_the_launcher(tmp_path, env, expect):
    findings = _findings(
        "bad_compile_env_switch.py", (_launcher(tmp_path, CCL_WORKER_COUNT="1", **env),), platform="aurora", nodes=2
    )
    got = [f.severity for f in findings if f.rule == "xpu-multinode-compile-deadlocked-stack"]
    assert got == ([expect] if expect else [])


def test_a_test_nothing_decides_leaves_the_finding_as_it_was(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n\ndef main(args, model):\n    if args.compile:\n"
        "        model = torch.compile(model)\n    return FSDP(model, auto_wrap_policy=policy)\n"
    )
    [f] = diagnose(DoctorRequest(scripts=(script,), platform="aurora", nodes=2)).findings
    assert (f.rule, f.severity, f.line) == ("xpu-multinode-compile-deadlocked-stack", "error", 5)  # PRISM's stack


@pytest.mark.parametrize(
    "body",
    [
        # a per-block policy on every path
        "policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})\n"
        "model = FSDP(model, **dict(auto_wrap_policy=policy))\n",
        # **kwargs the doctor cannot read: unknown, so no finding
        "model = FSDP(model, **load_kwargs())\n",
    ],
)
def test_no_root_only_finding_without_a_none_policy(tmp_path, body):
    script = tmp_path / "train.py"
    script.write_text(
        "import functools\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
        "from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy\n" + body
    )
    assert diagnose(DoctorRequest(scripts=(script,))).findings == []


def test_find_unused_through_a_variable_and_an_environment_default(tmp_path):
    [f] = _findings("bad_find_unused_env_switch.py")
    assert (f.rule, f.line) == ("find-unused-cost", 10) and "FIND_UNUSED" in f.message
    assert _findings("bad_find_unused_env_switch.py", (_launcher(tmp_path, FIND_UNUSED="0"),)) == []


def test_a_calls_result_is_not_a_decided_test(tmp_path):
    """`if use_compile():` is open (a call's truth is unknown), unlike a value the script fixes."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n\ndef main(model):\n    mode = pick_mode()\n    if mode == 'compiled':\n"
        "        model = torch.compile(model)\n    if use_compile():\n        model = torch.compile(model)\n"
        "    return FSDP(model, auto_wrap_policy=policy)\n"
    )
    [f] = diagnose(DoctorRequest(scripts=(script,), platform="aurora", nodes=2)).findings
    assert (f.rule, f.severity, f.line) == ("xpu-multinode-compile-deadlocked-stack", "error", 6)


def test_a_compile_the_launcher_switches_off_does_not_hide_a_later_one(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import os\nimport torch\n\ndef main(model):\n    if os.environ.get('TORCH_COMPILE') == '1':\n"
        "        model = torch.compile(model)\n    return FSDP(torch.compile(model), auto_wrap_policy=policy)\n"
    )
    launcher = _launcher(tmp_path, TORCH_COMPILE="0")
    found = diagnose(DoctorRequest(scripts=(script,), launchers=(launcher,), platform="aurora", nodes=2)).findings
    [f] = [f for f in found if f.rule != NO_BIND]
    assert (f.rule, f.severity, f.line) == ("xpu-multinode-compile-deadlocked-stack", "error", 7)


@pytest.mark.parametrize(
    ("body", "severity"),
    [
        (
            "model = FSDP(torch.compile(model), auto_wrap_policy=policy)\n",
            "error",
        ),  # PRISM's: the model whole under FSDP1
        (
            "for block in model.layers:\n    fully_shard(block)\nmodel = fully_shard(torch.compile(model))\n",
            "warning",
        ),  # whole model, FSDP2: no record either way
        (
            "for block in model.layers:\n    block.compile()\nmodel = FSDP(model, auto_wrap_policy=policy)\n",
            "warning",
        ),  # per block
    ],
)
def test_multi_node_compile_is_an_error_only_on_the_stack_that_deadlocked(tmp_path, body, severity):
    """PRISM's whole-backbone compile under FSDP1 deadlocked oneCCL across nodes (DOMAIN 5; its
    source, AI-ModCon/PRISM src/training/distributed.py, names the recompile desync); torchtitan's
    per-block compile with FSDP2 ran on 2 and 64 nodes (E1, E2): plan, emit and wrap() warn."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP, fully_shard\n"
        "model = make()\n" + body
    )
    [f] = diagnose(DoctorRequest(scripts=(script,), platform="aurora", nodes=2)).findings
    rule = "xpu-multinode-compile-deadlocked-stack" if severity == "error" else "xpu-multinode-compile"
    assert (f.rule, f.severity) == (rule, severity)
    assert ("the stack that deadlocked" in f.message) is (severity == "error")

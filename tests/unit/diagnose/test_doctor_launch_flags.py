"""Issue #26 finding 10: the doctor reads what the launcher passes to the script's argparse,
names a launcher with no rendezvous and an empty file, and follows `x = None` then a
conditional reassignment to the environment default that leaves it None (PRISM's HSDP path)."""

from __future__ import annotations

from pathlib import Path

from prism_strategy.diagnose.doctor import DoctorRequest, diagnose
from prism_strategy.diagnose.launch_flags import Flag, flag_value

FIX = Path(__file__).parents[2] / "fixtures" / "doctor"


def _rules(**files):
    return {(f.rule, f.severity): f for f in diagnose(DoctorRequest(**files)).findings}


def test_argparse_flags_passed_by_the_launcher_reach_ddp():
    found = _rules(
        launchers=(FIX / "launchers" / "flags_launch.sh",), scripts=(FIX / "scripts" / "flags_find_unused_static.py",)
    )
    f = found[("find-unused-vs-static-graph", "error")]
    assert "--find-unused-parameters --static-graph" in f.message and "flags_launch.sh:2" in f.message


def test_the_same_script_launched_without_the_flags_is_clean(tmp_path):
    launcher = tmp_path / "launch.sh"
    launcher.write_text("#!/bin/bash\ntorchrun --nproc-per-node 4 flags_find_unused_static.py --static-graph\n")
    assert _rules(launchers=(launcher,), scripts=(FIX / "scripts" / "flags_find_unused_static.py",)) == {}


def test_argparse_semantics_last_mention_wins_and_store_false():
    on = Flag(dest="x", options=("--x",), action="store_true", default=False)
    off = Flag(dest="y", options=("--no-y",), action="store_false", default=True)
    assert flag_value(on, ()) is False and flag_value(on, ("--x",)) is True
    assert flag_value(off, ("--no-y",)) is False and flag_value(off, ()) is True


def test_rendezvous_exported_by_hand_is_not_a_finding(tmp_path):
    launcher = tmp_path / "launch.sh"
    launcher.write_text(
        "#!/bin/bash\nexport RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS MASTER_ADDR=node0 MASTER_PORT=29500\n"
        "python train.py\n"
    )
    assert "launcher-no-rendezvous" not in {r for r, _ in _rules(launchers=(launcher,))}


def test_hsdp_wrap_policy_none_then_reassigned_in_one_branch_names_the_env_default(tmp_path):
    script = tmp_path / "distributed.py"
    script.write_text(
        "import functools, os\n"
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy\n"
        "from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy\n"
        "def wrap_model(model, mesh, block):\n"
        "    sharding = os.environ.get('FSDP_SHARDING', 'shard_grad_op')\n"
        "    wrap_policy = None\n"
        "    if sharding == 'full_shard':\n"
        "        strategy = ShardingStrategy.HYBRID_SHARD\n"
        "        wrap_policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={block})\n"
        "    else:\n"
        "        strategy = ShardingStrategy._HYBRID_SHARD_ZERO2\n"
        "    return FSDP(model, auto_wrap_policy=wrap_policy, sharding_strategy=strategy, device_mesh=mesh)\n"
    )
    (f,) = [f for (r, _), f in _rules(scripts=(script,)).items() if r == "fsdp-root-only-wrap"]
    assert "wrap_policy = None (line 6)" in f.message and "FSDP_SHARDING unset: the default" in f.message
    assert "PRISM's 7B out-of-memory" in f.message

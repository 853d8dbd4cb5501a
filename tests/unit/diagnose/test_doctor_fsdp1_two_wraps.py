"""doctor --script on a script that wraps with FSDP1 in two places (a sharded and a hybrid path) and
passes the wrap policy as `kwargs["auto_wrap_policy"] = policy` under `if policy is not None` (issue
36: AI-ModCon/PRISM src/training/distributed.py@d1fd3d3, _wrap_fsdp and _wrap_hsdp, wrap that way;
its `wrap_policy = None` on the hybrid shard_grad_op path, the default, is PRISM's documented 7B
out-of-memory). The script below is the construct, written for this test: PRISM's file is not
copied here. Truth: FSDP's auto_wrap_policy=None wraps only the root (torch/distributed/fsdp/
fully_sharded_data_parallel.py), and the environment defaults the script itself states."""

from prism_strategy.diagnose.doctor import DoctorRequest, diagnose

CONSTRUCT = """
import os
from functools import partial

from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy


def wrap_sharded(model, block_cls):
    mode = os.environ.get("FSDP_SHARDING", "full_shard")
    if mode == "shard_grad_op":
        policy = None
    else:
        policy = partial(transformer_auto_wrap_policy, transformer_layer_cls={block_cls})
    kwargs = dict(sharding_strategy=ShardingStrategy.FULL_SHARD, use_orig_params=True)
    if policy is not None:
        kwargs["auto_wrap_policy"] = policy
    return FSDP(model, **kwargs)


def wrap_hybrid(model, block_cls, mesh):
    mode = os.environ.get("FSDP_SHARDING", "shard_grad_op").lower()
    if mode == "shard_grad_op":
        sharding = ShardingStrategy._HYBRID_SHARD_ZERO2
    else:
        sharding = ShardingStrategy.HYBRID_SHARD
    force = os.environ.get("FORCE_BLOCK_WRAP", "0") == "1"
    policy = None
    if mode != "shard_grad_op" or force:
        policy = partial(transformer_auto_wrap_policy, transformer_layer_cls={block_cls})
    kwargs = dict(sharding_strategy=sharding, device_mesh=mesh, use_orig_params=True)
    if policy is not None:
        kwargs["auto_wrap_policy"] = policy
    return FSDP(model, **kwargs)
"""
EVERY_BRANCH = """
import os
from functools import partial

from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy
from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy, transformer_auto_wrap_policy


def wrap_sharded(model, block_cls):
    mode = os.environ.get("FSDP_SHARDING", "full_shard")
    if mode == "shard_grad_op":
        policy = partial(transformer_auto_wrap_policy, transformer_layer_cls={block_cls})
    else:
        policy = partial(transformer_auto_wrap_policy, transformer_layer_cls={block_cls})
    kwargs = dict(sharding_strategy=ShardingStrategy.FULL_SHARD, use_orig_params=True)
    if policy is not None:
        kwargs["auto_wrap_policy"] = policy
    return FSDP(model, **kwargs)


def wrap_hybrid(model, block_cls, mesh):
    mode = os.environ.get("FSDP_SHARDING", "shard_grad_op").lower()
    if mode == "shard_grad_op":
        sharding = ShardingStrategy._HYBRID_SHARD_ZERO2
    else:
        sharding = ShardingStrategy.HYBRID_SHARD
    force = os.environ.get("FORCE_BLOCK_WRAP", "0") == "1"
    policy = None
    if mode != "shard_grad_op" or force:
        if block_cls is not None:
            policy = partial(transformer_auto_wrap_policy, transformer_layer_cls={block_cls})
        else:
            policy = partial(size_based_auto_wrap_policy, min_num_params=1_000_000)
    else:
        policy = partial(transformer_auto_wrap_policy, transformer_layer_cls={block_cls})
    kwargs = dict(sharding_strategy=sharding, device_mesh=mesh, use_orig_params=True)
    if policy is not None:
        kwargs["auto_wrap_policy"] = policy
    return FSDP(model, **kwargs)
"""
HYBRID_CALL = 35  # the hybrid FSDP(...) call, counting CONSTRUCT from its leading newline
SHARDED_CALL = 19  # the sharded one


def _findings(tmp_path, **given):
    path = tmp_path / "wraps.py"
    path.write_text(CONSTRUCT)
    return [f for f in diagnose(DoctorRequest(scripts=(path,), live=False, **given)).findings]


def test_the_hybrid_shard_grad_op_path_wraps_only_the_root_by_default(tmp_path):
    (f,) = _findings(tmp_path, platform="aurora", strategy="hsdp_shard_grad_op")
    assert (f.rule, f.line) == ("fsdp-root-only-wrap", HYBRID_CALL)
    assert "_HYBRID_SHARD_ZERO2" in f.message and "stay gathered from forward to backward" in f.message
    assert "only on a path the job's environment must select" not in f.message


def test_the_item_set_under_is_not_none_is_followed_so_the_sharded_default_is_clean(tmp_path):
    """wrap_sharded's default (full_shard) sets the policy through kwargs[...] = policy: no finding
    on it by default; its `if mode == "shard_grad_op"` branch leaves the policy None, a warning only
    for a job that sets FSDP_SHARDING=shard_grad_op (PRISM's _wrap_fsdp is written this way)."""
    by_line = {f.line: f for f in _findings(tmp_path, platform="aurora")}
    assert set(by_line) == {SHARDED_CALL, HYBRID_CALL}
    sharded = by_line[SHARDED_CALL].message
    assert "when the job sets FSDP_SHARDING=shard_grad_op" in sharded and "policy = None (line 13)" in sharded
    assert "only on a path the job's environment must select" in sharded
    assert "only on a path" not in by_line[HYBRID_CALL].message


def test_a_strategy_the_hybrid_path_does_not_run_leaves_it_out(tmp_path):
    """Under fsdp_full_shard the hybrid call (HYBRID_SHARD / _HYBRID_SHARD_ZERO2) is left out; the
    sharded call (FULL_SHARD, written) is named only for the job that sets FSDP_SHARDING=shard_grad_op."""
    (f,) = _findings(tmp_path, platform="aurora", strategy="fsdp_full_shard")
    assert f.line == SHARDED_CALL and "only on a path the job's environment must select" in f.message


def test_every_branch_assigning_the_policy_gets_nothing(tmp_path):
    """The same two functions, the same tests and kwargs items, with a policy assigned on every
    branch (the fix), once under an `if` nothing decides (`block_cls is not None`, body and else):
    no finding on either call, by default or for any job."""
    path = tmp_path / "wraps.py"
    path.write_text(EVERY_BRANCH)
    for strategy in (None, "fsdp_shard_grad_op", "hsdp_shard_grad_op", "fsdp_full_shard", "hsdp_full_shard"):
        request = DoctorRequest(scripts=(path,), live=False, platform="aurora", strategy=strategy)
        assert diagnose(request).findings == []

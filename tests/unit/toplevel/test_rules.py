"""Typed rule facts: every rule in data/rules.toml fires in the situation its source describes
(written here from docs/domain.md and the ALCF docs, not from the rule's own `when`) and stops once the
fix is applied; a `when` key that is not a fact is refused; each stage's facts come from one place."""

from __future__ import annotations

import pytest

from prism_strategy.flags import scenario_from_flags
from prism_strategy.rules import FACT_NAMES, check, get_rule, load_rules, parse_rules, plan_facts
from prism_strategy.specs import SpecError
from prism_strategy.strategies import get_strategy

# Each rule's situation, written from its source (docs/domain.md sections 2, 4, 5 and the ALCF docs
# each rule names), not from rules.toml's `when`; then the same run with the rule's fix applied.
SITUATIONS: dict[str, tuple[dict, dict]] = {
    # DOMAIN 5: multi-node compile on XPU deadlocks oneCCL; "single node is fine"
    "xpu-multinode-compile": (
        dict(device="xpu", engine="fsdp2", compile=True, multi_node=True),
        dict(multi_node=False),
    ),
    # PRISM's stack (AI-ModCon/PRISM src/training/distributed.py): the backbone compiled whole, then FSDP1
    "xpu-multinode-compile-deadlocked-stack": (
        dict(device="xpu", compile=True, multi_node=True, compiles_whole_under_fsdp1=True),
        dict(compiles_whole_under_fsdp1=False),
    ),
    # DOMAIN 2/5: DeepSpeed + torch.compile is not viable (NaN / AttributeError), on any device
    "deepspeed-compile": (dict(device="cuda", engine="deepspeed", compile=True, multi_node=False), dict(compile=False)),
    # DOMAIN 2: find_unused_parameters=True disables static_graph
    "find-unused-vs-static-graph": (
        dict(engine="ddp", find_unused_parameters=True, static_graph=True),
        dict(static_graph=False),
    ),
    "find-unused-cost": (
        dict(device="xpu", engine="ddp", find_unused_parameters=True, static_graph=False),
        dict(find_unused_parameters=False),
    ),
    # DOMAIN 4: no device_id on XPU (DataLoader workers hang); CUDA may pass it
    "xpu-no-device-id": (dict(device="xpu", backend="xccl", passes_device_id=True), dict(device="cuda")),
    # DOMAIN 4: FSDP and ZeRO-3 runs must not preload libpil4dfs.so
    "daos-preload-fsdp": (
        dict(device="xpu", engine="deepspeed", reshard_or_sharded=True, preloads_pil4dfs=True),
        dict(preloads_pil4dfs=False),
    ),
    # DOMAIN 4: never empty_cache() inside FSDP training on XPU
    "xpu-empty-cache-fsdp": (dict(device="xpu", engine="fsdp2", calls_empty_cache=True), dict(calls_empty_cache=False)),
    # DOMAIN 2: wrapping only the root makes one giant flat parameter
    "fsdp-root-only-wrap": (dict(device="cuda", engine="fsdp2", root_only_wrap=True), dict(root_only_wrap=False)),
    # DOMAIN 4: create DataLoader workers before the device mesh (XPU)
    "dataloader-workers-after-mesh": (dict(device="xpu", workers_after_mesh=True), dict(workers_after_mesh=False)),
    # DOMAIN 4: a 1-element fp32 all-reduce dropped the last rank in one oneCCL release
    "allreduce-one-element-probe": (dict(one_element_fp32_allreduce=True), dict(one_element_fp32_allreduce=False)),
    # DOMAIN 4: a later `module load frameworks` overrides earlier CCL exports
    "launcher-export-before-module-load": (
        dict(exported_before_module_load=True),
        dict(exported_before_module_load=False),
    ),
    "launcher-no-per-rank-export": (dict(device="xpu", per_rank_exports=False), dict(per_rank_exports=True)),
    # issue #26 finding 10: python train.py with no rendezvous; an empty launcher or script
    "launcher-no-rendezvous": (dict(rendezvous_unset=True), dict(rendezvous_unset=False)),
    "empty-file": (dict(empty_file=True), dict(empty_file=False)),
    # issue #37 item 3: ROCm launch mistakes (diagnose/rocm_checks.py)
    "torch-backend-is-library-name": (dict(backend_is_library_name=True), dict(backend_is_library_name=False)),
    "rocm-visible-devices-under-gpu-bind": (
        dict(visible_devices_under_gpu_bind=True),
        dict(visible_devices_under_gpu_bind=False),
    ),
    "rocm-slingshot-no-ofi-plugin": (dict(multi_node=True, net_plugin_on_path=False), dict(net_plugin_on_path=True)),
    # issue #25 item 4: CCL_ALLREDUCE=ring priced >10% slower than topo at the job's node count
    "ccl-setting-slow-at-scale": (
        dict(device="xpu", ccl_setting_slow_at_scale=True),
        dict(ccl_setting_slow_at_scale=False),
    ),
    # ALCF: one rank per tile, 12 per node in FLAT mode
    "launcher-ranks-per-node-mismatch": (dict(ranks_per_node_matches=False), dict(ranks_per_node_matches=True)),
    "launcher-device-hierarchy-mismatch": (dict(hierarchy_matches_ranks=False), dict(hierarchy_matches_ranks=True)),
    "launcher-rank-straddles-sockets": (dict(rank_straddles_sockets=True), dict(rank_straddles_sockets=False)),
    # issue 38: a platform file's [launch] value pasted raw into the job script runs as a command
    "launcher-parameter-runs-a-command": (dict(launch_parameter_executes=True), dict(launch_parameter_executes=False)),
    "launcher-queue-limits": (dict(queue_fits=False), dict(queue_fits=True)),
    "launcher-missing-filesystems": (dict(names_filesystems=False), dict(names_filesystems=True)),
    # DOMAIN 4: after a hung job stale XCCL state makes the next job hang
    "stale-device-processes": (dict(stale_device_processes=True), dict(stale_device_processes=False)),
    "env-differs-from-profile": (dict(differs_from_profile=True), dict(differs_from_profile=False)),
    # doctor --config (diagnose/framework_config_checks.py)
    "zero3-persistence-keeps-params-gathered": (
        dict(engine="deepspeed", persistence_keeps_params_gathered=True),
        dict(persistence_keeps_params_gathered=False),
    ),
    "config-micro-batch-does-not-fit": (dict(micro_batch_fits=False), dict(micro_batch_fits=True)),
    "offload-exceeds-host-memory": (dict(offload_fits_host_memory=False), dict(offload_fits_host_memory=True)),
    # issue 36: official launchers and the misses (Slurm sbatch/srun(1), torch run.py, DeepSpeed config)
    "launcher-one-node-of-many": (dict(launch_spans_job_nodes=False), dict(launch_spans_job_nodes=True)),
    "script-hardcodes-cuda": (dict(device="xpu", hardcodes_cuda=True), dict(device="cuda")),
    "srun-cpus-per-task-not-inherited": (dict(srun_gets_cpus_per_task=False), dict(srun_gets_cpus_per_task=True)),
    "launcher-no-cpu-bind-xpu": (dict(device="xpu", binds_cpus=False), dict(binds_cpus=True)),
    "ds-batch-does-not-hold": (dict(ds_batch_holds=False), dict(ds_batch_holds=True)),
}

# A run that follows every rule: 2 Aurora nodes, FSDP2 per block, eager, PRISM's launcher.
HEALTHY = dict(
    device="xpu",
    backend="xccl",
    engine="fsdp2",
    compile=False,
    multi_node=True,
    find_unused_parameters=False,
    static_graph=False,
    passes_device_id=False,
    root_only_wrap=False,
    reshard_or_sharded=True,
    preloads_pil4dfs=False,
    calls_empty_cache=False,
    workers_after_mesh=False,
    one_element_fp32_allreduce=False,
    exported_before_module_load=False,
    per_rank_exports=True,
    ranks_per_node_matches=True,
    stale_device_processes=False,
    differs_from_profile=False,
    hierarchy_matches_ranks=True,
    rank_straddles_sockets=False,
    launch_parameter_executes=False,
    queue_fits=True,
    names_filesystems=True,
    compiles_whole_under_fsdp1=False,
    rendezvous_unset=False,
    empty_file=False,
    ccl_setting_slow_at_scale=False,
    persistence_keeps_params_gathered=False,
    micro_batch_fits=True,
    offload_fits_host_memory=True,
    backend_is_library_name=False,
    visible_devices_under_gpu_bind=False,
    net_plugin_on_path=True,
    launch_spans_job_nodes=True,
    hardcodes_cuda=False,
    srun_gets_cpus_per_task=True,
    binds_cpus=True,
    ds_batch_holds=True,
)


def fired(facts: dict) -> set[str]:
    return {v.rule.id for v in check(facts)}


def test_every_rule_has_a_situation_from_its_source():
    assert set(SITUATIONS) == {r.id for r in load_rules()}


@pytest.mark.parametrize("rule_id", sorted(SITUATIONS))
def test_rule_fires_in_its_situation_and_not_once_fixed(rule_id):
    situation, fix = SITUATIONS[rule_id]
    assert rule_id in fired(situation)
    assert rule_id not in fired(situation | fix)


@pytest.mark.parametrize("rule_id", sorted(SITUATIONS))
def test_an_unknown_fact_never_matches(rule_id):
    situation, _ = SITUATIONS[rule_id]
    for key in get_rule(rule_id).when:
        assert rule_id not in fired({k: v for k, v in situation.items() if k != key}), key


def test_a_run_that_follows_every_rule_fires_none():
    assert fired(HEALTHY) == set()


def test_when_keys_are_facts():
    assert all(set(r.when) <= FACT_NAMES for r in load_rules())
    bad = {
        "rule": [
            {
                "id": "x",
                "kind": "guardrail",
                "when": {"varlen_attention": True},
                "reason": "r",
                "fix": "f",
                "source": "s",
            }
        ]
    }
    with pytest.raises(SpecError, match="`when` key 'varlen_attention' is not a rule fact"):
        parse_rules(bad)
    with pytest.raises(SpecError, match="'colour' is not a rule fact"):
        check({"colour": "red"})


def test_the_planner_takes_the_engines_facts():
    sc = scenario_from_flags("qwen3-0.6b", platform="aurora", nodes=2)
    facts = {n: plan_facts(sc, get_strategy(n)) for n in ("ddp", "hsdp_full_shard", "zero1")}
    assert facts["ddp"].engine == "ddp" and facts["ddp"].reshard_or_sharded is False
    assert facts["hsdp_full_shard"].reshard_or_sharded and facts["zero1"].reshard_or_sharded
    assert facts["ddp"].device == "xpu" and facts["ddp"].multi_node is True
    assert facts["ddp"].root_only_wrap is None  # the planner does not know the model's modules

"""Guardrails and not-viable combinations, loaded from data/rules.toml.

A rule fires when every key of its `when` table matches the facts; a fact left unknown (None)
never matches (so a rule about XPU stays quiet when the device is unknown). The facts are one
typed class, `RuleFacts`; `load_rules` refuses a `when` key that is not one of its fields.
Each stage builds its facts in one place: the planner (`plan_facts` below), wrap()
(`runtime/wrap.situation`), emit (`emit/launch._refuse_not_viable`) and the doctor
(diagnose/findings.check_observed, which matches `Rule.when` against sets of possible values
for every rule with a `doctor` table).
The engine contributes its own facts (engines/*: `Engine.facts`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from functools import cache
from typing import TYPE_CHECKING, Any, Literal

from prism_strategy.engines import engine_of
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.presets import DATA, build, read_toml

if TYPE_CHECKING:
    from prism_strategy.specs.scenario import Scenario
    from prism_strategy.strategies import StrategySpec


@dataclass(frozen=True, kw_only=True, slots=True)
class RuleFacts:
    """What a stage knows about the run. None: unknown (a rule that needs it stays quiet)."""

    device: str | None = None
    """cpu, cuda, xpu."""
    backend: str | None = None
    engine: str | None = None
    """ddp, fsdp2, deepspeed (from the strategy's engine)."""
    compile: bool | None = None
    multi_node: bool | None = None
    find_unused_parameters: bool | None = None
    static_graph: bool | None = None
    passes_device_id: bool | None = None
    """init_process_group(device_id=...) (wrap() never passes it; the doctor reads scripts)."""
    root_only_wrap: bool | None = None
    """FSDP2 wrapping only the root (no transformer blocks found)."""
    reshard_or_sharded: bool | None = None
    """The strategy shards something (engine fact)."""
    preloads_pil4dfs: bool | None = None
    calls_empty_cache: bool | None = None
    # doctor-only facts: scripts, launchers and the live environment
    workers_after_mesh: bool | None = None
    one_element_fp32_allreduce: bool | None = None
    exported_before_module_load: bool | None = None
    per_rank_exports: bool | None = None
    ranks_per_node_matches: bool | None = None
    stale_device_processes: bool | None = None
    differs_from_profile: bool | None = None
    hierarchy_matches_ranks: bool | None = None
    """ZE_FLAT_DEVICE_HIERARCHY's device count equals the ranks per node."""
    rank_straddles_sockets: bool | None = None
    launch_parameter_executes: bool | None = None
    """A launch option, rendezvous variable or directive of the launcher runs a command."""
    queue_fits: bool | None = None
    """The PBS queue takes the job's node count and walltime (platform [[queues]])."""
    names_filesystems: bool | None = None
    rendezvous_unset: bool | None = None
    """A launcher starts the script with neither a launcher that sets the rendezvous (torchrun,
    mpiexec, srun, deepspeed) nor RANK / WORLD_SIZE / MASTER_ADDR exported (diagnose/rendezvous_checks.py)."""
    empty_file: bool | None = None
    """A launcher or script the doctor was given holds no command or statement."""
    ccl_setting_slow_at_scale: bool | None = None
    """A launcher's CCL_* setting prices collectives more than 10% slower than oneCCL's default at
    the job's node count (estimate/comm_oneccl.py with_ccl_env; diagnose/ccl_scale_checks.py)."""
    compiles_whole_under_fsdp1: bool | None = None
    """A script compiles the model whole (a torch.compile outside any loop over blocks) and wraps it
    with FSDP1: PRISM's stack (doctor-only: wrap() compiles per block)."""
    backend_is_library_name: bool | None = None
    """init_process_group names a collective library that is not torch's backend name ("rccl":
    torch's is "nccl"; specs/libraries.py; diagnose/rocm_checks.py)."""
    visible_devices_under_gpu_bind: bool | None = None
    """A launcher sets HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES while srun binds GPUs itself
    (--gpu-bind / --gpus-per-task set ROCR_VISIBLE_DEVICES) (diagnose/rocm_checks.py)."""
    net_plugin_on_path: bool | None = None
    """A launcher on a platform whose profile loads the library's network plugin (aws-ofi-rccl on
    Slingshot) names the plugin (diagnose/rocm_checks.py)."""
    persistence_keeps_params_gathered: bool | None = None
    """A ZeRO-3 config's persistence threshold keeps most parameters whole (doctor --config)."""
    offload_fits_host_memory: bool | None = None
    """A config's offloaded states fit its nodes' host memory (doctor --config)."""
    micro_batch_fits: bool | None = None
    """The plan says a config's micro-batch fits its strategy (doctor --config)."""
    launch_spans_job_nodes: bool | None = None
    """A multi-node job's launch reaches every node: srun / mpiexec, or a launch helper told
    --nnodes (diagnose/job_checks.py); a bare torchrun runs on the first node only."""
    hardcodes_cuda: bool | None = None
    """A script fixes backend='nccl' or a 'cuda' device with no branch choosing another."""
    srun_gets_cpus_per_task: bool | None = None
    """An #SBATCH --cpus-per-task reaches srun's tasks (srun -c, or SRUN_CPUS_PER_TASK)."""
    binds_cpus: bool | None = None
    """An mpiexec launch passes --cpu-bind."""
    ds_batch_holds: bool | None = None
    """A DeepSpeed config's train_batch_size = micro-batch x accumulation x ranks can hold."""

    def known(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


FACT_NAMES: frozenset[str] = frozenset(f.name for f in fields(RuleFacts))
Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True, kw_only=True, slots=True)
class DoctorHow:
    """How `prism-strategy doctor` reports a rule (a rule without it is not a doctor rule)."""

    severity: Severity
    """When every fact is known: error = the run hangs, crashes or is refused; warning = slower,
    fragile or not validated; info = worth knowing."""
    assume: tuple[Literal["device", "strategy", "nodes"], ...] = ()
    """Unknown fact groups under which the rule still fires, as a warning naming the assumption."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Rule:
    id: str
    kind: Literal["not_viable", "guardrail"]
    when: dict[str, Any]
    reason: str
    fix: str
    source: str
    refuse: bool = False
    doctor: DoctorHow | None = None

    def matches(self, facts: RuleFacts) -> bool:
        for key, want in self.when.items():
            have = getattr(facts, key)
            if have is None:
                return False
            if isinstance(want, list) and have not in want:
                return False
            if not isinstance(want, list) and have != want:
                return False
        return True

    @property
    def blocks(self) -> bool:
        """Not viable, or a guardrail strong enough that wrap() refuses."""
        return self.kind == "not_viable" or self.refuse


@dataclass(frozen=True, kw_only=True, slots=True)
class Violation:
    rule: Rule

    @property
    def message(self) -> str:
        return f"{self.rule.reason} (fix: {self.rule.fix}; source: {self.rule.source})"


def _checked(rule: Rule, where: str) -> Rule:
    unknown = sorted(set(rule.when) - FACT_NAMES)
    if unknown:
        raise SpecError(
            f"{where}: `when` key {unknown[0]!r} is not a rule fact; known: {', '.join(sorted(FACT_NAMES))}"
        )
    return rule


def parse_rules(data: dict[str, Any], where: str = "rules.toml") -> tuple[Rule, ...]:
    """Rules from a parsed rules file; a `when` key that is not a RuleFacts field is a SpecError."""
    out = []
    for r in data.get("rule", []):
        at = f"{where} rule {r.get('id', '?')}"
        out.append(_checked(build(Rule, r, at), at))
    return tuple(out)


@cache
def load_rules() -> tuple[Rule, ...]:
    return parse_rules(read_toml(DATA / "rules.toml"))


def facts_of(facts: RuleFacts | dict[str, Any]) -> RuleFacts:
    """RuleFacts from a dict of known facts (a key that is not a fact is a SpecError)."""
    if isinstance(facts, RuleFacts):
        return facts
    unknown = sorted(set(facts) - FACT_NAMES)
    if unknown:
        raise SpecError(f"{unknown[0]!r} is not a rule fact; known: {', '.join(sorted(FACT_NAMES))}")
    return RuleFacts(**facts)


def check(facts: RuleFacts | dict[str, Any]) -> list[Violation]:
    f = facts_of(facts)
    return [Violation(rule=r) for r in load_rules() if r.matches(f)]


def get_rule(rule_id: str) -> Rule:
    return next(r for r in load_rules() if r.id == rule_id)


def plan_facts(sc: "Scenario", s: "StrategySpec") -> RuleFacts:
    """The planner's facts for one strategy on a scenario; the engine contributes its own."""
    return RuleFacts(
        device=sc.platform.device,
        backend=sc.platform.backend,
        compile=sc.training.compile,
        multi_node=sc.layout.multi_node,
        **engine_of(s).facts(s),
    )


def blocking(sc: "Scenario", s: "StrategySpec") -> tuple[Violation, ...]:
    """What makes s not viable on sc (planning/: each option judged once), in rules.toml's order."""
    return tuple(v for v in check(plan_facts(sc, s)) if v.rule.blocks)

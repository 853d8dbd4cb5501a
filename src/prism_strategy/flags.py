"""The convenience edge: `prism_strategy.plan(model, **flags)` and the CLI's plan and estimate.

A flag is a keyword named as `prism-strategy plan`'s option: a field of one policy
(specs/policies.py BatchPolicy, MemoryPolicy with `ckpt_freq` for its `checkpointing`,
MeasuredPolicy, PlanOptions) or one of the builder's own arguments (inputs/scenario.py
build_scenario: platform, nodes, ranks_per_node, mode, vision, lora, precision, env_profile).
This module is the one place keywords are sorted into policies, by those names: a new knob is one
field in one policy (and its CLI flag) and arrives here without a line changed. Below it nothing
takes a keyword list of run inputs (tests/unit/house/test_no_keyword_inputs.py): the builder
takes the policies whole and planning/ takes the Scenario whole.
"""

from __future__ import annotations

import inspect
import textwrap
from dataclasses import fields
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prism_strategy.inputs.scenario import (
    build_scenario,
    check_ranks_per_node,
    multimodal_of,
    platform_as_measured,
    resolve_platform,
)
from prism_strategy.planning.option import Option, Plan
from prism_strategy.planning.planner import estimate_traced
from prism_strategy.planning.planner import plan as plan_scenario
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.policies import (
    BatchPolicy,
    MeasuredPolicy,
    MemoryPolicy,
    PlanOptions,
    checked_int,
    field_docs,
)
from prism_strategy.specs.scenario import Scenario

if TYPE_CHECKING:
    from prism_strategy.inputs.frameworks.base import ConfigInputs

# --script and --from's readers (inputs/script.py, inputs/frameworks/) are imported where used:
# `from prism_strategy import plan` stays as light as the planner
CKPT_FLAG = "ckpt_freq"
"""The flag of MemoryPolicy.checkpointing."""
PLAN_DEFAULTS = {CKPT_FLAG: "auto", "calibration": "auto"}
"""Where plan() differs from the builder: checkpointing searched, the cached calibration used."""


@cache
def flag_groups() -> dict[str, tuple[str, ...]]:
    """Each flag's home, by name: the builder's own arguments, the policies' fields, PlanOptions'."""
    own = tuple(
        p for p in inspect.signature(build_scenario).parameters if p not in ("model", "batch", "memory", "measured")
    )
    names = lambda cls: tuple(f.name for f in fields(cls))  # noqa: E731
    memory = tuple(CKPT_FLAG if n == "checkpointing" else n for n in names(MemoryPolicy))
    return {
        "scenario": own,
        "batch": names(BatchPolicy),
        "memory": memory,
        "measured": names(MeasuredPolicy),
        "options": names(PlanOptions),
    }


def grouped(fn: str, flags: dict[str, Any], allowed: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """flags sorted by home (flag_groups); TypeError naming a flag no allowed group takes, as Python
    says it for a signature."""
    groups = flag_groups()
    out: dict[str, dict[str, Any]] = {g: {} for g in groups}
    for k, v in flags.items():
        home = next((g for g in allowed if k in groups[g]), None)
        if home is None:
            raise TypeError(f"{fn}() got an unexpected keyword argument {k!r}")
        out[home][k] = v
    return out


def flag_defaults() -> dict[str, Any]:
    """Every flag plan() takes, at plan()'s default (None where the scenario supplies one)."""
    out: dict[str, Any] = {"model": "qwen3-0.6b"}
    out |= {
        k: p.default for k, p in inspect.signature(build_scenario).parameters.items() if k in flag_groups()["scenario"]
    }
    for cls in (BatchPolicy, MemoryPolicy, MeasuredPolicy, PlanOptions):
        out |= {CKPT_FLAG if f.name == "checkpointing" else f.name: f.default for f in fields(cls)}
    return out | PLAN_DEFAULTS


def scenario_from_flags(model: Any = "qwen3-0.6b", **flags: Any) -> Scenario:
    """inputs/scenario.py build_scenario from flags (ckpt_freq defaults to 0 here, "auto" in plan();
    calibration to "none" here, "auto" in plan()). TypeError naming a flag that is not the run's."""
    g = grouped("scenario_from_flags", flags, ("scenario", "batch", "memory", "measured"))
    own = g["scenario"]
    # checked in the order the user reads them: the model, the platform, the layout, the policies
    mm = multimodal_of(model, mode=own.get("mode", "e2e"), vision=own.get("vision"), lora=own.get("lora"))
    plat = resolve_platform(own.get("platform", "aurora"))
    checked_int("--nodes", own.get("nodes", 1))
    if own.get("ranks_per_node") is not None:
        checked_int("ranks per node", own["ranks_per_node"])
    memory = dict(g["memory"])
    checkpointing = memory.pop(CKPT_FLAG, 0)
    return build_scenario(
        mm,
        plat,
        nodes=own.get("nodes", 1),
        ranks_per_node=own.get("ranks_per_node"),
        batch=BatchPolicy(**g["batch"]),
        memory=MemoryPolicy(checkpointing=checkpointing, **memory),
        precision=own.get("precision", "bf16-mixed"),
        env_profile=own.get("env_profile"),
        measured=MeasuredPolicy(**g["measured"]),
    )


def plan(model: Any = "qwen3-0.6b", **flags: Any) -> Plan:
    """Evaluate every strategy for this scenario: the options ranked, the pick and why.
    The keywords are `prism-strategy plan`'s options (`--json` is `plan_dict(result)`, `--markdown FILE`
    is `report.markdown.write_markdown(result, FILE)`). flags -> Scenario (inputs/scenario.py) ->
    planning.plan(scenario, options).

    model: preset name, config.json path, TransformerSpec or nn.Module.
    mode: "e2e" | "projector" | "encoder-projector" (what trains; the last two need `vision`).
    platform: preset name, platform .toml path or PlatformSpec.  nodes: node count.
    ranks_per_node: default the platform's devices per node.
    precision: "bf16-mixed" | "bf16-pure" | "fp32".
    vision: vision encoder preset (adds it and a projector).
    lora: LoRA adapters (specs/lora.py): an adapter_config.json path, LoraConfig fields as a dict, or a
        LoraSpec; the base is frozen and only the adapters train. None = full training.
    env_profile: the env profile the ranks run under: a name (data/env_profiles), a profile .toml path
        or a specs.policies.EnvironmentPolicy; its CCL variables price the collectives
        (estimate/environment.py; a platform file's own CCL keys stay overrides). None = the
        platform's own `env_profile`, the platform as it is.
    model may also be a Scenario (inputs/scenario.py build_scenario): then only the plan's own
        options (sweep_nodes, traced, reduce_dtype, script) and what was measured (calibration,
        comm_curves, rank_jitter) go beside it.

    The other keywords each fill one field of a policy (specs/policies.py); their text below is that
    field's docstring, the help `prism-strategy plan -h` prints (added at import: policy_keywords_doc).
    """
    if isinstance(model, Scenario):
        g = grouped("plan", flags, ("measured", "options"))  # a Scenario carries the run
        measured = MeasuredPolicy(**({"calibration": "auto"} | g["measured"]))
        return plan_scenario(
            model.with_platform(platform_as_measured(model.platform, measured)), PlanOptions(**g["options"])
        )
    g = grouped("plan", flags, tuple(flag_groups()))
    options = PlanOptions(**g["options"])
    run = {k: v for k, v in flags.items() if k not in g["options"]}
    sc = scenario_from_flags(model, **(PLAN_DEFAULTS | run))
    check_ranks_per_node(sc, run.get("ranks_per_node"))
    return plan_scenario(sc, options)


def policy_keywords_doc() -> str:
    """plan()'s keywords that fill a policy field, each with the field's docstring (specs/policies.py
    field_docs), wrapped for a docstring."""
    lines = []
    for cls in (BatchPolicy, MemoryPolicy, MeasuredPolicy, PlanOptions):
        docs = field_docs(cls)
        for f in fields(cls):
            name = CKPT_FLAG if f.name == "checkpointing" else f.name
            lines += textwrap.wrap(f"{name}: {docs[f.name]}", 100, initial_indent="    ", subsequent_indent="        ")
    return "\n".join(lines) + "\n"


plan.__doc__ = (plan.__doc__ or "") + policy_keywords_doc()


def estimate(model: Any, strategy: str, **flags: Any) -> Option | dict[str, Any]:
    """`prism-strategy estimate`: analytic and traced memory of one strategy side by side
    (planning/planner.py estimate_traced). model may be a "pkg.mod:make_model" factory: the scenario
    then gives the layout, training and platform only."""
    if isinstance(model, str) and ":" in model and not model.endswith(".json"):
        return estimate_traced(scenario_from_flags("tiny-llama", **flags), strategy, factory=model)
    sc = scenario_from_flags(model, **flags)
    check_ranks_per_node(sc, flags.get("ranks_per_node"))
    return estimate_traced(sc, strategy)


def config_of(path: str | None, override: bool) -> ConfigInputs | None:
    """`plan --from`'s config, read (None without one); --override needs it."""
    from prism_strategy.inputs.frameworks import read_config

    if path is None:
        if override:
            raise SpecError("--override needs --from FILE: it lets a flag win over what the config says")
        return None
    return read_config(path)


def plan_from_command_line(
    values: dict[str, Any], given: set[str], *, script: str | None, config: ConfigInputs | None, override: bool
) -> Plan:
    """`plan` as the command line asks. values: every flag's value as the command line has it;
    given: the flags given there. The config's fields merged in (inputs/frameworks/plan.py
    configured: a contradiction with a given flag is bad input unless override), then what --script
    says where neither a flag nor the config did (inputs/script.py); a bad input names what the
    script set."""
    from prism_strategy.inputs.frameworks.plan import configured, strategy_verdict
    from prism_strategy.inputs.script import FLAGS as SCRIPT_FLAGS

    section = None
    told = given & set(SCRIPT_FLAGS)
    if config is not None:
        values, section = configured(config, values, given, override)
        told |= {k for k in config.stated if k in SCRIPT_FLAGS}  # the config's inputs win over --script's
    p = _with_script(values, told, script)
    if config is not None and section is not None:
        p.config = section | {"strategy_option": strategy_verdict(p, config.strategy)}
    return p


def _with_script(values: dict[str, Any], told: set[str], script: str | None) -> Plan:
    from prism_strategy.inputs.script import FLAGS as SCRIPT_FLAGS
    from prism_strategy.inputs.script import read_plan_inputs, script_error

    if script is None:
        return plan(**values)
    inputs = {k: values[k] for k in SCRIPT_FLAGS}
    read, section = read_plan_inputs(script).plan_inputs(inputs, told)
    try:
        return plan(**(values | read), script=section)
    except SpecError as e:
        raise script_error(e, section) from None


def plan_for_script(path: str | Path, **flags: Any) -> Plan:
    """`plan --script` from Python: plan() with what the script says, flags given here winning
    (the result's `script` is the JSON section)."""
    from prism_strategy.inputs.script import FLAGS as SCRIPT_FLAGS
    from prism_strategy.inputs.script import read_plan_inputs

    defaults = flag_defaults()
    current = {k: defaults.get(k) for k in SCRIPT_FLAGS} | flags
    read, section = read_plan_inputs(path).plan_inputs(current, given=set(flags) & set(SCRIPT_FLAGS), source="keyword")
    return plan(**(flags | read), script=section)


def plan_for_config(path: str | Path, *, override: bool = False, **flags: Any) -> Plan:
    """`plan --from` from Python: plan() with the config's fields; the flags given here act as
    command-line flags (a contradiction is a SpecError unless `override`). The result's `config` is
    the JSON section."""
    from prism_strategy.inputs.frameworks import read_config
    from prism_strategy.inputs.frameworks.plan import configured, strategy_verdict

    cfg = read_config(path)
    merged, section = configured(cfg, flag_defaults() | flags, set(flags), override)
    result = plan(**{k: v for k, v in merged.items() if k in flags or k in cfg.options})
    result.config = section | {"strategy_option": strategy_verdict(result, cfg.strategy)}
    return result

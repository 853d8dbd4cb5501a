"""The commands a plan prints for the user to run next (commbench at the plan's scale, bench on
one node), built from the plan's own inputs so that each one runs as printed: the model as it was
loaded (a preset name or the config.json / .toml path), the vision encoder and what trains, the
sequence length, micro-batch, accumulation and precision (bf16-pure too: bench casts the model's
parameters to bf16, bench/launch/worker.py precision_setup), the env profile when the plan was given
one (--env-profile: the ranks run under it, bench/launch/rank_env.py), LoRA adapters read from an
adapter_config.json (--lora; adapters from a script or TrainingArguments have no file to pass, and the
commands then run full training), and the platform (preset or file)."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from prism_strategy.specs.lora import lora_argument
from prism_strategy.specs.presets import model_argument, platform_argument

if TYPE_CHECKING:
    from prism_strategy.planning.option import Option
    from prism_strategy.specs.scenario import Scenario


def _scenario_args(sc: "Scenario", pick: "Option | None") -> list[str]:
    m, t = sc.model, sc.training
    args = ["--model", model_argument(m.backbone)]
    if m.vision is not None:
        args += ["--vision", model_argument(m.vision), "--mode", m.mode]
    if m.lora is not None and (adapters := lora_argument(m.lora)) is not None:
        args += ["--lora", adapters]
    args += ["--seq-len", str(t.seq_len)]
    mb = pick.micro_batch if pick is not None else t.micro_batch
    if mb:
        args += ["--micro-batch", str(mb)]
    ga = pick.grad_accum if pick is not None else t.grad_accum
    if ga and ga > 1:
        args += ["--grad-accum", str(ga)]
    args += ["--precision", t.precision]
    if sc.environment.given:  # the as-run platform carries the profile's name: ask the policy
        args += ["--env-profile", sc.environment.profile]
    return args


def commbench_command(sc: "Scenario", strategies: list[str], pick: "Option | None" = None) -> str:
    """`prism-strategy commbench` replaying these strategies' collectives at the plan's layout."""
    lay = sc.layout
    args = [
        "prism-strategy",
        "commbench",
        *_scenario_args(sc, pick),
        "--strategies",
        ",".join(strategies),
        "--nproc",
        str(lay.world),
        "--ranks-per-node",
        str(lay.ranks_per_node),
        "--platform",
        platform_argument(sc.platform),
    ]
    return shlex.join(args)


def bench_command(sc: "Scenario", strategies: list[str], pick: "Option | None" = None) -> str:
    """`prism-strategy bench` running these strategies on one node of the plan's platform; a
    vision-language plan gets commbench on one node (bench builds no vision encoder)."""
    if sc.model.vision is not None:
        return commbench_command(sc, strategies, pick)
    args = [
        "prism-strategy",
        "bench",
        *_scenario_args(sc, pick),
        "--strategies",
        ",".join(strategies),
        "--nproc",
        str(sc.layout.ranks_per_node),
        "--platform",
        platform_argument(sc.platform),
    ]
    return shlex.join(args)

"""The doctor: find the launch mistakes that lose runs, in the live environment, in launchers
and in training scripts. Diagnosis returns dataclasses (diagnose/findings.py: Finding); only
report/ renders them.

Checks extract facts (`passes_device_id`, `per_rank_exports`, ...) and the rules in
data/rules.toml (or data/env_profiles/_known_bad.toml) decide. What the doctor cannot know
(the device, the strategy, the node count) comes from --platform / --strategy / --nodes, from the
header of an emitted file, or from evidence in the files; the launchers' exports reach the
scripts' os.environ reads (one combined report).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prism_strategy.diagnose import framework_config_checks, launcher_checks, live_checks, modules, script_checks
from prism_strategy.diagnose.findings import SEVERITIES, Context, Finding
from prism_strategy.diagnose.launch_options import is_module_load
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.presets import load_platform
from prism_strategy.strategies import get_strategy


@dataclass(frozen=True, kw_only=True, slots=True)
class DoctorReport:
    findings: list[Finding]
    environment: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return 1 if any(f.severity == "error" for f in self.findings) else 0

    def counts(self) -> dict[str, int]:
        return {s: sum(f.severity == s for f in self.findings) for s in SEVERITIES}

    def to_dict(self) -> dict[str, Any]:
        return {
            "findings": [f.to_dict() for f in self.findings],
            "environment": self.environment,
            "summary": self.counts(),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class DoctorRequest:
    launchers: tuple[Path, ...] = ()
    """Shell launchers, and also strategy.toml / ds_config.json files."""
    scripts: tuple[Path, ...] = ()
    platform: str | None = None
    strategy: str | None = None
    nodes: int | None = None
    env_profile: str | None = None
    live: bool | None = None
    """None: check the live environment only when no file is given."""
    clean: bool = False
    settle_s: float = 10.0
    device_globs: tuple[str, ...] = ()
    """Device files a leftover process holds; () = the default /dev/dri, /dev/nvidia* set."""
    module_show: tuple[Path, ...] = ()
    """`module show` output files (or `live`: run it here): what each module load sets, exactly."""
    configs: tuple[Path, ...] = ()
    """Framework configs (torchtitan TOML, DeepSpeed JSON, Accelerate YAML, HF TrainingArguments JSON)."""
    model: str | None = None
    """The model a config runs, where it names none (its micro-batch and ZeRO-3 checks need one)."""


def diagnose(req: DoctorRequest) -> DoctorReport:
    """Run every check the request asks for; SpecError for bad input (unreadable file, bad name)."""
    if req.nodes is not None and req.nodes < 1:
        raise SpecError(f"--nodes must be >= 1, got {req.nodes}")
    ctx = Context(
        platform=load_platform(req.platform) if req.platform else None,
        strategy=get_strategy(req.strategy) if req.strategy else None,
        nodes=req.nodes,
        env_profile=req.env_profile,
    )
    saved = [p for p in req.module_show if str(p) != modules.LIVE]
    shown = tuple(m for p in saved for m in modules.read_module_show(p))
    launchers = [launcher_checks.read_launcher(p, shown) for p in req.launchers]
    if len(saved) < len(req.module_show):  # --module-show live: ask `module show` about what they load
        loaded = [
            n
            for lf in launchers
            for e in getattr(lf, "timeline", ())
            if is_module_load(e)
            for n in modules.loaded_names(e.args)
        ]
        shown += modules.module_show_live(loaded)
        launchers = [launcher_checks.read_launcher(p, shown) for p in req.launchers]
    scripts = [script_checks.read_script(p) for p in req.scripts]
    scripts += framework_config_checks.read_config_files(req.configs, req.model)
    for item in (*launchers, *scripts):
        ctx = item.refine(ctx)
    findings: list[Finding] = []
    for item in (*launchers, *scripts):
        findings += item.check(ctx)
    environment: dict[str, Any] = {}
    if req.live or (req.live is None and not req.launchers and not req.scripts and not req.configs):
        live = live_checks.check_live(ctx, clean=req.clean, settle_s=req.settle_s, device_globs=req.device_globs)
        findings += live.findings
        environment = live.environment
    order = {s: i for i, s in enumerate(SEVERITIES)}
    findings.sort(key=lambda f: (order[f.severity], f.file, f.line, f.rule))
    return DoctorReport(findings=findings, environment=environment)


def refuse_plan_file(path: str) -> None:
    """`doctor --launcher plan.json`: a plan is not a launcher; say what to do with it."""
    import json

    try:
        data = json.loads(Path(path).read_text()) if path.endswith(".json") and Path(path).is_file() else None
    except (OSError, UnicodeDecodeError, ValueError):
        return
    if isinstance(data, dict) and "inputs" in data and "options" in data:
        raise SpecError(
            f"--launcher {path} is a `plan --json` file, not a launcher; write the launchers with "
            f"`prism-strategy emit --from-plan {path} --out {Path(path).with_suffix('')}-emitted` and check those"
        )


def doctor_request(
    *,
    launchers: tuple[str, ...] | list[str],
    scripts: tuple[str, ...] | list[str],
    module_show: tuple[str, ...] | list[str],
    device_globs: tuple[str, ...] | list[str],
    clean: bool,
    live: bool | None,
    settle_s: float,
    configs: tuple[str, ...] | list[str] = (),
    **given: Any,
) -> DoctorRequest:
    """`doctor`'s request from its command-line values (--clean implies --live); bad input raises."""
    if settle_s < 0:
        raise SpecError(f"--settle-s must be >= 0, got {settle_s}")
    for p in launchers:
        refuse_plan_file(p)
    return DoctorRequest(
        launchers=tuple(Path(p) for p in launchers),
        scripts=tuple(Path(p) for p in scripts),
        live=True if clean else live,
        clean=clean,
        settle_s=settle_s,
        device_globs=tuple(device_globs),
        module_show=tuple(Path(p) for p in module_show),
        configs=tuple(Path(p) for p in configs),
        **given,
    )

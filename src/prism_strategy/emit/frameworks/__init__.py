"""`emit --format torchtitan|deepspeed|accelerate --from-plan PLAN.json`: the plan's pick written
in the user's framework. When the plan came from a config of the same format (`plan --from`), the
file is that config with only the fields the plan decides changed (a round trip keeps the rest);
otherwise it is a new file with those fields. Each file says which plan it came from.

One module per format: `SUPPORTS` (the strategies it can express), `FILE` (the default file name)
and `render(choice, base, header) -> text`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prism_strategy.emit.files import FileText
from prism_strategy.emit.frameworks import accelerate, deepspeed, torchtitan
from prism_strategy.emit.from_plan import PlanChoice, plan_choice
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.safe_files import load_json

WRITERS = {"torchtitan": torchtitan, "deepspeed": deepspeed, "accelerate": accelerate}


@dataclass(frozen=True, kw_only=True, slots=True)
class FrameworkChoice:
    """A plan's pick with what a framework file needs beyond the launcher's PlanChoice."""

    pick: PlanChoice
    world: int
    seq_len: int
    model: str
    device: str
    compile_loss: bool
    optimizer: str


@dataclass(frozen=True, kw_only=True, slots=True)
class FrameworkFile:
    strategy: str
    """The option written (the launchers emit the same one)."""
    file: FileText


def framework_file(plan_path: str | Path | None, fmt: str, strategy: str | None = None) -> FrameworkFile:
    """The framework file for the plan's pick (or `strategy`), which `emit` writes beside its launchers."""
    if plan_path is None:
        raise SpecError(
            f"--format {fmt} needs --from-plan PLAN.json (from `plan --json`, or `plan --from` your config)"
        )
    if fmt not in WRITERS:
        raise SpecError(f"--format {fmt!r}: choose one of {', '.join(WRITERS)}")
    writer, data = WRITERS[fmt], _plan_data(Path(plan_path))
    name = strategy or _pick(data, writer, fmt, Path(plan_path))
    if name not in writer.SUPPORTS:
        raise SpecError(
            f"--format {fmt} cannot express {name} ({fmt} runs {', '.join(writer.SUPPORTS)}); "
            f"pick one of those with --strategy"
        )
    choice = _choice(data, plan_choice(plan_path, name))
    config = data["inputs"].get("config") or {}
    base = config.get("content") if config.get("format") == fmt else None
    header = (
        f"written by prism-strategy emit --format {fmt} from plan {Path(plan_path).name}: {name}, "
        f"micro-batch {choice.pick.micro_batch} x accumulation {choice.pick.grad_accum} on "
        f"{choice.pick.nodes} node(s) x {choice.world // choice.pick.nodes} ranks of {choice.pick.platform}"
    )
    original = Path(str(config.get("file", writer.FILE))).name
    file = writer.FILE if base is None or fmt == "deepspeed" else original  # strategy.toml names ds_config.json
    text = writer.render(choice, base, header)
    kept = f" (from {original}, its other fields kept)" if base is not None else ""
    return FrameworkFile(strategy=name, file=FileText(name=file, text=text, description=f"{fmt} config{kept}"))


def entry_script(extra: FrameworkFile | None, fmt: str | None, out: str, script: str, args: tuple[str, ...]):
    """(script, script arguments) each rank runs: a format with its own entry point (torchtitan's
    `-m torchtitan.train --job.config_file FILE`) replaces the default train.py, with the written
    file's absolute path and the user's arguments after it; a --script the user named is kept."""
    entry = getattr(WRITERS.get(fmt or ""), "ENTRY", None)
    if extra is None or entry is None or script != DEFAULT_SCRIPT:
        return script, args
    first, *rest = entry
    return first, (*rest, str(Path(out).resolve() / extra.file.name), *args)


DEFAULT_SCRIPT = "train.py"
"""emit's --script default."""


def write_with(req: Any, out: str, extra: FrameworkFile | None, *, force: bool = False):
    """emit's launcher files with the framework file among them (it replaces a launcher file of its
    name: ds_config.json), written whole or not at all: (emitted, written)."""
    from dataclasses import replace

    from prism_strategy.emit.files import write_files_atomically
    from prism_strategy.emit.launch import emit_files

    emitted = emit_files(req, Path(out))
    if extra is not None:
        files = [f for f in emitted.files if f.name != extra.file.name] + [extra.file]
        emitted = replace(emitted, files=files)
    return emitted, write_files_atomically(Path(out), emitted.files, force=force)


def _plan_data(path: Path) -> dict[str, Any]:
    try:
        data = load_json(path)
    except SpecError:
        return {"inputs": {}, "options": []}  # plan_choice names the problem
    return data if isinstance(data, dict) and isinstance(data.get("inputs"), dict) else {"inputs": {}, "options": []}


def _pick(data: dict[str, Any], writer: Any, fmt: str, path: Path) -> str:
    """The plan's pick when the format can express it; else the config's own strategy when
    feasible; else the fastest feasible option the format can express."""
    options = [o for o in data.get("options", []) if isinstance(o, dict) and o.get("feasible")]
    config = data["inputs"].get("config") or {}
    for name in (data.get("recommended"), config.get("strategy")):
        if name in writer.SUPPORTS and any(o.get("strategy") == name for o in options):
            return name
    usable = sorted(
        (o for o in options if o.get("strategy") in writer.SUPPORTS), key=lambda o: -(o.get("samples_per_s") or 0)
    )
    if not usable:
        if not data.get("options"):
            return data.get("recommended") or ""  # plan_choice names the problem
        raise SpecError(f"--from-plan {path}: no feasible option {fmt} can express ({', '.join(writer.SUPPORTS)})")
    return usable[0]["strategy"]


def _choice(data: dict[str, Any], pick: PlanChoice) -> FrameworkChoice:
    from prism_strategy.specs.presets import load_platform

    inputs = data["inputs"]
    platform = load_platform(pick.platform)
    rpn = pick.ranks_per_node or platform.hardware.devices_per_node
    return FrameworkChoice(
        pick=pick,
        world=pick.nodes * rpn,
        seq_len=int(inputs.get("seq_len") or 1024),
        model=str(inputs.get("model", "")),
        device=platform.device,
        compile_loss=bool(inputs.get("compile_loss", False)),
        optimizer=str(inputs.get("optimizer", "adamw")),
    )


__all__ = [
    "DEFAULT_SCRIPT",
    "WRITERS",
    "FrameworkChoice",
    "FrameworkFile",
    "entry_script",
    "framework_file",
    "write_with",
]

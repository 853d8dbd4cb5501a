"""The classic ROCm launch mistakes, as facts for data/rules.toml (the rules say why and how to
fix; the library facts come from specs/libraries.py, data/libraries/*.toml):
- backend_is_library_name: init_process_group("rccl") (or "oneccl"): the library's name, not
  torch's backend name ("nccl" on ROCm, "xccl" on XPU): torch raises at init;
- visible_devices_under_gpu_bind: HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES set while srun binds
  GPUs itself (--gpu-bind, --gpus-per-task set ROCR_VISIBLE_DEVICES per rank): HIP's indices are
  then relative to the one device left, so HIP_VISIBLE_DEVICES=$SLURM_LOCALID hides it from
  every rank but the first;
- net_plugin_on_path: the platform's env profile loads the library's network plugin
  (aws-ofi-rccl on Slingshot) but the launcher never names it: RCCL falls back to TCP sockets.
  Read from what the ranks inherit: an exported value (LD_LIBRARY_PATH) or a module load
  naming the plugin.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from prism_strategy.diagnose.findings import Context, Finding, check_observed
from prism_strategy.diagnose.launch_options import option_str
from prism_strategy.emit.env import load_env_profile
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.libraries import backend_names, libraries

if TYPE_CHECKING:
    from prism_strategy.inputs.script_file import ScriptFile

GPU_BIND_OPTIONS = ("--gpu-bind", "--gpus-per-task")
"""srun options that give each rank its own devices (Slurm sets ROCR_VISIBLE_DEVICES on AMD GPUs)."""


def check_backend_name(s: ScriptFile, ctx: Context) -> list[Finding]:
    out = []
    for c in s.find("init_process_group"):
        arg = c.kwarg("backend") or (c.node.args[0] if c.node.args else None)
        name = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None
        lib = next((x for x in libraries() if x.name == name and name not in backend_names()), None)
        if lib is not None:
            detail = f'init_process_group("{name}"): torch\'s backend for {lib.name} is "{lib.torch_backend}"'
            out += check_observed({"backend_is_library_name": True}, ctx, **s.where(c, detail))
    return out


def check_rocm_launch(f: Any, ctx: Context) -> list[Finding]:
    """The launcher's GPU selection and network plugin (f: diagnose/launcher_checks.LauncherFile)."""
    if f.launch is None:
        return []
    return _visible_devices(f, ctx) + _net_plugin(f, ctx)


def _visible_devices(f: Any, ctx: Context) -> list[Finding]:
    bind = next((n for n in GPU_BIND_OPTIONS if option_str(f.launch, (n,)) is not None), None)
    names = {n for lib in libraries() for n in lib.other_visible_devices}
    sets = [(e.name, e.file, e.line) for e in f.rank_timeline() if e.kind == "export" and e.name in names]
    sets += [(n, f.launch.file, f.launch.line) for n in _srun_exported(f.launch.args) if n in names]
    if bind is None or not sets:
        return []
    name, file, line = sets[0]
    detail = f"{name} set while srun {bind} binds the GPUs (ROCR_VISIBLE_DEVICES per rank)"
    return check_observed({"visible_devices_under_gpu_bind": True}, ctx, file=file, line=line, detail=detail)


def _net_plugin(f: Any, ctx: Context) -> list[Finding]:
    p = ctx.platform
    if p is None or not p.library.net_plugin_repo or not p.env_profile:
        return []
    stem = p.library.net_plugin_repo.rsplit("/", 1)[-1]
    try:
        profile = load_env_profile(p.env_profile)
    except SpecError:
        return []
    if not any(stem in x.value for x in profile.prepend):
        return []  # the platform's fabric needs no plugin (RDMA NICs RCCL drives itself)
    said = " ".join(f"{e.value or ''} {' '.join(e.args)}" for e in f.rank_timeline() if e.kind in ("export", "module"))
    if stem in said.lower() or p.library.net_plugin.removesuffix(".so").removeprefix("lib") in said.lower():
        return []
    detail = f"{p.name}: no {stem} ({p.library.net_plugin}) on the ranks' LD_LIBRARY_PATH"
    return check_observed({"net_plugin_on_path": False}, ctx, file=str(f.path), line=f.launch.line, detail=detail)


def _srun_exported(args: tuple[str, ...]) -> list[str]:
    """Names srun --export=ALL,NAME=V,... passes (the list may reach the shell split in pieces)."""
    start = next((k for k, a in enumerate(args) if a.startswith("--export")), None)
    if start is None:
        return []
    pieces = [p for a in args[start:] if not a.startswith("-") or a.startswith("--export") for p in a.split(",")]
    return [p.removeprefix("--export=").split("=", 1)[0] for p in pieces if "=" in p.removeprefix("--export=")]

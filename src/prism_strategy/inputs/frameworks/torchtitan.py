"""torchtitan job TOML (the `--job.config_file` of torchtitan's ConfigManager), as JobConfig at
238fa99 reads it (torchtitan/config/job_config.py): an absent field is JobConfig's default, which
torchtitan runs with (local_batch_size 8, seq_len 2048, selective AC every 2nd layer, fused AdamW,
bf16 params with fp32 reduce), so it is read as that default and marked `default`.

Data parallelism only: tensor, pipeline, context and expert parallel degrees above 1 are refused
(a plan of the data-parallel part alone would mislead). HSDP when replicate and shard degrees are
both above 1 (parallelize_llama / apply_fsdp on the ["dp_replicate", "fsdp"] mesh), DDP when
only replicate is, FSDP otherwise; fsdp_reshard_after_forward "never" keeps params gathered
(shard_grad_op)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prism_strategy.emit.frameworks.models import preset_for
from prism_strategy.inputs.frameworks.base import (
    UNREAD,
    Collector,
    ConfigInputs,
    boolean,
    integer,
    load,
    refuse_non_dp,
    renamed,
    rest,
    section,
)

NAME = "torchtitan"
SECTIONS = ("job", "model", "training", "parallelism", "activation_checkpoint", "compile", "optimizer")
MODELLED = {"model", "training", "parallelism", "activation_checkpoint", "compile", "optimizer", "quantize"}
OTHER_SECTIONS = {
    "job": "names the run and its output folder",
    "profiling": "profiling does not change the step the plan models",
    "metrics": "logging only",
    "lr_scheduler": "the learning-rate schedule changes neither memory nor communication",
    "checkpoint": "model checkpoints (saving) are outside the training step",
    "validation": "validation runs outside the training step",
    "comm": "timeouts and the flight recorder: no effect on the step's cost",
    "memory_estimation": "torchtitan's own estimator; the plan makes its own",
    "fault_tolerance": "torchft replicas are not modelled",
    "experimental": "experimental switches are not modelled",
    "debug": "debug switches (seeds, determinism) do not change the modelled step",
    "float8": "float8 settings apply only with a float8 converter",
}
NON_DP = ("tensor_parallel_degree", "pipeline_parallel_degree", "context_parallel_degree", "expert_parallel_degree")
DEFAULTS = {
    "training": {
        "local_batch_size": 8,
        "global_batch_size": -1,
        "seq_len": 2048,
        "dtype": "float32",
        "mixed_precision_param": "bfloat16",
        "mixed_precision_reduce": "float32",
    },
    "parallelism": {
        "data_parallel_replicate_degree": 1,
        "data_parallel_shard_degree": -1,
        "fsdp_reshard_after_forward": "default",
    },
    "activation_checkpoint": {"mode": "selective", "selective_ac_option": "2"},
    "compile": {"enable": False, "components": ["model", "loss"]},
    "optimizer": {"name": "AdamW", "implementation": "fused"},
}
"""JobConfig's defaults (torchtitan/config/job_config.py at 238fa99) of the fields read here."""
IMPLEMENTATION = {"fused": "adamw-fused", "foreach": "adamw-foreach", "for-loop": "adamw-loop"}


def looks_like(syntax: str, data: Any) -> bool:
    if syntax != "toml" or not isinstance(data, dict):
        return False
    return any(isinstance(data.get(s), dict) for s in ("parallelism", "activation_checkpoint")) or (
        isinstance(data.get("model"), dict) and "flavor" in data["model"]
    )


def read(path: Path) -> ConfigInputs:
    _, content = load(path)
    c = Collector(path=path)
    data = renamed(c, NAME, content)  # older JobConfig names read as today's (data/framework_fields.toml)
    _model(c, section(c, data, "model"), path)
    training = section(c, data, "training")
    _training(c, training)
    _parallelism(c, section(c, data, "parallelism"))
    _activation_checkpoint(c, section(c, data, "activation_checkpoint"))
    _compile(c, section(c, data, "compile"))
    _optimizer(c, section(c, data, "optimizer"))
    for name, value in data.items():
        if name not in MODELLED:
            c.ignore(
                name,
                value,
                OTHER_SECTIONS.get(name, UNREAD),
            )
    if "quantize" in data:
        c.ignore(
            "quantize",
            data["quantize"],
            "float8 / MX settings: applies only with a converter, which is not modelled"
            if _converters(data)
            else "applies only when [model] converters name it (none here)",
        )
    return c.result(NAME, content)


def _get(c: Collector, sec: dict[str, Any], table: str, key: str) -> tuple[Any, bool]:
    """(value, is_default): the file's value, else JobConfig's default."""
    if key in sec:
        return sec[key], False
    return DEFAULTS[table][key], True


def _rest(c: Collector, sec: dict[str, Any], table: str, read_keys: set[str]) -> None:
    rest(c, NAME, sec, table, read_keys)


def _model(c: Collector, sec: dict[str, Any], path: Path) -> None:
    name, flavor = sec.get("name", "llama3"), sec.get("flavor", "debugmodel")
    field = "model.name, model.flavor"
    preset = preset_for(NAME, str(name), str(flavor))
    beside = [p / "config.json" for p in (Path(str(sec.get("hf_assets_path", ""))), path.parent) if str(p) != "."]
    found = next((p for p in beside if p.is_file()), None) if preset is None else None
    if preset is not None:
        c.use(field, f"{name} {flavor}", "model", preset, note="torchtitan's flavor of the same architecture")
    elif found is not None:
        c.use(field, f"{name} {flavor}", "model", str(found), note=f"{found}: the model's own config.json")
    else:
        c.ignore(
            field,
            f"{name} {flavor}",
            "no preset has this architecture and no config.json is beside it: the model comes from --model",
        )
    for conv in _converters({"model": sec}):
        c.ignore(
            "model.converters",
            conv,
            f"the {conv} converter (low-precision matmuls) is not modelled: "
            "the plan prices bf16 matmuls and bf16 gathers",
        )
    _rest(c, sec, "model", {"name", "flavor", "converters"})


def _converters(data: dict[str, Any]) -> list[str]:
    conv = data.get("model", {}).get("converters", [])
    return [str(x) for x in conv] if isinstance(conv, list) else [str(conv)]


def _training(c: Collector, sec: dict[str, Any]) -> None:
    t = "training"
    mb, d = _get(c, sec, t, "local_batch_size")
    c.use("training.local_batch_size", mb, "micro_batch", integer(c, "training.local_batch_size", mb, 1), default=d)
    gb, d = _get(c, sec, t, "global_batch_size")
    if integer(c, "training.global_batch_size", gb, -1) > 0:
        c.use("training.global_batch_size", gb, "global_batch", int(gb), default=d)
    else:
        c.use(
            "training.global_batch_size",
            gb,
            "grad_accum",
            1,
            note="-1: local batch x data-parallel degree, no accumulation",
            default=d,
        )
    seq, d = _get(c, sec, t, "seq_len")
    c.use("training.seq_len", seq, "seq_len", integer(c, "training.seq_len", seq, 1), default=d)
    dtype, d1 = _get(c, sec, t, "dtype")
    param, d2 = _get(c, sec, t, "mixed_precision_param")
    if dtype not in ("bfloat16", "float32") or param not in ("bfloat16", "float32"):
        raise c.bad(
            "training.dtype / mixed_precision_param",
            f"must be bfloat16 or float32, got {dtype!r} / {param!r}",
            "fix the value in the file",
        )
    precision = "bf16-pure" if dtype == "bfloat16" else "bf16-mixed" if param == "bfloat16" else "fp32"
    c.use(
        "training.dtype, training.mixed_precision_param",
        f"{dtype} / {param}",
        "precision",
        precision,
        default=d1 and d2,
    )
    red, d = _get(c, sec, t, "mixed_precision_reduce")
    if red != "float32":
        raise c.bad(
            "training.mixed_precision_reduce",
            f"must be float32 (JobConfig's only choice), got {red!r}",
            "fix the value in the file",
        )
    c.use("training.mixed_precision_reduce", red, "reduce_dtype", "fp32", default=d)
    if sec.get("enable_cpu_offload"):
        c.offload |= {"params", "optimizer"}
        c.offload_engine = "fsdp"
        c.ignore(
            "training.enable_cpu_offload",
            True,
            "CPU offload of FSDP states is not modelled: the plan's device memory holds them on the device",
        )
    read_keys = {*DEFAULTS[t], "enable_cpu_offload"}
    _rest(c, sec, t, read_keys)


def _parallelism(c: Collector, sec: dict[str, Any]) -> None:
    p = "parallelism"
    above = {f"parallelism.{k}": sec[k] for k in NON_DP if integer(c, f"parallelism.{k}", sec.get(k, 1), 1) > 1}
    refuse_non_dp(c, above)
    for key in NON_DP:
        if key in sec:
            c.use(f"parallelism.{key}", sec[key], note="1: none, data parallelism only")
    rep, _ = _get(c, sec, p, "data_parallel_replicate_degree")
    shard, _ = _get(c, sec, p, "data_parallel_shard_degree")
    rep = integer(c, "parallelism.data_parallel_replicate_degree", rep, 1)
    shard = integer(c, "parallelism.data_parallel_shard_degree", shard, -1)
    if shard == 0:
        raise c.bad("parallelism.data_parallel_shard_degree", "= 0", "use -1 (the ranks left) or a degree >= 1")
    reshard, d = _get(c, sec, p, "fsdp_reshard_after_forward")
    if reshard not in ("default", "always", "never"):
        raise c.bad("parallelism.fsdp_reshard_after_forward", f"= {reshard!r}", "use default, always or never")
    kind = "shard_grad_op" if reshard == "never" else "full_shard"
    if not d:
        c.use(
            "parallelism.fsdp_reshard_after_forward",
            reshard,
            note={
                "default": "torchtitan's default: reshard after forward unless pipeline parallel (none here): full_shard",
                "always": "reshard after every forward: full_shard",
                "never": "keep params gathered after forward: shard_grad_op",
            }[reshard],
        )
    if shard == 1:
        c.strategy = "ddp"
    else:
        c.strategy = f"hsdp_{kind}" if rep > 1 else f"fsdp_{kind}"
    c.use(
        "parallelism.data_parallel_replicate_degree, parallelism.data_parallel_shard_degree",
        f"{rep} / {shard}",
        note=f"runs {c.strategy}",
    )
    if rep > 1 or shard > 1:
        c.dp_degrees = (rep, shard)
        c.dp_fields = "parallelism.data_parallel_replicate_degree x data_parallel_shard_degree"
    _rest(c, sec, p, {*DEFAULTS[p], *NON_DP})


def _activation_checkpoint(c: Collector, sec: dict[str, Any]) -> None:
    a = "activation_checkpoint"
    mode, d = _get(c, sec, a, "mode")
    option, d2 = _get(c, sec, a, "selective_ac_option")
    if mode == "none":
        c.use("activation_checkpoint.mode", mode, "ckpt_freq", 0, default=d)
    elif mode == "full":
        c.use("activation_checkpoint.mode", mode, "ckpt_freq", 1, note="every block", default=d)
    elif mode == "selective" and str(option) == "op":
        c.use(
            "activation_checkpoint.mode, activation_checkpoint.selective_ac_option",
            "selective / op",
            "ckpt_freq",
            "sac",
            default=d and d2,
        )
    elif mode == "selective":
        k = integer(
            c,
            "activation_checkpoint.selective_ac_option",
            int(option) if str(option).isascii() and str(option).isdigit() else option,
            1,
        )
        c.use(
            "activation_checkpoint.mode, activation_checkpoint.selective_ac_option",
            f"selective / {option}",
            "ckpt_freq",
            k,
            note=f"every {k}-th block",
            default=d and d2,
        )
    elif mode == "memory_budget":
        c.ignore(
            "activation_checkpoint.mode",
            mode,
            "the compiler's memory-budget partitioner is not modelled: the plan searches checkpointing (auto)",
        )
    else:
        raise c.bad("activation_checkpoint.mode", f"= {mode!r}", "use none, full, selective or memory_budget")
    if mode != "selective" and "selective_ac_option" in sec:
        c.use(
            "activation_checkpoint.selective_ac_option",
            option,
            note=f"applies only with mode = selective; mode = {mode} decides",
        )
    _rest(c, sec, a, set(DEFAULTS[a]))


def _compile(c: Collector, sec: dict[str, Any]) -> None:
    on, d = _get(c, sec, "compile", "enable")
    on = boolean(c, "compile.enable", on)
    c.use("compile.enable", on, "compile", on, default=d)
    parts, d2 = _get(c, sec, "compile", "components")
    if on:
        c.use("compile.components", parts, "compile_loss", "loss" in parts, default=d2)
    elif "components" in sec:
        c.ignore("compile.components", parts, "compile is off")
    _rest(c, sec, "compile", set(DEFAULTS["compile"]))


def _optimizer(c: Collector, sec: dict[str, Any]) -> None:
    name, d = _get(c, sec, "optimizer", "name")
    impl, d2 = _get(c, sec, "optimizer", "implementation")
    if str(name).lower() not in ("adamw", "adam"):
        c.ignore("optimizer.name", name, "only AdamW/Adam (two moments) and SGD are modelled: planned as adamw")
    elif impl not in IMPLEMENTATION:
        raise c.bad("optimizer.implementation", f"= {impl!r}", "use fused, foreach or for-loop")
    else:
        c.use(
            "optimizer.name, optimizer.implementation",
            f"{name} / {impl}",
            "optimizer",
            IMPLEMENTATION[impl],
            default=d2,
        )
    _rest(c, sec, "optimizer", set(DEFAULTS["optimizer"]))

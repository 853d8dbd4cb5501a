"""DeepSpeed ds_config.json, as deepspeed 0.19's DeepSpeedConfig reads it (runtime/config.py,
runtime/zero/config.py DeepSpeedZeroConfig). The stage fixes the strategy (zero1/2/3; stage 0,
DeepSpeed's plain data parallelism, is planned as ddp). "auto" is the value HF Trainer and
Accelerate fill in from their own arguments: here it reads as "not said", the plan's default.

engines/deepspeed.py models one bucket size for reduce, all-gather and prefetch, the overlap_comm
our ds_config writes per stage, and DeepSpeed's default stage-3 thresholds; a value that differs
is listed as ignored, with the modelled value, never silently planned as if it were used."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prism_strategy.engines.deepspeed import (
    LOW_PRECISION_MASTER,
    MAX_REUSE_DISTANCE,
    OVERLAP_COMM,
    PERSISTENCE_THRESHOLD,
    SUB_GROUP_SIZE,
)
from prism_strategy.inputs.frameworks.base import Collector, ConfigInputs, boolean, integer, load, renamed, section

NAME = "deepspeed"
MiB = 2**20
AUTO = "auto: filled in by HF Trainer / Accelerate from their own arguments; the plan's default is used"
KEYS = ("zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size", "gradient_accumulation_steps")
LOGGING = "logging, printing or a training-loop setting: not the step's memory or communication"
TOP_IGNORED = {
    "prism_strategy_plan": "which prism-strategy plan wrote this file (emit --format deepspeed)",
    "scheduler": "the learning-rate schedule changes neither memory nor communication",
    "gradient_clipping": "clipping costs one norm all-reduce (control traffic, not modelled)",
    "steps_per_print": LOGGING,
    "wall_clock_breakdown": LOGGING,
    "flops_profiler": LOGGING,
    "tensorboard": LOGGING,
    "wandb": LOGGING,
    "csv_monitor": LOGGING,
    "comms_logger": LOGGING,
    "prescale_gradients": "pre-scaling is arithmetic, not memory or communication",
    "gradient_predivide_factor": "pre-division is arithmetic, not memory or communication",
    "zero_allow_untested_optimizer": "permits a client optimizer; the plan models AdamW-like state",
    "torch_autocast": "DeepSpeed's torch.autocast wrapper is not modelled (bf16/fp16 sections are)",
    "activation_checkpointing": "applies only where the model calls deepspeed.checkpointing (Megatron-style); "
    "which blocks are checkpointed is the model's, so the plan searches it (--ckpt-freq sets it)",
    "data_types": "gradient accumulation dtype is not modelled (the engine model accumulates in the model dtype)",
}


def looks_like(syntax: str, data: Any) -> bool:
    return (
        syntax == "json"
        and isinstance(data, dict)
        and "output_dir" not in data
        and (any(k in data for k in KEYS) or isinstance(data.get("bf16"), dict) or isinstance(data.get("fp16"), dict))
    )


def read(path: Path) -> ConfigInputs:
    _, data = load(path)
    c = Collector(path=path)
    read_into(c, data)
    return c.result(NAME, data)


def read_into(c: Collector, data: dict[str, Any], prefix: str = "") -> None:
    """Read a ds_config dict into `c` (also Accelerate's and HF Trainer's deepspeed file)."""
    data = renamed(c, NAME, data, prefix)  # deprecated names as DeepSpeed reads them (data/framework_fields.toml)
    bytes_per = _precision(c, data, prefix)
    _batch(c, data, prefix)
    _zero(c, section(c, data, "zero_optimization"), bytes_per, prefix + "zero_optimization.")
    if "communication_data_type" in data:
        v = data["communication_data_type"]
        if v in ("fp32", "bf16"):
            c.use(prefix + "communication_data_type", v, "reduce_dtype", v)
        else:
            c.ignore(prefix + "communication_data_type", v, "only fp32 and bf16 reductions are modelled")
    opt = section(c, data, "optimizer")
    if opt:
        kind = str(opt.get("type", "")).lower()
        if kind in ("adam", "adamw", "fusedadam"):
            c.use(
                prefix + "optimizer.type",
                opt.get("type"),
                "optimizer",
                "adamw",
                note="DeepSpeed builds it: "
                + ("bf16" if c.options.get("precision") == "bf16-pure" else "fp32")
                + " moments on its flat partition",
            )
            if "params" in opt:
                c.ignore(prefix + "optimizer.params", opt["params"], "hyperparameters: not memory or communication")
        else:
            c.ignore(
                prefix + "optimizer",
                opt,
                f"{opt.get('type')!r}: only Adam-like and SGD state is modelled; planned as adamw",
            )
    comp = data.get("compile")
    if comp is not None:
        on = bool(comp) and (not isinstance(comp, dict) or any(v is True for v in comp.values()))
        c.use(prefix + "compile", comp, "compile", on)
    read_keys = {*KEYS, "bf16", "fp16", "communication_data_type", "optimizer", "compile"}
    for k, v in data.items():
        if k not in read_keys:
            c.ignore(prefix + k, v, TOP_IGNORED.get(k, "not a setting the plan models"))


def _enabled(c: Collector, data: dict[str, Any], key: str, prefix: str) -> bool:
    sec = data.get(key)
    if sec is None:
        return False
    if not isinstance(sec, dict):
        raise c.bad(prefix + key, f'must be an object like {{"enabled": true}}, got {sec!r}', "fix the file")
    v = sec.get("enabled", False)
    return v == "auto" or boolean(c, f"{prefix}{key}.enabled", v)


def _precision(c: Collector, data: dict[str, Any], prefix: str) -> int:
    bf16, fp16 = _enabled(c, data, "bf16", prefix), _enabled(c, data, "fp16", prefix)
    if bf16 and fp16:
        raise c.bad(prefix + "bf16/fp16", "are both enabled", "enable one of them")
    if bf16 and _low_precision_master(c, data.get("bf16") or {}, prefix):
        c.use(
            f"{prefix}bf16.enabled, {prefix}bf16.bf16_master_weights_and_grads, {prefix}bf16.bf16_optimizer_states",
            True,
            "precision",
            "bf16-pure",
            note="bf16 params and grads, bf16 master copy and bf16 Adam moments (DeepSpeed >= 0.18.3, #7700)",
        )
    elif bf16:
        c.use(
            prefix + "bf16.enabled",
            True,
            "precision",
            "bf16-mixed",
            note="DeepSpeed's bf16 keeps fp32 master weights and fp32 Adam state",
        )
    elif fp16:
        c.use(
            prefix + "fp16.enabled",
            True,
            "precision",
            "bf16-mixed",
            note="fp16 has bf16's bytes per element: planned as bf16-mixed; loss scaling is not modelled",
        )
    else:
        c.use(prefix + "bf16, " + prefix + "fp16", "off", "precision", "fp32", note="neither enabled: fp32 throughout")
    for key in ("bf16", "fp16"):
        for k, v in (data.get(key) or {}).items():
            if key == "bf16" and k in LOW_PRECISION_MASTER and bf16:
                continue  # read with bf16.enabled
            if k != "enabled":
                c.ignore(f"{prefix}{key}.{k}", v, "loss-scaling and casting details: not memory or communication")
            elif key != ("bf16" if bf16 else "fp16" if fp16 else None):
                c.use(f"{prefix}{key}.enabled", v, note="off")
    return 2 if bf16 or fp16 else 4


def _low_precision_master(c: Collector, sec: dict[str, Any], prefix: str) -> bool:
    """bf16_master_weights_and_grads + bf16_optimizer_states, as DeepSpeed checks them
    (runtime/config.py and base_optimizer.py _configure_master_weights): optimizer states in bf16
    need bf16 master weights; bf16 master weights alone need ZeRO-Offload, not modelled."""
    master, states = (boolean(c, f"{prefix}bf16.{k}", sec.get(k, False)) for k in LOW_PRECISION_MASTER)
    if states and not master:
        raise c.bad(
            prefix + "bf16.bf16_optimizer_states",
            "is true without bf16_master_weights_and_grads (DeepSpeed refuses it)",
            "set bf16_master_weights_and_grads true as well",
        )
    if master and not states:
        c.ignore(
            prefix + "bf16.bf16_master_weights_and_grads",
            True,
            "without bf16_optimizer_states DeepSpeed needs ZeRO-Offload (base_optimizer.py), "
            "and offload is not modelled: planned with fp32 master weights, which overstates device memory",
        )
    return master and states


def _batch(c: Collector, data: dict[str, Any], prefix: str) -> None:
    for key, keyword in (
        ("train_micro_batch_size_per_gpu", "micro_batch"),
        ("gradient_accumulation_steps", "grad_accum"),
        ("train_batch_size", "global_batch"),
    ):
        v = data.get(key)
        if v is None:
            continue
        if v == "auto":
            c.ignore(prefix + key, v, AUTO)
        else:
            c.use(prefix + key, v, keyword, integer(c, prefix + key, v, 1))


def _zero(c: Collector, z: dict[str, Any], bytes_per: int, p: str) -> None:
    stage = integer(c, p + "stage", z.get("stage", 0), 0)
    if stage > 3:
        raise c.bad(p + "stage", f"= {stage}", "use 0, 1, 2 or 3")
    c.strategy = f"zero{stage}" if stage else "ddp"
    c.use(
        p + "stage",
        stage,
        note=f"runs {c.strategy}" + ("" if stage else " (stage 0: DeepSpeed's plain data parallelism, planned as ddp)"),
    )
    if stage == 0:
        for k, v in z.items():
            if k != "stage":
                c.ignore(p + k, v, "ZeRO settings have no effect at stage 0")
        return
    read_keys = {"stage"} | _buckets(c, z, bytes_per, p) | _modelled(c, z, stage, p) | _offload(c, z, p)
    for k, v in z.items():
        if k not in read_keys:
            c.ignore(p + k, v, "not modelled (the engine model's ZeRO settings: engines/deepspeed.py)")


def _buckets(c: Collector, z: dict[str, Any], bytes_per: int, p: str) -> set[str]:
    """reduce_bucket_size -> bucket_mb; the model uses it for the all-gather and prefetch buckets too."""
    bucket = z.get("reduce_bucket_size")
    if bucket == "auto":
        c.ignore(p + "reduce_bucket_size", bucket, AUTO)
    elif bucket is not None:
        elems = integer(c, p + "reduce_bucket_size", bucket, 2)
        c.use(
            p + "reduce_bucket_size",
            bucket,
            "bucket_mb",
            elems * bytes_per / MiB,
            note="elements x bytes per element, in MiB",
        )
    for k in ("allgather_bucket_size", "stage3_prefetch_bucket_size"):
        if k in z and z[k] == "auto":
            c.ignore(p + k, z[k], AUTO)
        elif k in z and z[k] == bucket:
            c.use(p + k, z[k], note="the reduce bucket's size, as the engine model runs it")
        elif k in z:
            c.ignore(
                p + k,
                z[k],
                "the engine model uses reduce_bucket_size for every bucket"
                + ("" if bucket in (None, "auto") else f" ({bucket})"),
            )
    return {"reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size"}


def _modelled(c: Collector, z: dict[str, Any], stage: int, p: str) -> set[str]:
    """Settings the engine model fixes: used where the file agrees, ignored (with the model's) where not."""
    modelled = {"overlap_comm": OVERLAP_COMM[stage], "contiguous_gradients": True, "reduce_scatter": True}
    if stage == 3:
        modelled |= {
            "stage3_param_persistence_threshold": PERSISTENCE_THRESHOLD,
            "stage3_max_reuse_distance": MAX_REUSE_DISTANCE,
            "sub_group_size": SUB_GROUP_SIZE,
        }
    for k, want in modelled.items():
        if k in z:
            _as_modelled(c, p + k, z[k], want)
    return set(modelled)


def _offload(c: Collector, z: dict[str, Any], p: str) -> set[str]:
    for k in ("offload_optimizer", "offload_param"):
        if k not in z:
            continue
        dev = (z[k] or {}).get("device", "none") if isinstance(z[k], dict) else z[k]
        if dev in (None, "none"):
            c.use(p + k, z[k], note="no offload, as modelled")
            continue
        c.ignore(
            p + k,
            z[k],
            f"offload to {dev} is not modelled: the plan holds these states on the device, "
            "so it overstates device memory",
        )
        if dev == "cpu":
            c.offload.add("optimizer" if k == "offload_optimizer" else "params")
            c.offload_engine = "deepspeed"
    return {"offload_optimizer", "offload_param"}


def _as_modelled(c: Collector, name: str, v: Any, want: Any) -> None:
    if v == "auto":
        c.ignore(name, v, AUTO)
    elif v == want or (not isinstance(want, bool) and isinstance(v, (int, float)) and v == want):
        c.use(name, v, note="as the engine model runs it")
    else:
        c.ignore(name, v, f"the engine model runs {want!r} (engines/deepspeed.py, as emit writes it)")

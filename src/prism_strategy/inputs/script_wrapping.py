"""The calls of a training script that set its precision and its wrapping (FSDP1, FSDP2, DDP,
DeepSpeed, prism_strategy.wrap): inputs/script_reads.py's readers for precision, reduce_dtype
and strategy. What each call means comes from the library's source, named beside each reader."""

from __future__ import annotations

import ast
from pathlib import Path

from prism_strategy.inputs.py_values import UNKNOWN, Symbol
from prism_strategy.inputs.script_reader import Call
from prism_strategy.inputs.script_reads import Found, Reader, prism_wraps, wrap_reads
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.safe_files import load_json
from prism_strategy.strategies import FSDP1_SHARDING, STRATEGY_NAMES

AUTOCAST = {
    "torch.autocast",
    "torch.amp.autocast",
    "torch.cuda.amp.autocast",
    "torch.xpu.amp.autocast",
    "torch.cpu.amp.autocast",
}


# --- precision, reduction dtype ------------------------------------------------------------------
def precision(r: Reader) -> tuple[list[Found], list[Found]]:
    """(precision, reduce_dtype). bf16 parameters (from_pretrained(torch_dtype=/dtype=bf16),
    model.to(torch.bfloat16), .bfloat16()) -> bf16-pure; fp32 parameters with bf16 compute
    (autocast, FSDP1 MixedPrecision / FSDP2 MixedPrecisionPolicy param_dtype, TrainingArguments(bf16=True),
    Accelerator(mixed_precision="bf16")) -> bf16-mixed. fp16 has bf16's bytes: planned as bf16.
    reduce_dtype None with a param_dtype reduces in param_dtype (torch/distributed/fsdp/api.py
    MixedPrecision, fsdp/_fully_shard/_fsdp_api.py MixedPrecisionPolicy)."""
    pure, mixed, reduce = _low_params(r), [], []
    for c in r.calls(lambda c: c.name in AUTOCAST):
        d = r.dtype(c, "dtype")
        if d in ("bf16", "fp16"):
            mixed.append(r.found(c, "bf16-mixed", "autocast in fp16: planned with bf16's bytes" if d == "fp16" else ""))
    for c in r.calls(lambda c: c.last in ("MixedPrecision", "MixedPrecisionPolicy")):
        param, red = r.dtype(c, "param_dtype"), r.dtype(c, "reduce_dtype")
        if param in ("bf16", "fp16"):
            mixed.append(r.found(c, "bf16-mixed", f"{c.last}(param_dtype={param})"))
            why = f"{c.last}: no reduce_dtype, so the reduction runs in param_dtype" if red is None else ""
            reduce.append(r.found(c, "bf16" if red in (None, "bf16", "fp16") else "fp32", why))
        elif red is not None:
            reduce.append(r.found(c, "bf16" if red != "fp32" else "fp32"))
    mixed += wrap_reads(r, "mixed_precision", "bf16", lambda v: {"bf16": "bf16-mixed", None: "fp32"}.get(v))
    reduce += [
        f
        for f in wrap_reads(r, "reduce_dtype", None, lambda v: v if v in ("fp32", "bf16") else None)
        if f.value is not None
    ]
    for c, conf, where in ds_configs(r):
        low = [
            k
            for k in ("bf16", "fp16")
            if isinstance(conf, dict) and isinstance(conf.get(k), dict) and conf[k].get("enabled") is True
        ]
        if low:
            mixed.append(r.found(c, "bf16-mixed", f"DeepSpeed {low[0]} enabled ({where}): fp32 master weights"))
    for c in r.calls(lambda c: c.last in ("TrainingArguments", "Accelerator")):
        if c.last == "Accelerator":
            on = r.kwarg(c, "mixed_precision") in ("bf16", "fp16")
        else:
            on = True in (r.kwarg(c, "bf16", False), r.kwarg(c, "fp16", False))
        if on:
            mixed.append(r.found(c, "bf16-mixed", f"{c.last}: autocast over fp32 parameters"))
    if pure:
        return [pure[0]], reduce
    return mixed or _fp32(r), reduce


LOW_PRECISION_WORDS = frozenset(
    {
        "autocast",
        "amp",
        "bfloat16",
        "bf16",
        "float16",
        "fp16",
        "half",
        "mixedprecision",
        "mixedprecisionpolicy",
        "mixed_precision",
        "mp_policy",
        "gradscaler",
        "set_default_dtype",
        "deepspeed",
        "trainingarguments",
        "accelerator",
        "fp8",
        "float8",
        "te",
        "transformer_engine",
        "precision",
        "dtype",
        "torch_dtype",
        "ptdtype",
    }
)
"""Any of these in the script (a name, attribute or short string) may set a low precision the reader
cannot follow: then fp32 is not told."""


def _fp32(r: Reader) -> list[Found]:
    """fp32, told from the backward call, when nothing in the script can lower the precision: no
    autocast, no low-precision dtype or cast, no mixed-precision policy, no framework that owns it
    (torch's default dtype is float32 and autocast is off unless entered: torch/amp/autocast_mode.py)."""
    if r.s.words & LOW_PRECISION_WORDS:
        return []
    backward = r.calls(lambda c: c.last == "backward")
    if not backward:
        return []
    return [
        r.found(
            backward[0],
            "fp32",
            "no autocast, low-precision dtype or mixed-precision policy anywhere in the script: "
            "this backward runs on fp32 parameters",
        )
    ]


def _low_params(r: Reader) -> list[Found]:
    out = []
    for c in r.calls(lambda c: c.last in ("from_pretrained", "from_config")):
        d = r.dtype(c, "torch_dtype") or r.dtype(c, "dtype")
        if d in ("bf16", "fp16"):
            out.append(r.found(c, "bf16-pure", "the model is built in low precision"))
    for c in r.calls(lambda c: c.last in ("to", "bfloat16", "half") and "model" in c.name.lower()):
        if c.last != "to" or any(
            r.dtype_of(a, c.scope, c.line) in ("bf16", "fp16")
            for a in [*c.node.args, *(k.value for k in c.node.keywords if k.arg == "dtype")]
        ):
            out.append(r.found(c, "bf16-pure", "the model's parameters are cast to low precision"))
    for c in r.calls(lambda c: c.name == "torch.set_default_dtype"):
        if c.node.args and r.dtype_of(c.node.args[0], c.scope, c.line) in ("bf16", "fp16"):
            out.append(r.found(c, "bf16-pure", "parameters are created in low precision"))
    return out


def _spreads_lack(r: Reader, c: Call, key: str) -> bool:
    """True when `key` is not written in the call and every `**name` it spreads is a dict the
    script never gives `key`: built as a literal / dict(...) and filled only by `name["other"] = ...`
    (pytorch/examples distributed/FSDP2/example.py: `fsdp_kwargs = {}`, then `fsdp_kwargs["mp_policy"]`)."""
    if c.kwarg(key) is not None:
        return False
    spreads = [k.value for k in c.node.keywords if k.arg is None]
    if not spreads or not all(isinstance(v, ast.Name) for v in spreads):
        return False
    names = {v.id for v in spreads if isinstance(v, ast.Name)}
    for node in ast.walk(r.tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if isinstance(node.func.value, ast.Name) and node.func.value.id in names and node.func.attr != "get":
                return False  # fsdp_kwargs.update(...), .setdefault(...)
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
        )
        for t in targets:
            if isinstance(t, ast.Name) and t.id in names and not _dict_without(node, key):
                return False
            if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in names:
                if not (isinstance(t.slice, ast.Constant) and isinstance(t.slice.value, str) and t.slice.value != key):
                    return False
    return True


def _dict_without(node: ast.AST, key: str) -> bool:
    v = node.value if isinstance(node, ast.Assign) else None
    if isinstance(v, ast.Dict):
        return all(isinstance(k, ast.Constant) and k.value != key for k in v.keys)
    if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "dict" and not v.args:
        return all(k.arg is not None and k.arg != key for k in v.keywords)
    return False


def _mesh_dims(r: Reader) -> set[int]:
    """The dimensions of the meshes init_device_mesh(device, shape) builds, where the shape is read."""
    dims = set()
    for c in r.calls(lambda c: c.last == "init_device_mesh"):
        shape = c.node.args[1] if len(c.node.args) > 1 else c.kwarg("mesh_shape")
        for a in r.vals.eval(shape, c.scope, c.line) if shape is not None else []:
            dims.add(len(a.value) if isinstance(a.value, tuple) else 0)
    return dims


def ds_configs(r: Reader) -> list[tuple[Call, object, str]]:
    """(call, DeepSpeed config, where it came from) for deepspeed.initialize(config=...) and
    TrainingArguments(deepspeed=...): a dict the script builds, or a JSON file it names (read
    beside the script, else from the working directory)."""
    out = []
    for c in r.calls(lambda c: c.name == "deepspeed.initialize" or c.last == "TrainingArguments"):
        key = "deepspeed" if c.last == "TrainingArguments" else "config"
        conf = r.kwarg(c, key)
        if c.last == "TrainingArguments" and conf is None:
            continue
        where = "a dict the script builds"
        if isinstance(conf, str):
            conf, where = _json_beside(r, conf)
        out.append(
            (
                c,
                conf if isinstance(conf, dict) else None,
                where
                if isinstance(conf, dict)
                else where
                if isinstance(conf, str)
                else "a config the script does not fix",
            )
        )
    return out


def _json_beside(r: Reader, name: str) -> tuple[object, str]:
    for base in (r.s.path.parent, Path.cwd()):
        f = base / name
        try:
            return load_json(f), f"{f}"
        except SpecError:
            continue
    return name, f"{name}: not found or not JSON"


# --- strategy ---------------------------------------------------------------------------
def strategy(r: Reader) -> list[Found]:
    """FSDP1 FullyShardedDataParallel(sharding_strategy=...) (default FULL_SHARD), FSDP2
    fully_shard (reshard_after_forward=False: shard_grad_op), DDP, prism_strategy.wrap(model, NAME)."""
    out = []
    for c in r.calls(lambda c: c.last in ("FullyShardedDataParallel", "FSDP")):
        how = r.kwarg(c, "sharding_strategy", Symbol("ShardingStrategy.FULL_SHARD"))
        name = FSDP1_SHARDING.get(how.name.rsplit(".", 1)[-1]) if isinstance(how, Symbol) else None
        out.append(
            Found(
                value=name,
                line=c.line,
                evidence=r.text(c.line),
                note="FSDP1 (FullyShardedDataParallel); the plan's fsdp options model FSDP2's fully_shard"
                if name
                else "FSDP1 with a sharding_strategy the script does not fix",
            )
        )
    shards = r.calls(lambda c: c.last == "fully_shard")
    if shards:
        reshard = r.kwarg(shards[-1], "reshard_after_forward", True)
        if reshard is UNKNOWN and _spreads_lack(r, shards[-1], "reshard_after_forward"):
            reshard = True  # fully_shard's default (torch/distributed/fsdp/_fully_shard/_fully_shard.py)
        dims = _mesh_dims(r)
        flat, hybrid = ("fsdp_full_shard", "fsdp_shard_grad_op"), ("hsdp_full_shard", "hsdp_shard_grad_op")
        names = dict(zip((True, False), hybrid if dims == {2} else flat))
        name = names.get(reshard) if isinstance(reshard, bool) else None
        where = {frozenset({1}): " on a 1-D mesh", frozenset({2}): " on a 2-D mesh (HSDP)"}.get(frozenset(dims), "")
        out.append(
            r.found(
                shards[-1],
                name,
                f"FSDP2 (fully_shard){where}"
                + ("" if where else "; on a 2-D (replicate, shard) mesh it would be the hsdp_ variant"),
            )
        )
    out += [r.found(c, "ddp") for c in r.calls(lambda c: c.last in ("DistributedDataParallel", "DDP"))]
    for c, conf, where in ds_configs(r):
        zo = conf.get("zero_optimization") if isinstance(conf, dict) else None
        stage = zo.get("stage") if isinstance(zo, dict) else None
        zero = {1: "zero1", 2: "zero2", 3: "zero3"}.get(stage) if isinstance(stage, int) else None
        out.append(r.found(c, zero, f"DeepSpeed ({where})" if zero else f"DeepSpeed: no ZeRO stage read ({where})"))
    for c in prism_wraps(r):
        named = [*c.node.args[1:2], c.kwarg("strategy")]
        got = next((a.value for a in named if isinstance(a, ast.Constant) and a.value in STRATEGY_NAMES), None)
        out.append(r.found(c, got))
    return out

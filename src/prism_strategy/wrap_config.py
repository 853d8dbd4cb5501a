"""WrapConfig: the settings of one `wrap()` call, and strategy.toml, their file form.

`plan` chooses them, `emit` writes them (strategy.toml next to the launchers), the launchers
export PRISM_STRATEGY_FILE, and `wrap_from_file()` reads them back:

    strategy = "hsdp_shard_grad_op"      # required: a registered strategy name
    mixed_precision = "bf16"             # "bf16" or "none" (fp32 throughout)
    ckpt_freq = 1                        # checkpoint every k-th block; 0 = none; "sac" = selective
    loss = "upcast"                      # upcast | chunked | fused: the loss kernel (runtime/loss.py)
    micro_batch = 8                      # what the plan chose (the training script's batch)
    grad_accum = 1                       # micro-batches per optimizer step
    bucket_mb = 25                       # optional: DDP bucket_cap_mb / DeepSpeed bucket size
    reduce_dtype = "fp32"                # optional: FSDP2 reduce_dtype / DeepSpeed communication_data_type
    static_graph = true                  # optional, ddp only
    find_unused_parameters = false       # ddp
    compile = false
    nodes = 2                            # the layout the plan assumed: wrap_from_file() warns
    ranks_per_node = 12                  #   when the running world differs
    ds_config = "ds_config.json"         # deepspeed only: relative to this file

Missing keys take the defaults below; unknown keys and wrong types are a SpecError.

What the file says of the run is read in the Scenario's own terms (specs/policies.py) by one
function, `WrapConfig.policies` -> RunPolicies (precision, the memory policy's checkpointing, loss,
compile and bucket, the batch split, the layout), and emit writes the file from them
(`WrapConfig.from_policies`), so the file and the CLI flags describe a run the same way.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

from prism_strategy.engines import engine_of
from prism_strategy.specs.cluster import Layout
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.policies import MemoryPolicy
from prism_strategy.specs.scenario import Scenario
from prism_strategy.specs.training import LOSSES, check_options
from prism_strategy.strategies import get_strategy

ENV_VAR = "PRISM_STRATEGY_FILE"
"""The launchers `emit` writes export it: wrap_from_file() with no path reads it."""


def mixed_precision_of(precision: str) -> Literal["bf16"] | None:
    """--precision bf16-mixed / bf16-pure -> "bf16" (wrap's one bf16 setting); fp32 -> None."""
    return None if precision == "fp32" else "bf16"


@dataclass(frozen=True, kw_only=True, slots=True)
class RunPolicies:
    """What a strategy.toml says of the run, as the Scenario's policies (specs/policies.py) hold it."""

    precision: str = "bf16-mixed"
    """fp32, or bf16-mixed for the file's mixed_precision = "bf16" (bf16-pure is written as bf16)."""
    memory: MemoryPolicy = MemoryPolicy()
    """checkpointing, loss, compile and bucket_mb as the file sets them; the rest at their defaults
    (the optimizer is the training script's, passed to wrap_from_file)."""
    micro_batch: int | None = None
    grad_accum: int = 1
    layout: Layout | None = None
    """The nodes x ranks per node the plan assumed; None when the file does not say."""

    @classmethod
    def of(cls, sc: Scenario, *, micro_batch: int | None = None, grad_accum: int | None = None) -> "RunPolicies":
        """The part of a Scenario a strategy.toml carries (micro_batch, grad_accum: an option's
        choice where the scenario leaves them to the planner)."""
        m = sc.memory
        return cls(
            precision=sc.precision,
            memory=MemoryPolicy(checkpointing=m.checkpointing, loss=m.loss, compile=m.compile, bucket_mb=m.bucket_mb),
            micro_batch=sc.batch.micro_batch if micro_batch is None else micro_batch,
            grad_accum=(sc.batch.grad_accum or 1) if grad_accum is None else grad_accum,
            layout=sc.layout,
        )


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True, kw_only=True, slots=True)
class WrapConfig:
    strategy: str
    """A registered strategy name (strategies.py)."""
    mixed_precision: Literal["bf16"] | None = "bf16"
    """"bf16": bf16 compute; None: fp32 throughout ("none" in the file)."""
    ckpt_freq: int | Literal["sac"] = 0
    """Activation checkpointing on every k-th transformer block; 0 = off; "sac": every block with
    torchtitan's selective per-op policy (runtime/sac.py)."""
    loss: Literal["upcast", "fused", "chunked"] = "upcast"
    """The loss kernel wrap() installs (runtime/loss.py): upcast = the model's own."""
    bucket_mb: float | None = None
    """Gradient bucket MiB (DDP bucket_cap_mb; DeepSpeed buckets); None: the engine's default."""
    reduce_dtype: Literal["fp32", "bf16"] | None = None
    """Gradient reduction dtype (FSDP2 reduce_dtype; DeepSpeed communication_data_type)."""
    static_graph: bool | None = None
    """DDP only: the graph is the same every step. None: not declared (off)."""
    find_unused_parameters: bool = False
    """DDP only: walk the graph for unused parameters every step (slow)."""
    compile: bool = False
    """torch.compile each block."""
    micro_batch: int | None = None
    """Samples per rank per micro-step, as planned (carried for the training script)."""
    grad_accum: int = 1
    """Micro-batches per optimizer step, as planned."""
    nodes: int | None = None
    """The nodes the plan assumed (its global batch is micro_batch x grad_accum x nodes x ranks_per_node)."""
    ranks_per_node: int | None = None
    """The ranks per node the plan assumed; wrap_from_file() warns when the running layout differs."""
    ds_config: str | None = None
    """DeepSpeed only: the ds_config JSON (relative to strategy.toml in the file)."""

    def __post_init__(self) -> None:
        if not isinstance(self.strategy, str):
            raise SpecError(f"strategy must be a strategy name (str), got {type(self.strategy).__name__}")
        spec = get_strategy(self.strategy)
        if self.mixed_precision not in ("bf16", None):
            raise SpecError(f"mixed_precision must be 'bf16' or None (full fp32), got {self.mixed_precision!r}")
        if self.ckpt_freq != "sac" and (not _is_int(self.ckpt_freq) or self.ckpt_freq < 0):
            raise SpecError(
                f'ckpt_freq must be an int >= 0 (checkpoint every k-th block; 0 = none) or "sac", '
                f"got {self.ckpt_freq!r}"
            )
        check_options(self.bucket_mb, self.reduce_dtype)
        if self.loss not in LOSSES:
            raise SpecError(f"loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        for name in ("find_unused_parameters", "compile"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.static_graph is not None and not isinstance(self.static_graph, bool):
            raise SpecError(f"static_graph must be True or False (or None: not declared), got {self.static_graph!r}")
        for name in ("micro_batch", "nodes", "ranks_per_node"):
            v = getattr(self, name)
            if v is not None and (not _is_int(v) or v < 1):
                raise SpecError(f"{name} must be a positive integer, got {v!r}")
        if not _is_int(self.grad_accum) or self.grad_accum < 1:
            raise SpecError(f"grad_accum must be a positive integer, got {self.grad_accum!r}")
        if self.ds_config is not None and engine_of(spec).config_file is None:
            raise SpecError(f"ds_config is only for zero* strategies, not {self.strategy}; remove it")

    @property
    def policies(self) -> RunPolicies:
        """What this file says of the run, in the Scenario's terms (the one reading of it)."""
        layout = None
        if self.nodes is not None and self.ranks_per_node is not None:
            layout = Layout(nodes=self.nodes, ranks_per_node=self.ranks_per_node)
        return RunPolicies(
            precision="fp32" if self.mixed_precision is None else "bf16-mixed",
            memory=MemoryPolicy(
                checkpointing=self.ckpt_freq, loss=self.loss, compile=self.compile, bucket_mb=self.bucket_mb
            ),
            micro_batch=self.micro_batch,
            grad_accum=self.grad_accum,
            layout=layout,
        )

    @classmethod
    def from_policies(cls, strategy: str, policies: RunPolicies, **engine: Any) -> "WrapConfig":
        """The file for `strategy` run under `policies`; engine: reduce_dtype, static_graph,
        find_unused_parameters, ds_config (what the engine is told beyond the run itself)."""
        m, lay = policies.memory, policies.layout
        if m.checkpointing == "auto":
            raise SpecError("ckpt_freq auto is a plan search; strategy.toml holds one setting: give k or sac")
        return cls(
            strategy=strategy,
            mixed_precision=mixed_precision_of(policies.precision),
            ckpt_freq=m.checkpointing,  # type: ignore[arg-type]
            loss=m.loss,  # type: ignore[arg-type]
            compile=m.compile,
            bucket_mb=m.bucket_mb,
            micro_batch=policies.micro_batch,
            grad_accum=policies.grad_accum,
            nodes=None if lay is None else lay.nodes,
            ranks_per_node=None if lay is None else lay.ranks_per_node,
            **engine,
        )

    @property
    def spec(self):
        """The registered strategy with this config's bucket size and reduce dtype."""
        return get_strategy(self.strategy).with_options(bucket_mb=self.bucket_mb, reduce_dtype=self.reduce_dtype)

    def with_changes(self, **kw: Any) -> "WrapConfig":
        return replace(self, **kw)

    # --- TOML -------------------------------------------------------------------------------
    def to_toml(self, header: str = "") -> str:
        lines = [header] if header else []
        lines.append("# wrap() settings. In the training script: job = wrap_from_file(model, ctx=ctx, optimizer=...)")
        for key, value in asdict(self).items():
            if key == "mixed_precision":
                value = value or "none"
            if value is None:
                continue
            lines.append(f"{key} = {_toml_value(value)}")
        return "\n".join(lines) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "strategy.toml") -> "WrapConfig":
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise SpecError(f"{where}: unknown key {unknown[0]!r}; known keys: {', '.join(known)}")
        if "strategy" not in data:
            raise SpecError(f"{where}: missing key 'strategy'; add e.g. strategy = \"ddp\"")
        kw = dict(data)
        if "mixed_precision" in kw:
            if kw["mixed_precision"] not in ("bf16", "none"):
                raise SpecError(f'{where}: mixed_precision must be "bf16" or "none", got {kw["mixed_precision"]!r}')
            kw["mixed_precision"] = None if kw["mixed_precision"] == "none" else "bf16"
        try:
            return cls(**kw)
        except SpecError as e:
            raise SpecError(f"{where}: {e}") from None

    @classmethod
    def from_toml(cls, path: str | Path | None = None) -> "WrapConfig":
        """Read strategy.toml (path None: $PRISM_STRATEGY_FILE); ds_config resolved next to it."""
        from prism_strategy.specs.presets import read_toml

        if path is None:
            path = os.environ.get(ENV_VAR)
            if not path:
                raise SpecError(f"no strategy file: pass a path or set {ENV_VAR} (the emitted launchers export it)")
        path = Path(path)
        cfg = cls.from_dict(read_toml(path), str(path))
        if cfg.ds_config is not None:
            ds = (path.parent / cfg.ds_config).resolve()
            if not ds.is_file():
                raise SpecError(f"{path}: ds_config {cfg.ds_config!r} not found next to it ({ds})")
            cfg = replace(cfg, ds_config=str(ds))
        return cfg


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))

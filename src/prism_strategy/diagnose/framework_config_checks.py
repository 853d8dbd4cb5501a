"""`doctor --config FILE`: the doctor's rules (data/rules.toml) applied to what a framework config
says (torchtitan TOML, DeepSpeed JSON, Accelerate YAML, HF TrainingArguments JSON, read by
inputs/frameworks/). Facts read: the engine and compile (deepspeed-compile), root-only wrapping
(Accelerate NO_WRAP: fsdp-root-only-wrap), ZeRO-3 persistence thresholds that keep most
parameters gathered, offloaded states the node's host memory cannot hold, and, where the model is known (the config names it, or --model), whether the
plan says the config's micro-batch fits its strategy (the planner's own memory model)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import tomllib

from prism_strategy.diagnose.findings import Context, Finding, check_observed
from prism_strategy.engines.base import numels, part_modules
from prism_strategy.inputs.frameworks import ConfigInputs, read_config
from prism_strategy.specs.errors import SpecError
from prism_strategy.strategies import get_strategy

HOST_HEADROOM = 0.9
"""Part of a node's host memory a job's offloaded states may take: the OS, page cache, pinned
staging and DataLoader workers need the rest."""
GATHERED_FRACTION = 0.5
"""ZeRO-3 whose persistence threshold keeps more than this fraction of the parameters whole on
every rank no longer shards them: the memory of stage 3 is gone, its collectives stay."""


def key_line(text: str, dotted: str) -> int:
    """1-based line of the field's last key in the file (1 when not found: a default)."""
    key = dotted.split(", ")[0].split(".")[-1].split(":")[-1]
    m = re.search(rf"^\s*\"?{re.escape(key)}\"?\s*[=:]", text, re.M)
    return text.count("\n", 0, m.start()) + 1 if m else 1


@dataclass(frozen=True, kw_only=True, slots=True)
class FrameworkConfigFile:
    path: Path
    text: str
    config: ConfigInputs
    model: str | None
    """--model, for a config that names none."""

    @classmethod
    def read(cls, path: Path, model: str | None = None) -> "FrameworkConfigFile":
        try:
            cfg = read_config(path)
        except SpecError as e:
            raise SpecError(str(e).replace("--from ", "--config ", 1)) from None
        return cls(path=path, text=path.read_text(), config=cfg, model=cfg.options.get("model", model))

    @property
    def engine(self) -> str | None:
        return get_strategy(self.config.strategy).engine if self.config.strategy else None

    def refine(self, ctx: Context) -> Context:
        return ctx.refined(
            strategy=self.config.strategy,
            nodes=self.config.options.get("nodes"),
            engines=frozenset({self.engine}) if self.engine else frozenset(),
        )

    def check(self, ctx: Context) -> list[Finding]:
        out: list[Finding] = []
        cfg, f = self.config, str(self.path)
        if cfg.options.get("compile") and self.engine:
            field = cfg.source_of("compile").field
            out += check_observed(
                {"engine": self.engine, "compile": True},
                ctx,
                file=f,
                line=key_line(self.text, field),
                detail=f"{field} turns torch.compile on",
            )
        wrap = next(
            (x for x in cfg.ignored if x.field.endswith("fsdp_auto_wrap_policy") and x.value == "NO_WRAP"), None
        )
        if wrap is not None:
            out += check_observed(
                {"engine": "fsdp2", "root_only_wrap": True},
                ctx,
                file=f,
                line=key_line(self.text, wrap.field),
                detail=f"{wrap.field}: NO_WRAP with {cfg.strategy}",
            )
        if self.model is not None:
            out += self._model_checks(ctx, f)
        return out

    def _model_checks(self, ctx: Context, f: str) -> list[Finding]:
        out: list[Finding] = []
        gathered = self._persistent_fraction()
        if gathered is not None:
            field, threshold, fraction = gathered
            out += check_observed(
                {"engine": "deepspeed", "persistence_keeps_params_gathered": fraction > GATHERED_FRACTION},
                ctx,
                file=f,
                line=key_line(self.text, field),
                detail=f"{field} = {threshold:g} keeps {fraction:.0%} of {self.model}'s parameters whole on every rank",
            )
        offload = self._offload_fit(ctx)
        if offload is not None:
            fits, detail = offload
            field = next(x.field for x in self.config.ignored if "offload" in x.field)
            out += check_observed(
                {"offload_fits_host_memory": fits}, ctx, file=f, line=key_line(self.text, field), detail=detail
            )
        fit = self._micro_batch_fit(ctx)
        if fit is not None:
            fits, detail = fit
            field = self.config.source_of("micro_batch").field
            out += check_observed(
                {"micro_batch_fits": fits}, ctx, file=f, line=key_line(self.text, field), detail=f"{field}: {detail}"
            )
        return out

    def _persistent_fraction(self) -> tuple[str, float, float] | None:
        """(field, threshold, fraction of parameters in tensors below it) for ZeRO-3 configs."""
        if self.config.strategy is None or get_strategy(self.config.strategy).zero_stage != 3:
            return None
        field = next(
            (
                x
                for x in (*self.config.used, *self.config.ignored)
                if x.field.endswith("stage3_param_persistence_threshold")
            ),
            None,
        )
        if field is None or isinstance(field.value, str) or not isinstance(field.value, (int, float)):
            return None
        groups = [(numels(mods), k) for p in _parts(self.model) for mods, k in part_modules(p).groups()]
        total = sum(sum(sizes) * k for sizes, k in groups) or 1
        small = sum(sum(n for n in sizes if n < field.value) * k for sizes, k in groups)
        return field.field, float(field.value), small / total

    def _offload_fit(self, ctx: Context) -> tuple[bool, str] | None:
        """Host memory the offloaded states need per node against the node's (data/host_memory.toml)."""
        cfg = self.config
        if not cfg.offload or ctx.platform is None:
            return None
        host = host_memory_gib(ctx.platform.name)
        if host is None:
            return None
        nodes = ctx.nodes or cfg.options.get("nodes", 1)
        rpn = cfg.options.get("ranks_per_node") or ctx.platform.hardware.devices_per_node
        params = _scenario(self.model).model.total_params
        need = host_bytes_per_node(params, cfg, nodes, rpn)
        fits = need <= HOST_HEADROOM * host * 2**30
        return fits, (
            f"offloading {' and '.join(sorted(cfg.offload))} of {self.model} ({params / 1e9:.1f}B params) "
            f"needs about {need / 2**30:.0f} GiB of host memory per node on {nodes} node(s), "
            f"{ctx.platform.name} has {host:g} GiB"
        )

    def _micro_batch_fit(self, ctx: Context) -> tuple[bool, str] | None:
        """The planner's verdict on the config's strategy at its micro-batch (None: nothing to judge)."""
        cfg = self.config
        if "micro_batch" not in cfg.options or cfg.strategy is None or ctx.platform is None:
            return None
        from prism_strategy.inputs.scenario import build_scenario
        from prism_strategy.planning.planner import evaluate
        from prism_strategy.specs.policies import BatchPolicy, MemoryPolicy

        said = cfg.options
        try:
            sc = build_scenario(
                self.model,
                ctx.platform,
                nodes=ctx.nodes or said.get("nodes", 1),
                ranks_per_node=said.get("ranks_per_node"),
                batch=BatchPolicy(**{k: said[k] for k in ("seq_len", "micro_batch", "grad_accum") if k in said}),
                memory=MemoryPolicy(
                    checkpointing=said.get("ckpt_freq", 0),
                    **{k: said[k] for k in ("optimizer", "compile", "loss", "bucket_mb", "compile_loss") if k in said},
                ),
                precision=said.get("precision", "bf16-mixed"),
            )
        except SpecError as e:
            return False, f"the plan cannot run it: {e}"
        o = evaluate(sc, get_strategy(cfg.strategy).with_options(bucket_mb=said.get("bucket_mb")))
        if o.feasible or not o.why_not or o.why_not.startswith("not viable"):
            return True, "fits"
        return False, f"{cfg.strategy} at micro-batch {o.micro_batch} on {ctx.platform.name}: {o.why_not}"


def _scenario(model: str | None):
    from prism_strategy.inputs.scenario import build_scenario

    return build_scenario(model, "cpu")


def _parts(model: str | None):
    from prism_strategy.specs.parts import model_parts

    sc = _scenario(model)
    return model_parts(sc.model, sc.training)


def host_memory_gib(platform: str) -> float | None:
    table = tomllib.loads((resources.files("prism_strategy") / "data" / "host_memory.toml").read_text())
    return table.get(platform, {}).get("gib")


def host_bytes_per_node(params: int, cfg: ConfigInputs, nodes: int, rpn: int) -> float:
    """Offloaded bytes in one node's host memory. DeepSpeed: its own estimates (zero_init, buffer
    factor 1.5): ZeRO-3 estimate_zero3_model_states_mem_needs (stage3.py) 18 B/param / nodes with
    params and optimizer offloaded, 16 with the optimizer alone; ZeRO-1/2
    estimate_zero2_model_states_mem_needs (stage_1_and_2.py) max(4 x GPUs, 16) B/param. FSDP's
    CPUOffload: the sharded fp32 params, grads and two Adam moments, 16 B/param over the world, so
    16 / nodes per node."""
    if cfg.offload_engine == "fsdp":
        return 16 * params / nodes
    if cfg.strategy is not None and get_strategy(cfg.strategy).zero_stage == 3:
        return params * (18 if "params" in cfg.offload else 16) / nodes * 1.5
    return params * max(4 * nodes * rpn, 16) * 1.5


def read_config_files(paths: tuple[Path, ...], model: str | None) -> list[FrameworkConfigFile]:
    return [FrameworkConfigFile.read(p, model) for p in paths]

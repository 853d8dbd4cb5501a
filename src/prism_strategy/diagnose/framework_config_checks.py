"""`doctor --config FILE`: the doctor's rules (data/rules.toml) applied to what a framework config
says (torchtitan TOML, DeepSpeed JSON, Accelerate YAML, HF TrainingArguments JSON, read by
inputs/frameworks/). Facts read: the engine and compile (deepspeed-compile), root-only wrapping
(Accelerate NO_WRAP: fsdp-root-only-wrap), ZeRO-3 persistence thresholds that keep most
parameters gathered, and, where the model is known (the config names it, or --model), whether the
plan says the config's micro-batch fits its strategy (the planner's own memory model)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prism_strategy.diagnose.findings import Context, Finding, check_observed
from prism_strategy.engines.base import numels, part_modules
from prism_strategy.inputs.frameworks import ConfigInputs, read_config
from prism_strategy.specs.errors import SpecError
from prism_strategy.strategies import get_strategy

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
        if self.config.strategy != "zero3":
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
        sizes = [n for p in _parts(self.model) for n in numels(part_modules(p).forward_order())]
        total = sum(sizes) or 1
        return field.field, float(field.value), sum(n for n in sizes if n < field.value) / total

    def _micro_batch_fit(self, ctx: Context) -> tuple[bool, str] | None:
        """The planner's verdict on the config's strategy at its micro-batch (None: nothing to judge)."""
        cfg = self.config
        if "micro_batch" not in cfg.options or cfg.strategy is None or ctx.platform is None:
            return None
        from prism_strategy.planning.planner import evaluate
        from prism_strategy.planning.scenario import build_scenario

        keys = (
            "seq_len",
            "micro_batch",
            "grad_accum",
            "ckpt_freq",
            "precision",
            "optimizer",
            "compile",
            "loss",
            "ranks_per_node",
            "bucket_mb",
            "compile_loss",
        )
        kw: dict[str, Any] = {k: cfg.options[k] for k in keys if k in cfg.options}
        kw["ckpt_freq"] = kw.get("ckpt_freq", 0)
        try:
            sc = build_scenario(self.model, platform=ctx.platform, nodes=ctx.nodes or cfg.options.get("nodes", 1), **kw)
        except SpecError as e:
            return False, f"the plan cannot run it: {e}"
        o = evaluate(sc, get_strategy(cfg.strategy).with_options(bucket_mb=kw.get("bucket_mb")))
        if o.feasible or not o.why_not or o.why_not.startswith("not viable"):
            return True, "fits"
        return False, f"{cfg.strategy} at micro-batch {o.micro_batch} on {ctx.platform.name}: {o.why_not}"


def _parts(model: str | None):
    from prism_strategy.planning.scenario import build_scenario
    from prism_strategy.specs.parts import model_parts

    sc = build_scenario(model, platform="cpu")
    return model_parts(sc.model, sc.training)


def read_config_files(paths: tuple[Path, ...], model: str | None) -> list[FrameworkConfigFile]:
    return [FrameworkConfigFile.read(p, model) for p in paths]

"""A stored run's config (a results row's `config`, a bench, census or commbench launch's base) as
the planner's Scenario: the one edge bench's predict, census, commbench, the worker and the
importers read a row through.

A row is the Scenario serialised (specs/scenario.py scenario_to_row: "schema" 1, the model, layout
and policies) beside the run's own facts (strategy, nproc, steps, warmup, timeout_s, census,
reduce_dtype, ...). Rows without "schema" are version 0, the flat configs stored before it
(bench's base_config, census_base and the importers wrote model / model_spec, vision /
vision_spec, mode, nproc, ranks_per_node, micro_batch, grad_accum, seq_len, ckpt_freq, precision,
optimizer, loss, compile, bucket_mb); they are read as they were run, a key a row lacks taking the
policies' defaults (adamw, upcast loss, no compile, the engine's bucket). Two rows describe the
same run when their `row_key`s are equal, whichever schema each was stored in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from prism_strategy.inputs.scenario import resolve_model, scenario_of
from prism_strategy.specs.cluster import Layout, PlatformSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.lora import lora_from_dict
from prism_strategy.specs.model import MultimodalSpec, TransformerSpec
from prism_strategy.specs.policies import BatchPolicy, EnvironmentPolicy, MemoryPolicy
from prism_strategy.specs.presets import build, load_platform
from prism_strategy.specs.scenario import ROW_KEYS, ROW_SCHEMA, Scenario, scenario_to_row

V0_KEYS = (
    "model",
    "model_spec",
    "vision",
    "vision_spec",
    "mode",
    "ranks_per_node",
    "micro_batch",
    "grad_accum",
    "seq_len",
    "ckpt_freq",
    "precision",
    "optimizer",
    "loss",
    "compile",
    "bucket_mb",
)
"""The keys of a version-0 row that describe the scenario (nproc too, which stays a run fact)."""
LABELS = ("model", "vision")
"""A row's model names: labels beside the architectures (model_spec, vision_spec), so two runs of
one architecture loaded from different files are the same run."""


def config_model(config: dict[str, Any]) -> Any:
    """The stored architecture when present (files move), else the preset name or path."""
    if isinstance(config.get("model_spec"), dict):
        return build(TransformerSpec, config["model_spec"], "stored model_spec")
    if "model" not in config:
        raise SpecError("stored config has neither model_spec nor model")
    return config["model"]


def config_vision(config: dict[str, Any]) -> Any:
    """The stored vision encoder's architecture when present, else its preset name or path (or None)."""
    if isinstance(config.get("vision_spec"), dict):
        return build(TransformerSpec, config["vision_spec"], "stored vision_spec")
    return config.get("vision")


def _v0_record(config: dict[str, Any]) -> dict[str, Any]:
    """A version-0 (flat) row's scenario in the version-1 shape."""
    nproc, rpn = int(config["nproc"]), int(config.get("ranks_per_node") or config["nproc"])
    if nproc < 1 or rpn < 1 or nproc % rpn:
        raise SpecError(f"nproc {nproc} is not a positive multiple of ranks per node {rpn}")
    accum, mb = int(config.get("grad_accum", 1)), int(config["micro_batch"])
    return {
        "schema": ROW_SCHEMA,
        **{k: config.get(k) for k in ("model", "model_spec", "vision", "vision_spec")},
        "mode": config.get("mode", "e2e"),
        "layout": {"nodes": nproc // rpn, "ranks_per_node": rpn},
        "batch": {
            "seq_len": int(config["seq_len"]),
            "micro_batch": mb,
            "global_batch": mb * nproc * accum,
            "grad_accum": accum,
        },
        "precision": config.get("precision", "bf16-mixed"),
        "memory": {
            "checkpointing": config.get("ckpt_freq", 0),
            "optimizer": config.get("optimizer", "adamw"),
            "loss": config.get("loss", "upcast"),
            "compile": bool(config.get("compile", False)),
            "bucket_mb": config.get("bucket_mb"),
        },
        "environment": None,
    }


def row_schema(row: Any) -> int:
    if not isinstance(row, dict):
        raise SpecError(f"stored config must be a JSON object, got {type(row).__name__}")
    schema = row.get("schema", 0)
    if schema not in (0, ROW_SCHEMA):
        raise SpecError(
            f"stored config schema {schema!r} is not one this prism-strategy reads (0..{ROW_SCHEMA}); "
            "upgrade prism-strategy"
        )
    return schema


def scenario_record(row: dict[str, Any]) -> dict[str, Any]:
    """The row's scenario keys at ROW_SCHEMA (a version-0 row converted); no model is loaded.
    SpecError naming the problem for a row that cannot be read."""
    try:
        if row_schema(row) == ROW_SCHEMA:
            if flat := [k for k in V0_KEYS if k in row and k not in ROW_KEYS]:
                raise SpecError(
                    f"stored config (schema {ROW_SCHEMA}) has the flat key {flat[0]!r}, which its scenario "
                    "would not read; change a run through inputs/stored.py row_with"
                )
            record = {k: row.get(k) for k in ROW_KEYS}
            if missing := [k for k in ("layout", "batch", "memory") if not isinstance(record[k], dict)]:
                raise SpecError(f"stored config lacks {missing[0]!r} (an object)")
            lay = record["layout"]
            if "nproc" in row and row["nproc"] != lay["nodes"] * lay["ranks_per_node"]:
                raise SpecError(
                    f"stored config's nproc {row['nproc']} is not its layout's {lay['nodes']} x "
                    f"{lay['ranks_per_node']} ranks"
                )
            return record
        return _v0_record(row)
    except KeyError as e:
        raise SpecError(f"stored config lacks {e.args[0]!r}") from None
    except (TypeError, ValueError) as e:
        raise SpecError(f"stored config has a malformed value ({e})") from None


def run_facts(row: dict[str, Any]) -> dict[str, Any]:
    """The run's own keys (strategy, nproc, steps, ...): everything beside the scenario."""
    own = ROW_KEYS if row_schema(row) == ROW_SCHEMA else V0_KEYS
    return {k: v for k, v in row.items() if k not in own}


def scenario_from_row(row: dict[str, Any], platform: str | PlatformSpec = "cpu") -> Scenario:
    """The Scenario a stored row describes (either schema). platform: where the run is priced;
    census, commbench and the bench worker replay on CPU (gloo), hence the default. SpecError (the
    CLI's exit 2, one line) for a row that cannot be read; callers add which run it was."""
    r = scenario_record(row)
    plat = platform if isinstance(platform, PlatformSpec) else load_platform(platform)
    try:
        model = MultimodalSpec(
            backbone=resolve_model(config_model(r)),
            vision=None if (v := config_vision(r)) is None else resolve_model(v),
            mode=r.get("mode") or "e2e",
            lora=None if r.get("lora") is None else lora_from_dict(r["lora"], "stored config's lora"),
        )
        env = r.get("environment")
        return scenario_of(
            model,
            plat,
            Layout(**r["layout"]),
            batch=_policy(BatchPolicy, r["batch"], "batch"),
            precision=r.get("precision") or "bf16-mixed",
            memory=_policy(MemoryPolicy, r["memory"], "memory"),
            environment=None
            if not env
            else EnvironmentPolicy(
                profile=env.get("profile", ""),
                variables=tuple(tuple(v) for v in env.get("variables", ())),
                source=env.get("source", "stored run"),
            ),
        )
    except KeyError as e:
        raise SpecError(f"stored config lacks {e.args[0]!r}") from None
    except (TypeError, ValueError, AttributeError) as e:
        raise SpecError(f"stored config has a malformed value ({e})") from None


def _policy(cls: type, data: Any, what: str) -> Any:
    if not isinstance(data, dict):
        raise SpecError(f"stored config's {what} policy must be an object, got {data!r}")
    try:
        return cls(**data)
    except TypeError as e:
        raise SpecError(f"stored config's {what} policy: {e}") from None


def bench_row(sc: Scenario, **facts: Any) -> dict[str, Any]:
    """What a bench, census or commbench launch stores: the Scenario serialised, nproc (the layout's
    world, which the launcher starts), and the run's facts."""
    return scenario_to_row(sc) | {"nproc": sc.layout.world} | facts


@dataclass(frozen=True, kw_only=True, slots=True)
class RowChange:
    """What ceiling, scan and tune vary from one base row; None keeps the base's value."""

    strategy: str | None = None
    """The strategy run (a run fact)."""
    steps: int | None = None
    """Timed optimizer steps (a run fact)."""
    warmup: int | None = None
    """Untimed steps before them (a run fact)."""
    micro_batch: int | None = None
    """Samples per rank per micro-step; the global batch follows as micro-batch x accumulation x world."""
    seq_len: int | None = None
    """Tokens per sample."""
    grad_accum: int | None = None
    """Micro-steps per optimizer step."""
    ckpt_freq: int | str | None = None
    """The memory policy's checkpointing (k or "sac")."""
    optimizer: str | None = None
    """The memory policy's optimizer."""
    loss: str | None = None
    """The memory policy's loss."""
    compile: bool | None = None
    """The memory policy's compile."""
    precision: str | None = None
    """The scenario's precision."""

    def given(self, names: tuple[str, ...]) -> dict[str, Any]:
        """The named fields this change sets, by name."""
        return {n: v for n in names if (v := getattr(self, n)) is not None}


FACT_CHANGES = ("strategy", "steps", "warmup")
BATCH_CHANGES = ("micro_batch", "seq_len", "grad_accum")
MEMORY_CHANGES = {"ckpt_freq": "checkpointing", "optimizer": "optimizer", "loss": "loss", "compile": "compile"}
"""The settings row_with changes in the scenario (ckpt_freq is the memory policy's checkpointing)."""


def row_with(row: dict[str, Any], change: RowChange) -> dict[str, Any]:
    """The row with the change's scenario settings changed and its run facts set: what ceiling,
    scan and tune launch from one base. The scenario is rebuilt, so a change is checked as the
    base was."""
    sc = scenario_from_row(row)
    batch = change.given(BATCH_CHANGES)
    memory = {MEMORY_CHANGES[k]: v for k, v in change.given(tuple(MEMORY_CHANGES)).items()}
    precision = sc.precision if change.precision is None else change.precision
    if batch or memory or precision != sc.precision:
        b = replace(sc.batch, **batch)
        b = replace(b, global_batch=(b.micro_batch or 1) * (b.grad_accum or 1) * sc.layout.world)
        sc = scenario_of(
            sc.model,
            sc.platform,
            sc.layout,
            batch=b,
            precision=precision,
            memory=replace(sc.memory, **memory),
            environment=sc.environment,
        )
    return bench_row(sc, **run_facts(row)) | change.given(FACT_CHANGES)


def upgraded_row(row: dict[str, Any]) -> dict[str, Any]:
    """The row at ROW_SCHEMA (a version-0 row converted, its facts kept); the row as it is when its
    scenario cannot be built here (it is kept, never dropped: readers say why it cannot be read)."""
    try:
        return bench_row(scenario_from_row(row), **run_facts(row))
    except SpecError:
        return row


def canonical_row(row: dict[str, Any]) -> dict[str, Any]:
    """The row at ROW_SCHEMA with its scenario as the Scenario serialises it, the model labels
    left out: equal for two rows (of either schema) that describe the same run."""
    sc = scenario_from_row(row)
    return {k: v for k, v in bench_row(sc, **run_facts(row)).items() if k not in LABELS}


def row_key(row: dict[str, Any]) -> str:
    """canonical_row as canonical JSON: what "the same run" is when runs are matched or grouped.
    A row that cannot be read is keyed by its own JSON (it equals only itself)."""
    try:
        return json.dumps(canonical_row(row), sort_keys=True, separators=(",", ":"))
    except SpecError:
        return json.dumps(row, sort_keys=True, separators=(",", ":"))


def row_values(row: dict[str, Any]) -> dict[str, Any]:
    """A row's values by their flag names, of either schema, for what reports print and the harness
    counts (model, vision, mode, lora, nproc, ranks_per_node, micro_batch, grad_accum, seq_len,
    ckpt_freq, precision, optimizer, loss, bucket_mb) beside its facts; no model is loaded. lora: the
    stored adapters (r, target_modules), None for full training."""
    r = scenario_record(row)
    b, m, lay = r["batch"], r["memory"], r["layout"]
    facts = run_facts(row)
    return facts | {
        "model": r.get("model"),
        "vision": r.get("vision"),
        "mode": r.get("mode") or "e2e",
        "lora": r.get("lora"),
        "nproc": lay["nodes"] * lay["ranks_per_node"],
        "ranks_per_node": lay["ranks_per_node"],
        "micro_batch": b.get("micro_batch"),
        "grad_accum": b.get("grad_accum") or 1,
        "seq_len": b.get("seq_len"),
        "ckpt_freq": m.get("checkpointing", 0),
        "precision": r.get("precision") or "bf16-mixed",
        "optimizer": m.get("optimizer", "adamw"),
        "loss": m.get("loss", "upcast"),
        "bucket_mb": m.get("bucket_mb"),
    }


def shown_values(row: dict[str, Any]) -> dict[str, Any]:
    """row_values for what a table prints; a row that cannot be read is shown as stored."""
    try:
        return row_values(row)
    except SpecError:
        return row

"""The stored bench config is the Scenario serialised (specs/scenario.py scenario_to_row, read back by
inputs/stored.py scenario_from_row): exact round trips, version-0 rows that main wrote before the
row existed (tests/fixtures/stored/version0_rows.json) read as the runs they were, the same run
matched across the two schemas, and a row that cannot be read named with its run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prism_strategy.bench.importers import build_import, import_run
from prism_strategy.bench.results.predict import predict
from prism_strategy.bench.results.store import Result, Store
from prism_strategy.cli.app import app
from prism_strategy.cli.bench_inputs import base_config, census_base
from prism_strategy.flags import scenario_from_flags
from prism_strategy.inputs.stored import RowChange, row_key, row_values, row_with, scenario_from_row
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.presets import load_platform
from prism_strategy.specs.scenario import ROW_SCHEMA, scenario_to_row

FIXTURES = Path(__file__).parents[2] / "fixtures"
OLD = json.loads((FIXTURES / "stored" / "version0_rows.json").read_text())
A1 = dict(
    model="qwen3-0.6b",
    vision="siglip2-base-patch16-224",
    platform="aurora",
    seq_len=512,
    ckpt_freq=1,
    precision="bf16-pure",
)


@pytest.mark.parametrize(
    "model, options",
    [
        ("tiny-llama", dict(platform="cpu", nodes=2, ranks_per_node=2, seq_len=64, micro_batch=1)),
        (
            "qwen3-0.6b",
            dict(
                platform="aurora",
                nodes=2,
                vision="siglip2-base-patch16-224",
                mode="encoder-projector",
                seq_len=512,
                mean_seq_len=300,
                global_batch=96,
                ckpt_freq="sac",
                precision="bf16-pure",
                optimizer="adamw-fused",
                compile=True,
                compile_loss=True,
                env_profile="aurora-alcf-minimal",
            ),
        ),
        ("llama-3.1-8b", dict(platform="aurora", nodes=4, ckpt_freq="auto", loss="fused", bucket_mb=100)),
    ],
)
def test_a_scenario_reads_back_from_its_row_exactly(model, options):
    sc = scenario_from_flags(model, **options)
    row = json.loads(json.dumps(scenario_to_row(sc)))  # as the store keeps it: JSON
    assert row["schema"] == ROW_SCHEMA
    assert scenario_from_row(row, sc.platform) == sc
    assert row["environment"] is None or row["environment"]["profile"] == "aurora-alcf-minimal"


def test_main_s_version_0_bench_row_is_the_run_the_new_row_describes():
    old = OLD["bench"]
    assert "schema" not in old and old["micro_batch"] == 2  # the flat shape main stored
    new = base_config(
        "tiny-llama",
        nproc=4,
        ranks_per_node=2,
        micro_batch=2,
        seq_len=128,
        steps=5,
        warmup=2,
        precision="fp32",
        ckpt_freq=1,
        grad_accum=2,
        timeout_s=240,
        optimizer="adamw-foreach",
        loss="chunked",
    ) | {"strategy": "fsdp_full_shard"}
    assert new["schema"] == ROW_SCHEMA and "micro_batch" not in new
    assert scenario_from_row(old) == scenario_from_row(new)
    assert row_key(old) == row_key(new)
    assert row_key(row_with(new, RowChange(micro_batch=3))) != row_key(new)
    cpu = load_platform("cpu")
    assert predict(old, cpu) == predict(new, cpu)
    assert row_values(old) | {"model_spec": None} == row_values(new) | {"model_spec": None}


def test_main_s_version_0_census_row_is_the_run_the_new_row_describes():
    old = OLD["census"]
    new = census_base(
        "tiny-llama",
        nproc=4,
        ranks_per_node=2,
        grad_accum=2,
        mode="encoder-projector",
        vision="siglip2-base-patch16-224",
        bucket_mb=50,
        reduce_dtype="fp32",
    ) | {"strategy": "zero2"}
    sc = scenario_from_row(old)
    assert sc == scenario_from_row(new) and sc.model.vision.name == "siglip2-base-patch16-224"
    assert sc.memory.bucket_mb == 50 and new["reduce_dtype"] == "fp32" and new["census"] is True
    assert row_key(old) == row_key(new)


def test_reimporting_a_log_stored_by_main_changes_nothing(tmp_path):
    """The store matches a run by row_key: main's version-0 row of this log equals the new import."""
    store = Store(tmp_path / "results.db")
    log = FIXTURES / "imports" / "prism" / "train.log"
    fresh = build_import(log, A1).result
    assert fresh.dedup_key == OLD["imported_dedup_key"] and fresh.config["schema"] == ROW_SCHEMA
    store.add(Result(**{**_fields(fresh), "config": OLD["imported"]}))  # the row main stored
    again = import_run(log, A1, store)
    assert again.action == "unchanged"
    [row] = store.query()
    assert row.config == OLD["imported"]  # kept as stored: no user data rewritten
    assert scenario_from_row(row.config, load_platform("aurora")) == scenario_from_row(
        fresh.config, load_platform("aurora")
    )
    changed = import_run(log, A1 | {"ckpt_freq": 0}, store)
    assert changed.action == "updated"


def _fields(r: Result) -> dict:
    return {f: getattr(r, f) for f in Result.__dataclass_fields__}


@pytest.mark.parametrize(
    "row, words",
    [
        ({"schema": 7, "strategy": "ddp"}, ["schema 7", "upgrade prism-strategy"]),
        ({"model": "tiny-llama", "strategy": "ddp", "nproc": 4}, ["lacks 'micro_batch'"]),
        ({**OLD["bench"], "micro_batch": "two"}, ["malformed", "two"]),
        ({**OLD["bench"], "nproc": 3}, ["nproc 3", "ranks per node 2"]),
        ({"schema": 1, "strategy": "ddp"}, ["lacks 'layout'"]),
    ],
)
def test_a_row_that_cannot_be_read_says_why(row, words):
    with pytest.raises(SpecError) as e:
        scenario_from_row(row)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_a_schema_1_row_refuses_a_flat_scenario_key():
    new = base_config("tiny-llama", nproc=2, micro_batch=1, seq_len=32, steps=1, warmup=0, timeout_s=60)
    with pytest.raises(SpecError, match="flat key 'micro_batch'.*row_with"):
        scenario_from_row(new | {"micro_batch": 4})
    with pytest.raises(SpecError, match="nproc 4 is not its layout's 1 x 2"):
        scenario_from_row(new | {"nproc": 4})
    assert scenario_from_row(row_with(new, RowChange(micro_batch=4))).batch.micro_batch == 4


def test_row_with_sets_what_the_change_gives_and_keeps_the_rest():
    new = base_config("tiny-llama", nproc=2, micro_batch=1, seq_len=32, steps=3, warmup=1, timeout_s=60)
    row = row_with(new, RowChange(strategy="ddp", micro_batch=2, steps=1, ckpt_freq="sac"))
    sc = scenario_from_row(row)
    assert (sc.batch.micro_batch, sc.batch.global_batch, sc.memory.checkpointing) == (2, 4, "sac")
    assert (row["strategy"], row["steps"], row["warmup"], row["timeout_s"]) == ("ddp", 1, 1, 60)
    assert row_with(new, RowChange()) == new


def test_compare_names_the_stored_run_it_cannot_read(tmp_path):
    db = tmp_path / "results.db"
    good = {**OLD["bench"]}
    bad = {**OLD["bench"], "seq_len": "long"}
    measured = {"step_time_s": 1.0, "samples_per_s": 16.0, "peak_memory_bytes": 2**30}
    store = Store(db)
    for config in (good, bad):
        store.add(Result(kind="bench", status="ok", strategy="ddp", platform="cpu", config=config, measured=measured))
    res = CliRunner().invoke(app, ["compare", "--db", str(db), "--calibration", "none"])
    assert res.exit_code == 0, res.output  # the readable run is compared; the other is skipped and named
    warned = [line for line in res.stderr.splitlines() if line.startswith("warning: skipped stored result")]
    assert len(warned) == 1 and "stored result 2" in warned[0] and "long" in warned[0]
    assert "Traceback" not in res.output
    res = CliRunner().invoke(
        app, ["calibrate", "--platform", "cpu", "--db", str(db), "--out", str(tmp_path / "c.toml")]
    )
    assert res.exit_code == 2 and "stored result 2" in res.output and "Traceback" not in res.output, res.output
    assert not (tmp_path / "c.toml").exists()

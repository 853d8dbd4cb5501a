"""Census pieces that need no launch: the profiler recording on a real 1-rank gloo group, the
join of predicted and recorded collectives, the pinned JSON, the table width, bad input."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from rich.console import Console
from typer.testing import CliRunner

from prism_strategy.bench.collectives.census import CensusReport, _predicted, compare
from prism_strategy.bench.launch import census_record
from prism_strategy.cli import app
from prism_strategy.cli.bench_inputs import census_base
from prism_strategy.inputs.stored import scenario_from_row
from prism_strategy.report.census_table import census_notes, census_table
from prism_strategy.specs.errors import SpecError
from prism_strategy.strategies import STRATEGIES


@pytest.fixture
def one_rank_group(tmp_path, monkeypatch):
    """A real gloo process group of one rank; torch.distributed's functions restored afterwards."""
    for name in census_record._TAGGED:
        for mod in (c10d, dist):
            if hasattr(mod, name):
                monkeypatch.setattr(mod, name, getattr(mod, name))
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_profiler_records_each_c10d_collective_once_with_payload_dtype_and_group(one_rank_group):
    census_record.tag_collectives()
    grads = torch.ones(1000, dtype=torch.float32)
    shard = torch.ones(300, dtype=torch.bfloat16)
    gathered = torch.empty(300, dtype=torch.bfloat16)

    def step():
        with torch.profiler.record_function(census_record.PHASE + "backward"):
            dist.all_reduce(grads)
        dist.all_gather_into_tensor(gathered, shard)
        dist.reduce_scatter_tensor(shard, torch.ones(300, dtype=torch.bfloat16))
        dist.all_reduce(torch.zeros(1))

    calls = census_record.record(step, world=1)
    assert [(c["op"], c["dtype"], c["bytes"], c["group_size"]) for c in calls] == [
        ("all_reduce", "float32", 4000.0, 1),
        ("all_gather", "bfloat16", 600.0, 1),
        ("reduce_scatter", "bfloat16", 600.0, 1),
        ("all_reduce", "float32", 4.0, 1),
    ]
    summary = census_record.summarise(calls)
    assert [(r["op"], r["calls"]) for r in summary["collectives"]] == [
        ("all_reduce", 1),
        ("all_gather", 1),
        ("reduce_scatter", 1),
    ]
    assert summary["collectives"][0]["phases"] == {"backward": {"calls": 1, "bytes": 4000.0}}
    assert summary["control"] == [
        {
            "op": "all_reduce",
            "group_size": 1,
            "dtype": "float32",
            "calls": 1,
            "bytes": 4.0,
            "phases": {"other": {"calls": 1, "bytes": 4.0}},
        }
    ]


def test_untagged_calls_take_the_group_from_the_shape_ratio(one_rank_group):
    """DDP's C++ reducer bypasses the Python entry points: its gathers/scatters are sized by shape."""
    calls = census_record.record(lambda: dist.all_gather_into_tensor(torch.empty(8), torch.ones(8)), world=4)
    assert calls[0]["group_size"] == 1  # 8 gathered from 8: a group of one, not the world passed in


def _rows(*items):
    return [dict(op=o, group_size=g, dtype=d, calls=c, bytes=b) for o, g, d, c, b in items]


def test_compare_joins_rows_and_a_wrong_op_counts_twice():
    pred = _rows(("reduce_scatter", 4, "bfloat16", 2, 1000.0), ("all_gather", 4, "bfloat16", 1, 500.0))
    rec = _rows(("all_reduce", 4, "bfloat16", 2, 1000.0), ("all_gather", 4, "bfloat16", 1, 500.0))
    s = compare("zero2", "deepspeed", pred, rec)
    assert [(r.op, r.calls_predicted, r.calls_recorded) for r in s.rows] == [
        ("reduce_scatter", 2, 0),
        ("all_gather", 1, 1),
        ("all_reduce", 0, 2),
    ]
    assert s.bytes_error_pct == pytest.approx(100 * 2000 / 1500) and not s.ok


def test_compare_tolerates_five_percent_and_sums_repeated_rows():
    pred = _rows(("all_gather", 4, "bfloat16", 3, 600.0), ("all_gather", 4, "bfloat16", 3, 400.0))
    s = compare("fsdp_full_shard", "fsdp2", pred, _rows(("all_gather", 4, "bfloat16", 6, 960.0)))
    assert len(s.rows) == 1 and s.rows[0].calls_predicted == 6
    assert s.bytes_error_pct == pytest.approx(100 * 40 / 960) and s.ok
    assert not compare("x", "fsdp2", pred, _rows(("all_gather", 4, "bfloat16", 6, 940.0))).ok


def test_failed_run_is_not_ok_and_json_is_pinned():
    failed = compare("zero3", "deepspeed", _rows(("all_gather", 4, "float32", 1, 8.0)), None, error="failed: rank 1")
    good = compare(
        "ddp", "ddp", _rows(("all_reduce", 4, "float32", 1, 8.0)), _rows(("all_reduce", 4, "float32", 1, 8.0))
    )
    report = CensusReport(world=4, config={}, strategies=(good, failed))
    d = json.loads(json.dumps(report.as_dict()))
    assert set(d) == {"world", "strategies"} and d["world"] == 4
    for s in d["strategies"]:
        assert set(s) == {"strategy", "ok", "bytes_error_pct", "collectives"}
        for c in s["collectives"]:
            assert set(c) == {
                "op",
                "group_size",
                "dtype",
                "calls_predicted",
                "calls_recorded",
                "bytes_predicted",
                "bytes_recorded",
            }
    assert d["strategies"][0]["ok"] and d["strategies"][0]["bytes_error_pct"] == 0
    assert not d["strategies"][1]["ok"] and d["strategies"][1]["bytes_error_pct"] is None
    assert d["strategies"][1]["collectives"][0]["calls_recorded"] is None and not report.ok


def test_every_strategy_has_a_prediction_on_a_2x2_layout():
    base = census_base(model="tiny-llama", nproc=4, ranks_per_node=2, grad_accum=2)
    sc = scenario_from_row(base)
    for spec in STRATEGIES:
        rows, source = _predicted(spec, sc, grad_accum=2, bucket_mb=None, reduce_dtype=None)
        assert rows and source, spec.name
        assert all(r["bytes"] > 0 and r["calls"] >= 1 and r["group_size"] in (2, 4) for r in rows), (spec.name, rows)


def test_table_fits_100_columns_and_names_its_sources():
    rows = _rows(
        ("all_gather", 2, "bfloat16", 1234, 3.5 * 2**30), ("reduce_scatter", 2, "bfloat16", 12, 874.12 * 2**10)
    )
    rec = _rows(("all_gather", 2, "bfloat16", 1234, 3.5 * 2**30), ("reduce_scatter", 2, "bfloat16", 1248, 1.2 * 2**20))
    s = compare("hsdp_shard_grad_op", "fsdp2", rows, rec, control=[{"op": "broadcast", "dtype": "int64", "calls": 3}])
    report = CensusReport(
        world=16,
        config={
            "model": "qwen3-0.6b",
            "micro_batch": 4,
            "seq_len": 2048,
            "grad_accum": 2,
            "precision": "bf16-mixed",
            "ranks_per_node": 8,
        },
        strategies=(s,),
        predicted_by="engines.step_collectives",
    )
    console = Console(width=100, record=True)
    console.print(census_table(report, report.predicted_by))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 100
    for want in (
        "hsdp_shard_grad_op",
        "reduce_scatter",
        "bfloat16",
        "1234/1234",
        "12/1248",
        "3.50 GiB",
        "874.12 KiB",
        "1.20 MiB",
        "-28.9",
        "engines.step_collectives",
        "torch.profiler",
    ):
        assert want in text
    assert "…" not in text
    assert census_notes(report) == ["hsdp_shard_grad_op: control messages, not compared: broadcast int64 x3"]


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        (dict(precision="fp16"), "--precision"),
        (dict(mode="projector"), "--vision"),
        (dict(reduce_dtype="fp8"), "--reduce-dtype"),
        (dict(bucket_mb=0), "--bucket-mb"),
        (dict(nproc=4, ranks_per_node=3), "--ranks-per-node"),
        (dict(mode="both"), "--mode"),
    ],
)
def test_bad_input_is_refused_before_anything_runs(kw, words):
    with pytest.raises(SpecError, match=words):
        census_base(**(dict(model="tiny-llama", nproc=4, ranks_per_node=2) | kw))


def test_cli_bad_input_exits_2_on_one_line():
    runner = CliRunner()
    for args in (["--strategies", "ddp,nope"], ["--precision", "fp16"], ["--model", "no-such-model"]):
        res = runner.invoke(app, ["census", *args])
        assert res.exit_code == 2, res.output
        assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output


def test_bucket_and_reduce_dtype_reach_wrap_under_the_names_it_takes():
    """The bench worker passes a config's bucket size and reduce dtype to wrap() under wrap's own
    keyword names, and only when the config sets them (wrap's defaults stay the engine's)."""
    from prism_strategy.bench.launch.worker import engine_options
    from prism_strategy.runtime.wrap import SETTINGS
    from prism_strategy.wrap_config import WrapConfig

    defaults = WrapConfig(strategy="zero2")
    base = dict(model="tiny-llama", nproc=2, ranks_per_node=1)
    assert engine_options(census_base(**base) | {"strategy": "ddp"}) == {}
    assert engine_options(census_base(**base, bucket_mb=50) | {"strategy": "ddp"}) == {"bucket_mb": 50}
    both = engine_options(census_base(**base, bucket_mb=25, reduce_dtype="fp32") | {"strategy": "zero2"})
    assert both == {"bucket_mb": 25, "reduce_dtype": "fp32"}
    assert set(both) <= set(SETTINGS) and defaults.bucket_mb is None and defaults.reduce_dtype is None

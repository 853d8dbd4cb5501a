"""Importers of runs measured elsewhere: PRISM logs and perf.jsonl, torchtitan logs, StepMonitor
folders (hand-made fixtures in tests/fixtures/imports, written by its make_fixtures.py), the
steady-state rule and the scenario resolution."""

from pathlib import Path

import pytest

from prism_strategy.bench.importers import build_import, read_log
from prism_strategy.bench.importers.steady import steady_state
from prism_strategy.inputs.stored import row_values
from prism_strategy.readers.prism import unrun_means
from prism_strategy.readers.training_log import Window
from prism_strategy.specs import SpecError

F = Path(__file__).parents[2] / "fixtures" / "imports"
A1 = dict(
    model="qwen3-0.6b",
    vision="siglip2-base-patch16-224",
    platform="aurora",
    seq_len=512,
    ckpt_freq=1,
    precision="bf16-pure",
)
TITAN = dict(
    model="qwen3-0.6b",
    mode="e2e",
    strategy="fsdp_full_shard",
    platform="aurora",
    nodes=2,
    ckpt_freq=0,
    precision="bf16-mixed",
)
MON = dict(model="tiny-llama", mode="e2e", strategy="ddp", platform="cpu", ckpt_freq=0, precision="fp32")


def test_prism_log_undoes_running_means_and_reads_the_scenario():
    imp = build_import(F / "prism" / "train.log", A1)
    c, m = row_values(imp.result.config), imp.result.measured
    # the fixture's steady intervals are 0.02 + 0.54 + 1.89 + 0.03 = 2.48 s (+-1%)
    assert m["step_time_s"] == pytest.approx(2.48, rel=0.01)
    assert m["backward_s"] == pytest.approx(1.89, rel=0.01) and m["forward_s"] == pytest.approx(0.54, rel=0.02)
    assert m["samples_per_s"] == pytest.approx(48 / m["step_time_s"])
    assert (c["mode"], c["strategy"], c["nproc"], c["ranks_per_node"], c["micro_batch"], c["grad_accum"]) == (
        "e2e",
        "ddp",
        12,
        12,
        4,
        1,
    )
    assert c["static_graph"] is True and c["bucket_cap_mb"] == 50
    assert imp.origin["strategy"].endswith("train.log:2") and imp.origin["model"] == "flag"
    assert imp.result.peak_allocated_bytes == pytest.approx(37.9e9)  # [MEMORY] Peak: GB = 1e9 bytes
    assert imp.result.peak_reserved_bytes == pytest.approx(40100 * 2**20)
    assert imp.result.provenance == "imported" and imp.result.source.endswith("train.log")
    # 20 windows of 10 steps: 2 warm-up dropped, and the stalled steps 121-130
    assert (imp.steady.as_dict()["warmup_dropped"], imp.steady.as_dict()["outlier_steps"]) == (2, [130])


def test_prism_perf_jsonl_agrees_with_the_text_log():
    text = build_import(F / "prism" / "train.log", A1).result.measured
    perf = build_import(F / "prism_perf", A1 | {"mode": "e2e"}).result
    assert perf.measured["step_time_s"] == pytest.approx(text["step_time_s"], rel=0.01)
    assert row_values(perf.config)["micro_batch"] == 4 and perf.peak_allocated_bytes == pytest.approx(37.9e9)


def test_torchtitan_step_time_from_tokens_per_second():
    imp = build_import(F / "torchtitan" / "train.log", TITAN)
    c, m = row_values(imp.result.config), imp.result.measured
    assert (c["micro_batch"], c["seq_len"], c["nproc"]) == (2, 8192, 24)  # from the start line and --nodes
    assert m["step_time_s"] == pytest.approx(2 * 8192 / 5125, rel=0.01)
    assert m["tflops_per_device"] == pytest.approx(82, rel=0.01)
    assert imp.result.peak_reserved_bytes == pytest.approx(44.0 * 2**30) and imp.result.peak_allocated_bytes is None
    assert imp.steady.as_dict()["outlier_steps"] == [60]


def test_stepmonitor_folder_slowest_rank_per_step():
    imp = build_import(F / "monitor" / "good", MON)
    c, m = row_values(imp.result.config), imp.result.measured
    assert (c["nproc"], c["micro_batch"], c["seq_len"]) == (2, 4, 128)  # samples 4, tokens 512 per rank step
    assert 0.045 < m["step_time_s"] < 0.055 and imp.steady.as_dict()["outlier_steps"] == [7]
    assert imp.result.peak_allocated_bytes is None and m["peak_memory_bytes"] == 301_000_000  # CPU: max RSS


@pytest.mark.parametrize(
    "path, line, partial",
    [
        ("prism/malformed.log", 47, False),
        ("prism/partial.log", 64, True),
        ("prism_perf_malformed", 6, False),
        ("prism_perf_partial", 25, True),
        ("torchtitan/malformed.log", 5, False),
        ("torchtitan/partial.log", 12, True),
        ("monitor/malformed", 5, False),
        ("monitor/partial", 13, True),
    ],
)
def test_bad_or_partial_log_names_file_and_line(path, line, partial):
    flags = MON | {"nodes": 1} if path.startswith("monitor") else (TITAN if "titan" in path else A1 | {"mode": "e2e"})
    with pytest.raises(SpecError) as e:
        build_import(F / path, flags)
    assert f":{line}:" in str(e.value) and ("cut off" in str(e.value)) == partial


def test_missing_fields_are_named_and_flags_win(tmp_path):
    with pytest.raises(
        SpecError, match=r"does not say model, ckpt_freq, precision; pass --model, --ckpt-freq, --precision"
    ):  # no log states these: said before the log is read (issue 38)
        build_import(F / "prism" / "train.log", {"platform": "aurora"})
    given = {k: A1[k] for k in ("platform", "model", "ckpt_freq", "precision")}
    with pytest.raises(SpecError, match=r"the log does not say seq_len; pass --seq-len"):
        build_import(F / "prism" / "train.log", given)
    imp = build_import(F / "prism" / "train.log", A1 | {"nodes": 2, "mode": "projector"})
    assert row_values(imp.result.config)["ranks_per_node"] == 6 and imp.result.config["mode"] == "projector"
    fsdp = (F / "prism_perf" / "perf.jsonl").read_text().replace('"dist_strategy": "ddp"', '"dist_strategy": "fsdp"')
    (tmp_path / "perf.jsonl").write_text(fsdp)
    with pytest.raises(SpecError, match="not how it shards; pass --strategy"):
        build_import(tmp_path / "perf.jsonl", A1 | {"mode": "e2e"})
    assert (
        build_import(tmp_path / "perf.jsonl", A1 | {"mode": "e2e", "strategy": "fsdp_full_shard"}).result.strategy
        == "fsdp_full_shard"
    )


def test_unknown_format_and_rank_file_are_clear_errors(tmp_path):
    (tmp_path / "x.log").write_text("hello\n")
    with pytest.raises(SpecError, match="not a PRISM log"):
        read_log(tmp_path / "x.log")
    with pytest.raises(SpecError, match="pass its folder"):
        read_log(F / "monitor" / "good" / "rank0.jsonl")


def test_unrun_means_recovers_interval_means():
    # true 10-step interval means 4, 2, 3 (window of 50 resets after step 50); then a new window
    points = [(10, "a", [4.0]), (20, "b", [3.0]), (30, "c", [3.0]), (60, "d", [5.0])]
    got = [(w.last_step, w.steps, round(w.step_s, 9)) for w in unrun_means(points)]
    assert got == [(10, 10, 4.0), (20, 10, 2.0), (30, 10, 3.0), (60, 10, 5.0)]


def _w(i, t, steps=1):
    return Window(last_step=i, steps=steps, where=f"f:{i}", step_s=t)


def test_steady_state_drops_warmup_and_outliers_and_weights_by_steps():
    times = [9.0] + [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01, 5.0] + [1.0] * 10
    st = steady_state([_w(i, t) for i, t in enumerate(times)], "f")
    assert len(st.warmup) == 2 and [w.step_s for w in st.outliers] == [5.0]
    assert st.mean(lambda w: w.step_s) == pytest.approx(1.0, abs=0.005)
    weighted = steady_state([_w(0, 9), _w(1, 1.0, 1), _w(2, 1.02, 3), _w(3, 1.01, 1)], "f")
    assert weighted.mean(lambda w: w.step_s) == pytest.approx((1.0 + 3 * 1.02 + 1.01) / 5)
    flat = steady_state([_w(i, 2.0) for i in range(6)], "f")  # MAD 0: nothing is an outlier
    assert not flat.outliers and len(flat.kept) == 5
    with pytest.raises(SpecError, match="steady state needs at least 3"):
        steady_state([_w(0, 1.0), _w(1, 1.0)], "short.log")

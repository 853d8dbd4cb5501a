"""Results store (real SQLite, concurrent writers), fingerprints, calibration fitting, compare."""

import dataclasses
import multiprocessing as mp

import pytest

from prism_strategy.bench.calibrate import calibrate, errors_pct, fitted_values
from prism_strategy.bench.compare import compare
from prism_strategy.bench.fingerprint import fingerprint
from prism_strategy.estimate.calibration import same_setup
from prism_strategy.bench.predict import predict
from prism_strategy.bench.store import Result, Store, export
from prism_strategy.estimate.calibration import apply_calibration, load_calibration, write_calibration
from prism_strategy.specs import SpecError, load_platform

TINY = dict(name="tiny", hf_model_type="llama", layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=128,
            vocab=512, max_positions=512)


def config(strategy="ddp", mb=2, seq=64, nproc=4, rpn=2, **kw):
    return dict(model_spec=TINY, strategy=strategy, micro_batch=mb, seq_len=seq, nproc=nproc, ranks_per_node=rpn,
                precision="fp32", **kw)


def _writer(args):
    path, worker, n = args
    s = Store(path)
    for i in range(n):
        s.add(Result(kind="bench", status="ok", strategy="ddp", platform="cpu", config={"w": worker, "i": i},
                     measured={"step_time_s": 1.0}, fingerprint={"host": "h"}))


def test_concurrent_writers_lose_nothing(tmp_path):
    db = tmp_path / "r.db"
    with mp.get_context("spawn").Pool(4) as pool:
        pool.map(_writer, [(db, w, 25) for w in range(4)])
    rows = Store(db).query()
    assert len(rows) == 100
    assert {(r.config["w"], r.config["i"]) for r in rows} == {(w, i) for w in range(4) for i in range(25)}


def test_a_write_that_finds_the_store_locked_waits_for_the_lock(tmp_path, monkeypatch):
    """SQLite's own wait is cut to 20 ms, so only the whole-operation retry can save this write."""
    import sqlite3
    import threading

    from prism_strategy.bench import store as store_mod
    db = tmp_path / "r.db"
    Store(db).add(Result(kind="bench", status="ok", strategy="ddp", platform="cpu", config={"i": 0}, measured={}))
    monkeypatch.setattr(store_mod, "BUSY_TIMEOUT_S", 0.02)
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    threading.Timer(0.5, holder.execute, ("COMMIT",)).start()
    Store(db).add(Result(kind="bench", status="ok", strategy="ddp", platform="cpu", config={"i": 1}, measured={}))
    holder.close()
    assert [r.config["i"] for r in Store(db).query()] == [0, 1]


def test_store_roundtrip_and_export(tmp_path):
    s = Store(tmp_path / "r.db")
    rid = s.add(Result(kind="bench", status="ok", strategy="zero2", platform="cpu", config=config("zero2"),
                       measured={"step_time_s": 0.5}, fingerprint=fingerprint(platform="cpu", backend="gloo")))
    [r] = s.query(platform="cpu")
    assert r.id == rid and r.config == config("zero2") and r.fingerprint["backend"] == "gloo"
    assert r.fingerprint["torch"] and r.fingerprint["code"]
    assert '"strategy": "zero2"' in export([r], "json")
    assert export([r], "csv").splitlines()[0].startswith("id,created_at")
    with pytest.raises(SpecError, match="status"):
        s.add(dataclasses.replace(r, status="great"))


def test_corrupt_store_is_a_clear_error(tmp_path):
    bad = tmp_path / "r.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(SpecError, match="not a usable SQLite"):
        Store(bad).query()


def test_same_setup_ignores_host():
    a = {"platform": "aurora", "torch": "2.8", "backend": "xccl", "host": "x1"}
    assert same_setup(a, a | {"host": "x2"}) and not same_setup(a, a | {"torch": "2.9"})


def synthetic_runs(truth, configs):
    """Measurements made by a platform whose efficiencies differ from the preset's."""
    out = []
    for c in configs:
        p = predict(c, truth)
        out.append(Result(kind="bench", status="ok", strategy=c["strategy"], platform="cpu", config=c,
                          measured={"step_time_s": p["step_time_s"], "samples_per_s": p["samples_per_s"],
                                    "peak_memory_bytes": p["memory_bytes"]}))
    return out


def test_calibration_recovers_a_different_platform_and_generalises(tmp_path):
    base = load_platform("cpu")
    truth = dataclasses.replace(base, achievable_fraction=0.12, intra_bw_gbps=0.5, intra_ring_bw_gbps=0.5,
                                collective_overhead_us=400.0, activation_factor=1.3, framework_reserve_gib=0.05)
    train = [config(s, mb=mb, seq=seq) for s in ("ddp", "fsdp_full_shard", "hsdp_shard_grad_op", "zero2")
             for mb, seq in ((1, 64), (4, 128))]
    held = [config(s, mb=2, seq=256) for s in ("ddp", "fsdp_shard_grad_op", "hsdp_full_shard", "zero2")]
    fitted, report = calibrate(base, synthetic_runs(truth, train))
    assert report["after"]["step_time_median"] < report["before"]["step_time_median"]
    held_err = errors_pct(fitted, synthetic_runs(truth, held))
    assert held_err["step_time_median"] < 10 and held_err["memory_median"] < 5
    path = tmp_path / "cpu.toml"
    write_calibration(path, platform="cpu", fingerprint={"host": "h", "torch": "2.13"},
                      values=fitted_values(fitted), runs=report["runs"], errors=report["after"])
    applied = apply_calibration(base, load_calibration(path), str(path))
    assert applied.achievable_fraction == pytest.approx(fitted.achievable_fraction)
    assert applied.source("achievable_fraction").startswith("calibrated")


def test_calibration_needs_runs():
    with pytest.raises(SpecError, match="at least 3"):
        calibrate(load_platform("cpu"), [])


def test_compare_rows(tmp_path):
    runs = synthetic_runs(load_platform("cpu"), [config("ddp"), config("zero2")])
    rows = compare(runs)
    assert [r["strategy"] for r in rows] == ["ddp", "zero2"]
    for r in rows:
        assert set(r["error_pct"]) == {"samples_per_s", "step_time_s", "tokens_per_s_per_device", "mfu", "memory_gib"}
        assert r["error_pct"]["step_time_s"] == pytest.approx(0, abs=1e-9)

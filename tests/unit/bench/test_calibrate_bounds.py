"""calibrate keeps every fitted value inside its physical bounds (data/calibration_bounds.toml),
never writes a fit worse than what it replaces on the same rows, prints no NaN, and a calibration
fitted to imported runs is the one `plan --calibration auto` finds."""

import json

import pytest
from typer.testing import CliRunner

from prism_strategy.bench.fit import calibrate as calibrate_mod
from prism_strategy.bench.fit import comm_fit
from prism_strategy.bench.fit.calibrate import bounds_for, calibration_bounds, errors_pct, fit_time, held_in_bounds
from prism_strategy.bench.results.predict import predict
from prism_strategy.bench.results.store import Result, Store
from prism_strategy.cli import app
from prism_strategy.specs import load_platform
from prism_strategy.specs.presets import platform_names

TINY = dict(
    name="tiny",
    hf_model_type="llama",
    layers=2,
    hidden=64,
    heads=4,
    kv_heads=2,
    head_dim=16,
    ffn=128,
    vocab=512,
    max_positions=512,
)
runner = CliRunner()


def config(strategy="ddp", mb=2, seq=64, nproc=4, rpn=2):
    return dict(
        model_spec=TINY,
        strategy=strategy,
        micro_batch=mb,
        seq_len=seq,
        nproc=nproc,
        ranks_per_node=rpn,
        precision="fp32",
    )


def runs_of(truth, configs, memory=True):
    out = []
    for c in configs:
        p = predict(c, truth)
        out.append(
            Result(
                kind="bench",
                status="ok",
                strategy=c["strategy"],
                platform="cpu",
                config=c,
                measured={"step_time_s": p["step_time_s"], "samples_per_s": p["samples_per_s"]}
                | ({"peak_memory_bytes": p["memory_bytes"]} if memory else {}),
                fingerprint={"host": "h", "platform": "cpu", "backend": "gloo", "torch": "2.13.0"},
            )
        )
    return out


CONFIGS = [config(s, mb=mb, seq=seq) for s in ("ddp", "fsdp_full_shard", "zero2") for mb, seq in ((1, 64), (4, 128))]


def test_every_bound_has_a_source_and_the_presets_sit_inside_their_bounds():
    for name, b in calibration_bounds().items():
        assert b["source"], name
    for plat in ("cpu", "aurora", "dgx-h100", "polaris"):
        p = load_platform(plat)
        fitted, held = held_in_bounds(p, p)
        assert held == [], (plat, held)


def test_a_fit_that_wants_an_impossible_value_stays_at_the_bound():
    base = load_platform("dgx-h100")
    lo, hi = bounds_for(base, "intra_bw_gbps")
    assert (lo, hi) == (225.0, 450.0)  # half the NVLink rate .. the datasheet's 450 GB/s, never above
    wild = base.with_values(intra_latency_us=0.00026, intra_bw_gbps=150.0, peak_tflops_bf16=2000.0)
    fixed, held = held_in_bounds(base, wild)
    assert fixed.links.intra_latency_us == 0.4 and fixed.links.intra_bw_gbps == 225.0
    assert fixed.hardware.peak_tflops_bf16 == base.hardware.peak_tflops_bf16  # the datasheet peak is not beaten
    assert len(held) == 3 and any("tuning.cc" in n for n in held)


def test_the_fit_of_latency_on_runs_that_cannot_see_it_stays_bounded():
    """Runs that barely see latency: coordinate descent used to drive it towards 0 (0.00026 us)."""
    base = load_platform("cpu")
    truth = base.with_values(achievable_fraction=0.2, intra_latency_us=1e-4)
    fitted = fit_time(base, runs_of(truth, CONFIGS[:3]), rounds=2)
    for name in calibration_bounds():
        lo, hi = bounds_for(base, name)
        assert lo <= comm_fit.value(fitted, name) <= hi, name


def test_no_nan_when_the_runs_have_no_memory():
    base = load_platform("cpu")
    errs = errors_pct(base, runs_of(base, CONFIGS, memory=False))
    assert "memory_median" not in errs and errs["step_time_median"] == pytest.approx(0, abs=1e-6)


def test_a_fit_worse_than_the_calibration_it_replaces_is_not_written(tmp_path, monkeypatch):
    db, out = tmp_path / "r.db", tmp_path / "cpu.toml"
    truth = load_platform("cpu").with_values(achievable_fraction=0.2)
    Store(db).add_many(runs_of(truth, CONFIGS))  # as many rows as the fit has free terms, or more
    monkeypatch.setattr(calibrate_mod, "fit_time", lambda base, runs, **kw: truth)  # a fit that finds the truth
    r = runner.invoke(app, ["calibrate", "--platform", "cpu", "--db", str(db), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "nan" not in r.output and all(len(line) <= 100 for line in r.output.splitlines())
    good = out.read_text()
    off = truth.with_values(achievable_fraction=0.3)  # a refit that lands beside it
    monkeypatch.setattr(calibrate_mod, "fit_time", lambda base, runs, **kw: off)
    r = runner.invoke(app, ["calibrate", "--platform", "cpu", "--db", str(db), "--out", str(out), "--json"])
    report = json.loads(r.stdout)
    assert r.exit_code == 1 and not report["written"] and out.read_text() == good
    assert f"worse than the calibration in {out} on the same 6 runs" in report["refused"]
    assert report["replaces"]["step_time_median"] < 1 < report["after"]["step_time_median"]
    text = runner.invoke(app, ["calibrate", "--platform", "cpu", "--db", str(db), "--out", str(out)]).output
    assert "not written" in text and "nan" not in text


def test_calibration_from_imported_runs_is_found_by_plan_auto(tmp_path, monkeypatch):
    from pathlib import Path

    from prism_strategy.bench.importers import build_import
    from prism_strategy.estimate.calibration import calibrated_platform

    log = Path(__file__).resolve().parents[2] / "fixtures" / "imports" / "prism" / "train.log"
    imp = build_import(
        log,
        dict(
            model="qwen3-0.6b",
            vision="siglip2-base-patch16-224",
            platform="aurora",
            seq_len=512,
            ckpt_freq=1,
            precision="bf16-pure",
        ),
    )
    fp = imp.result.fingerprint
    assert (fp["platform"], fp["backend"]) == ("aurora", "xccl") and fp["torch"]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    from prism_strategy.estimate.calibration import default_calibration_dir, write_calibration

    write_calibration(
        default_calibration_dir() / "aurora.toml",
        platform="aurora",
        fingerprint=fp | {"platform": "aurora", "backend": "xccl"},
        values={"kernel_launch_us": 44.0},
        runs=3,
        errors={},
    )
    if fp["torch_from"].startswith("the importing machine"):
        assert calibrated_platform(load_platform("aurora"), "auto").compute.kernel_launch_us == 44.0


def test_plan_with_a_calibration_file_says_calibrated_in_its_table(tmp_path):
    from prism_strategy.estimate.calibration import write_calibration

    cal = tmp_path / "cpu.toml"
    write_calibration(
        cal, platform="cpu", fingerprint={"host": "h"}, values={"achievable_fraction": 0.2}, runs=3, errors={}
    )
    args = ["plan", "--model", "tiny-llama", "--platform", "cpu", "--seq-len", "64"]
    r = runner.invoke(app, [*args, "--calibration", str(cal)])
    assert r.exit_code == 0, r.output
    assert f"predicted by the analytic model, calibrated ({cal})" in " ".join(r.stdout.split())
    plain = runner.invoke(app, [*args, "--calibration", "none"]).stdout
    assert "analytic model, calibrated" not in " ".join(plain.split())


def test_a_worse_memory_refit_keeps_the_memory_values_it_would_replace(tmp_path, monkeypatch):
    db, out = tmp_path / "r.db", tmp_path / "cpu.toml"
    base = load_platform("cpu")
    truth = base.with_values(achievable_fraction=0.2)
    Store(db).add_many(runs_of(truth, CONFIGS))  # as many rows as the fit has free terms, or more
    monkeypatch.setattr(calibrate_mod, "fit_time", lambda base, runs, **kw: truth)
    monkeypatch.setattr(calibrate_mod, "fit_memory", lambda p, runs: p.with_values(activation_factor=3.0))
    r = runner.invoke(app, ["calibrate", "--platform", "cpu", "--db", str(db), "--out", str(out), "--json"])
    report = json.loads(r.stdout)
    assert r.exit_code == 0 and report["written"] and "kept from the cpu preset" in report["kept"]
    assert report["values"]["activation_factor"] == base.calibration.activation_factor
    assert report["after"]["memory_median"] <= report["replaces"]["memory_median"] + 0.05


@pytest.mark.parametrize("name", platform_names())
def test_every_comm_term_a_preset_can_fit_has_bounds_around_the_preset(name):
    """calibrate --fit comm moves only these terms (bench/fit/comm_fit.py); each needs a bound with
    its source, and the shipped value must lie inside it or the fit would start outside."""
    base = load_platform(name)
    for t in comm_fit.terms_of(base):
        lo, hi = bounds_for(base, t.name)
        assert lo <= comm_fit.value(base, t.name) <= hi and calibration_bounds()[t.name]["source"], t.name


def test_the_memory_fit_never_sets_a_negative_reserve():
    """Runs whose peaks sit below what the model gives with no reserve (a CPU run: no runtime
    context) fitted framework_reserve_gib < 0, which the platform refuses (exit 2 for every later
    plan). The reserve is held at its bound, 0, and the factor refitted alone."""
    from prism_strategy.bench.fit.calibrate import fit_memory

    truth = load_platform("cpu").with_values(activation_factor=1.3, framework_reserve_gib=0.0)
    runs = runs_of(truth, CONFIGS)
    low = 0.1 * min(predict(c, truth)["activation_bytes"] for c in CONFIGS)
    for r in runs:  # every peak a little under the truth's: the unconstrained intercept is -low
        r.measured["peak_memory_bytes"] -= low
    fitted = fit_memory(load_platform("cpu"), runs)
    assert fitted.allocator.framework_reserve_gib == 0.0
    assert 0 < fitted.calibration.activation_factor < 1.3

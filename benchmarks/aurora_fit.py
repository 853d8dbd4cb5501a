"""The aurora preset against PRISM's published Aurora records (data/measurements/aurora-prism.toml).

For every record with a step time: measured, predicted by the preset before the fit (the priors
in bench/fit_terms.py), predicted after (the fit, as shipped in data/platforms/aurora.toml), the
error of each, and the leave-one-out error (refit without the record). Records kept out of the
fit are shown as checks with the reason. Then peak memory (allocated / reserved / as reported)
beside the planner's figures. Goals: median |step error| <= 15% fitted, <= 25% leave-one-out.

Run: PYTHONPATH=src .venv/bin/python benchmarks/aurora_fit.py [--json]
"""

from __future__ import annotations

import argparse
import json
import sys

from prism_strategy.bench import fit_terms as ft
from prism_strategy.bench.published import load_published
from prism_strategy.specs.presets import load_platform


def step_rows(name: str = "aurora-prism", platform: str = "aurora") -> dict:
    records = load_published(name)
    shipped = load_platform(platform)
    prior = ft.prior_platform(shipped)
    fitted_records = [r for r in records if ft.fit_reason(r) is None]
    obs = [o for r in fitted_records for o in ft.record_observations(r)]
    fitted = ft.fit(prior, obs)
    loo = ft.leave_one_out(prior, obs)
    rows = []
    for r in records:
        if r.step_time_s() is None:
            continue
        (o,) = [x for x in ft.record_observations(r) if x.what == "step_s"]
        rows.append({"id": r.id, "strategy": r.scenario.strategy, "nodes": r.scenario.nodes, "measured_s": o.measured,
                     "before_s": o.predict(prior), "after_s": o.predict(shipped), "refit_s": o.predict(fitted),
                     "loo_err_pct": loo.get(r.id), "fitted": ft.fit_reason(r) is None, "why_not": ft.fit_reason(r)})
    for row in rows:
        for k in ("before", "after", "refit"):
            row[f"{k}_err_pct"] = 100 * (row[f"{k}_s"] / row["measured_s"] - 1)
    fit_rows = [x for x in rows if x["fitted"]]
    summary = {
        "fitted_records": len(fit_rows),
        "median_abs_err_before_pct": ft.median_abs({x["id"]: x["before_err_pct"] for x in fit_rows}),
        "median_abs_err_after_pct": ft.median_abs({x["id"]: x["after_err_pct"] for x in fit_rows}),
        "median_abs_err_loo_pct": ft.median_abs(loo),
        "median_abs_err_checks_pct": ft.median_abs({x["id"]: x["after_err_pct"] for x in rows if not x["fitted"]}),
        "refit_values": {k: ft.get_value(fitted, k) for k in ft.KNOBS},
        "shipped_values": {k: ft.get_value(shipped, k) for k in ft.KNOBS},
    }
    return {"rows": rows, "summary": summary}


def memory_rows(name: str = "aurora-prism") -> list[dict]:
    from prism_strategy.estimate.memory_runtime import runtime_memory
    from prism_strategy.planning.planner import evaluate
    from prism_strategy.planning.scenario import build_scenario
    from prism_strategy.specs.cluster import GiB
    from prism_strategy.strategies import get_strategy

    out = []
    for r in load_published(name):
        measured = {k: r.peak_bytes(k) for k in ("peak", "allocated", "reserved")}
        if not any(measured.values()):
            continue
        sc = build_scenario(**r.scenario_kwargs())
        o = evaluate(sc, get_strategy(r.planner_strategy))
        rt = runtime_memory(o.memory, sc.platform)
        out.append({"id": r.id, "oom": r.measured.oom,
                    "measured_gib": {k: (v / GiB if v else None) for k, v in measured.items()},
                    "predicted_allocated_gib": rt.allocated / GiB, "predicted_reserved_gib": rt.reserved / GiB})
    return out


def _f(v, fmt="{:7.2f}"):
    return " " * 7 if v is None else fmt.format(v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    steps, mem = step_rows(), memory_rows()
    if args.json:
        json.dump({"step": steps, "memory": mem}, sys.stdout, indent=2)
        return
    print(f"{'record':10s} {'strategy':16s} {'nodes':>5s} {'meas s':>7s} {'before':>7s} {'err%':>6s} "
          f"{'after':>7s} {'err%':>6s} {'LOO%':>6s}  fit")
    for x in steps["rows"]:
        loo = _f(x["loo_err_pct"], "{:+6.0f}") if x["fitted"] else "      "
        print(f"{x['id']:10s} {x['strategy']:16s} {x['nodes']:5d} {x['measured_s']:7.2f} {x['before_s']:7.2f} "
              f"{x['before_err_pct']:+6.0f} {x['after_s']:7.2f} {x['after_err_pct']:+6.0f} {loo}  "
              f"{'yes' if x['fitted'] else 'no: ' + x['why_not'][:52]}")
    s = steps["summary"]
    print(f"\nmedian |step error| on {s['fitted_records']} fitted records: before {s['median_abs_err_before_pct']:.1f}%, "
          f"after {s['median_abs_err_after_pct']:.1f}%, leave-one-out {s['median_abs_err_loo_pct']:.1f}%; "
          f"checks (not fitted) {s['median_abs_err_checks_pct']:.1f}%")
    print("fitted values (shipped -> refit now):")
    for k, v in s["shipped_values"].items():
        print(f"  {k:32s} {v:10.4g} -> {s['refit_values'][k]:10.4g}")
    print(f"\n{'record':10s} {'measured GiB: peak / allocated / reserved':44s} {'predicted alloc':>15s} {'reserved':>9s}")
    for m in mem:
        g = m["measured_gib"]
        meas = " / ".join(_f(g[k], "{:5.1f}").strip() or "-" for k in ("peak", "allocated", "reserved"))
        print(f"{m['id']:10s} {meas + (' (OOM)' if m['oom'] else ''):44s} {m['predicted_allocated_gib']:15.1f} "
              f"{m['predicted_reserved_gib']:9.1f}")


if __name__ == "__main__":
    main()

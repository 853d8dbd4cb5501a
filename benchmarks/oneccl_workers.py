"""What the oneCCL routing (estimate/comm_oneccl.py gpu_kernel_route) says PRISM's runs would do
with CCL_WORKER_COUNT=4 instead of the profile's 1. Predictions only; nothing here is fitted and no
record changes. The records say "CCL_WORKER_COUNT=1 or 4 as noted" and section D notes neither, so
which one D ran is a reading the data cannot decide.

- D1 / D4 (OLMo-3 7B E2E FSDP1, 1 / 2 nodes) at the inferred 331 text tokens and at the 1024 cap;
- PRISM's ZeRO-2 E2E run (docs/domain.md section 2: ~9.8 samples/s at BS 8; no record: D1's scenario with
  zero2, micro-batch 8, 1 node);
- the all-gather alone, host-staged over GPU kernels, 12 ranks of one node, against PRISM's "4 workers
  caused a 48x all-gather regression" (_known_bad.toml; the size it was seen at is not recorded);
- every record with a step time: its step error under each worker count (the shipped fit, made
  with 1 worker, unchanged): which sections each reading fits.

Run: PYTHONPATH=src .venv/bin/python benchmarks/oneccl_workers.py
"""

from __future__ import annotations

from prism_strategy.bench.fit import fit_terms as ft
from prism_strategy.bench.fit.published import load_published
from prism_strategy.emit.env import load_env_profile
from prism_strategy.estimate.comm import collective_call
from prism_strategy.estimate.comm_oneccl import with_ccl_env
from prism_strategy.flags import scenario_from_flags
from prism_strategy.planning.planner import evaluate
from prism_strategy.specs.presets import load_platform
from prism_strategy.strategies import get_strategy

WORKERS = ("1", "4")


def platforms() -> dict[str, object]:
    base = load_platform("aurora")
    env = load_env_profile(base.env_profile).values_for(base.name)
    return {w: with_ccl_env(base, env | {"CCL_WORKER_COUNT": w}) for w in WORKERS}


def cases() -> list[tuple[str, dict, str, object]]:
    recs = {r.id: r for r in load_published("aurora-prism")}
    out = []
    for rid in ("D1", "D4"):
        r = recs[rid]
        out += [
            (f"{rid} seq {n}", r.scenario_kwargs() | {"seq_len": n}, r.planner_strategy, r.measured.samples_per_s)
            for n in (331, 1024)
        ]
    d1 = recs["D1"].scenario_kwargs()
    out += [
        (f"ZeRO-2 1 node b8 seq {n}", d1 | {"seq_len": n, "micro_batch": 8, "global_batch": 96}, "zero2", 9.8)
        for n in (331, 1024)
    ]
    return out


def main() -> None:
    ps = platforms()
    print(f"{'case':26s} {'measured':>12s}  " + "  ".join(f"workers={w}: samples/s (step s, comm s)" for w in WORKERS))
    for label, kw, strat, measured in cases():
        cells = []
        for w in WORKERS:
            o = evaluate(scenario_from_flags(**(kw | {"platform": ps[w]})), get_strategy(strat))
            cells.append(f"{o.samples_per_s:7.2f} ({o.step_time_s:6.2f}, {o.comm_s:6.2f})")
        m = "-".join(f"{x:g}" for x in measured) if isinstance(measured, tuple) else f"{measured:g}"
        print(f"{label:26s} {m:>12s}  " + "           ".join(cells))
    print("\nall-gather, 12 ranks in one node: host-staged (workers=4) / GPU kernels (workers=1)")
    for mb in (1, 16, 64, 256, 1024):
        t = {w: collective_call("all_gather", mb * 1e6, 12, 1, 1, ps[w])[0] for w in WORKERS}
        print(f"  {mb:5d} MB: {t['1'] * 1e3:8.2f} ms -> {t['4'] * 1e3:9.2f} ms  x{t['4'] / t['1']:.1f}")
    record_errors(ps)


def record_errors(ps: dict) -> None:
    print("\nstep error per record, predicted / measured - 1 (fit = in the aurora fit)")
    for r in load_published("aurora-prism"):
        if r.step_time_s() is None:
            continue
        (o,) = [x for x in ft.record_observations(r) if x.what == "step_s"]
        errs = "  ".join(f"workers={w} {100 * (o.predict(p) / o.measured - 1):+7.1f}%" for w, p in ps.items())
        print(
            f"  {r.id:10s} {r.scenario.strategy:16s} {r.scenario.nodes:3d} nodes  fit={ft.fit_reason(r) is None!s:5s}  {errs}"
        )


if __name__ == "__main__":
    main()

"""What the run and store commands print: JSON for machines, tables and lines for people.
Each returns nothing; the CLI picks the exit code from what bench/ answered."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from prism_strategy.bench.results.store import Result, Store, export
from prism_strategy.report.bench_tables import (
    WIDTH,
    calibrate_lines,
    ceiling_lines,
    compare_table,
    failures,
    import_lines,
    print_table,
    progress,
    published_lines,
    results_table,
    store_line,
    tune_lines,
)
from prism_strategy.report.console import print_json
from prism_strategy.specs.errors import SpecError


def bench_with_progress(base: dict[str, Any], names: list[str], platform: str, store: Store) -> list[Result]:
    """`bench`'s runs, one per strategy, with a progress bar on stderr."""
    from prism_strategy.bench.launch.run import run_bench

    bar, task = progress(len(names), "bench")
    with bar:
        return run_bench(base, names, platform, store, on_result=lambda i, n, r: bar.update(task, completed=i))


def show_bench(results: list[Result], store: Store, json_out: bool) -> None:
    """The measured table (or JSON), then one `failed:` line on stderr per run that did not finish."""
    if json_out:
        print(export(results, "json"))
    else:
        print_table(results_table(results, "bench (measured)"))
        print(store_line(store))
    for line in failures(results):
        print(f"failed: {line}", file=sys.stderr)


def show_launched_bench(report: Any, store: Store, json_out: bool) -> None:
    """Rank 0 of `bench --launched`: the measured table (or JSON) with the candidates not started,
    one `failed:` / `skipped:` line each on stderr."""
    if json_out:
        data = json.loads(export(report.results, "json"))
        print(json.dumps({"results": data, "skipped": [{"strategy": s, "why": w} for s, w in report.skipped]}))
    else:
        print_table(results_table(report.results, "bench --launched (measured)"))
        print(store_line(store))
    for line in failures(report.results):
        print(f"failed: {line}", file=sys.stderr)
    for name, why in report.skipped:
        print(f"skipped: {name}: {why}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()


def show_lines_or_json(data: Any, lines: list[str] | None, json_out: bool) -> None:
    if json_out:
        print_json(data)
    else:
        print("\n".join(lines or ()))


def show_ceiling(data: dict[str, Any], max_micro_batch: int, json_out: bool) -> None:
    show_lines_or_json(data, None if json_out else ceiling_lines(data, max_micro_batch), json_out)


def show_tune(data: dict[str, Any], json_out: bool) -> None:
    show_lines_or_json(data, None if json_out else tune_lines(data), json_out)


def show_calibrate(report: dict[str, Any], json_out: bool) -> None:
    show_lines_or_json(report, None if json_out else calibrate_lines(report), json_out)


def show_compare(rows: list[dict[str, Any]], json_out: bool) -> None:
    if json_out:
        print_json(rows)
    elif not rows:
        print(
            "compare: the store holds no successful run to compare; measure some with `prism-strategy bench` "
            "or store a log with `prism-strategy results import`"
        )
    else:
        print_table(compare_table(rows), WIDTH)


def show_results(
    store: Store, platform: str | None, export_format: str | None, out: str | None, json_out: bool
) -> None:
    """`results`: the store's results as a table, JSON (with the store's journal mode), or an
    export (CSV / JSON) to stdout or written whole to `out`."""
    from prism_strategy.bench.results.curves import stored_curves
    from prism_strategy.report.commbench_table import curves_table

    rows, curves = store.query(platform=platform), stored_curves(store, platform)
    if json_out:
        print(
            json.dumps(
                {
                    "store": {"path": str(store.path)} | store.journal.as_dict(),
                    "results": json.loads(export(rows, "json")),
                    "curves": [_curve_dict(p, c) for p, c in curves],
                },
                indent=2,
            )
        )
        return
    if export_format is None:
        print_table(results_table(rows), WIDTH)
        if curves:  # the collective points are results too (`results --curves` lists only them)
            print_table(curves_table(curves), WIDTH)
        print(store_line(store))
        return
    text = export(rows, export_format)
    if out is None:
        sys.stdout.write(text)
        return
    tmp = Path(out + ".tmp")
    try:
        tmp.write_text(text)
        tmp.replace(out)
    except OSError as e:  # a missing folder or no permission: bad input, nothing left behind
        tmp.unlink(missing_ok=True)
        raise SpecError(f"--out {out}: cannot write it ({e.strerror or e}); check that its folder exists") from None


def _curve_dict(platform: str, c: Any) -> dict[str, Any]:
    return {"platform": platform, "from": c.label, "op": c.op, "shape": c.shape, "concurrent": c.concurrent} | {
        "sizes": len(c.points),
        "bytes_min": c.points[0][0],
        "bytes_max": c.points[-1][0],
        "date": c.date,
    }


def show_curves(store: Store, platform: str | None) -> None:
    """`results --curves`: the measured collective curves."""
    from prism_strategy.bench.results.curves import stored_curves
    from prism_strategy.report.commbench_table import curves_table

    print_table(curves_table(stored_curves(store, platform)), WIDTH)


def show_collective_import(done: dict[str, Any], json_out: bool) -> None:
    lines = [
        f"{done['action']} {done['points']} {done['format']} {done['op']} points "
        f"({done['bytes_min']:.0f}..{done['bytes_max']:.0f} B) for {done['platform']} "
        f"{done['nodes']}x{done['ranks_per_node']} ranks",
        f"plan prices {done['op']} with them",
    ]
    show_lines_or_json(done, lines, json_out)


def show_published_import(name: str, done: list[tuple[Result, str]], json_out: bool) -> None:
    data = [{"id": r.id, "record": r.measured["published"]["id"], "action": a} for r, a in done]
    show_lines_or_json(data, None if json_out else published_lines(name, done), json_out)


def show_run_import(imp: Any, json_out: bool) -> None:
    data = {
        "id": imp.result.id,
        "action": imp.action,
        "format": imp.format,
        "config": imp.result.config,
        "measured": imp.result.measured,
        "predicted": imp.result.predicted,
        "origin": imp.origin,
        "peak_allocated_bytes": imp.result.peak_allocated_bytes,
        "peak_reserved_bytes": imp.result.peak_reserved_bytes,
        "notes": imp.notes,
    }
    show_lines_or_json(data, None if json_out else import_lines(imp), json_out)


SCALING_NODES = (1, 2, 4, 8, 16, 32)
"""Node counts of `report`'s scaling curve, with the stored run's own count added."""


def scaling_scenario(
    rows: list[dict[str, Any]], model: str | None, platform: str | None, calibration: str = "auto"
) -> tuple[dict, str]:
    """plan() keywords for `report`'s scaling curve and a note saying where they came from: the
    latest measured run's model, platform and settings (each overridden by --model / --platform).
    SpecError when neither the store nor the flags name a model and platform."""
    from prism_strategy.inputs.stored import config_model, config_vision, shown_values
    from prism_strategy.report.plots import measured_rows

    runs = sorted(measured_rows(rows), key=lambda r: r["id"])
    if not runs and (model is None or platform is None):
        raise SpecError(
            "report: the store has no measured run to draw a scaling curve for; pass --model and --platform"
        )
    kw: dict[str, Any] = {}
    where = "--model / --platform"
    if runs:
        r, row = runs[-1], runs[-1]["config"]
        c = shown_values(row)
        rpn = c.get("ranks_per_node") or c.get("nproc")
        kw = {
            "model": config_model(row),  # the stored architecture: the run's config.json may have moved
            "platform": r.get("platform"),
            "mode": c.get("mode") or "e2e",
            "vision": config_vision(row),
            "seq_len": c.get("seq_len") or 1024,
            "precision": c.get("precision") or "bf16-mixed",
            "micro_batch": c.get("micro_batch"),
            "ranks_per_node": rpn,
        }
        kw = {k: v for k, v in kw.items() if v is not None}
        nodes = max(1, (c.get("nproc") or 1) // (rpn or 1))
        kw["sweep_nodes"] = sorted(set(SCALING_NODES) | {nodes})
        where = f"stored run #{r['id']} ({r['strategy']}, {r.get('record') or 'bench'})"
        others = {(plots_model(x), x.get("platform")) for x in runs} - {(plots_model(r), r.get("platform"))}
        if others:
            where += (
                f"; {len(others)} other model/platform pair(s) in the store are not drawn (pass --model/--platform)"
            )
    if model is not None or platform is not None:
        kw = {
            "model": model or kw.get("model"),
            "platform": platform or kw.get("platform"),
            "sweep_nodes": SCALING_NODES,
        }
    name = getattr(kw["model"], "name", kw["model"])
    cal = "the plan's (auto)" if calibration == "auto" else calibration
    return kw, f"scaling curve: {name} on {kw['platform']}, from {where}; calibration: {cal}"


def plots_model(r: dict[str, Any]) -> str:
    from prism_strategy.report.plots import model_name

    return model_name(r["config"])


def write_store_report(
    out: str, db: str | None, model: str | None, platform: str | None, calibration: str = "auto"
) -> None:
    """`report`: the PNGs (predicted vs measured, the scaling curve, the breakdown), one path a line.
    The predictions (compare's and the curve's) are calibrated as `compare --calibration C` is; a
    calibration file applies to the curve when it is of the curve's platform."""
    from prism_strategy.bench.launch.requests import compare_rows, existing_store
    from prism_strategy.flags import plan
    from prism_strategy.report.plots import check_out_dir, write_report

    outdir = check_out_dir(out)
    store = existing_store(db)
    rows = compare_rows(db, calibration)
    kw, where = scaling_scenario(rows, model, platform, calibration)
    scaling = plan(nodes=1, calibration=_curve_calibration(calibration, kw["platform"]), **kw)
    written, notes = write_report(rows, scaling, outdir, str(store.path))
    for p in written:
        print(str(p))
    for n in [where, *notes]:
        print(f"note: {n}")


def _curve_calibration(calibration: str, platform: Any) -> str:
    """The scaling curve's calibration: a file only for its own platform (else none, as compare's rows)."""
    from prism_strategy.estimate.calibration import load_calibration

    if calibration in ("auto", "none"):
        return calibration
    return calibration if load_calibration(calibration)["platform"] == getattr(platform, "name", platform) else "none"

"""Tables for measured results: bench runs, compare rows, ceiling and tune summaries."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from prism_strategy.bench.results.store import Result
from prism_strategy.inputs.stored import row_values, shown_values
from prism_strategy.report.console import table_console


def _f(v: Any, fmt: str = "{:.3f}") -> str:
    return "-" if v is None else fmt.format(v)


QUANTITY = {
    "samples_per_s": "samples/s",
    "step_time_s": "step s",
    "tokens_per_s_per_device": "tok/s/dev",
    "mfu": "MFU",
    "memory_gib": "peak GiB",
    "alloc_gib": "alloc GiB",
    "reserved_gib": "reserved GiB",
    "max_micro_batch": "max mb",
}
WIDTH = 100


def _from(provenance: str, record: str | None = None) -> str:
    return {"bench": "bench", "imported": "import", "published": f"pub {record or ''}".strip()}.get(
        provenance, provenance
    )


def results_table(results: list[Result], title: str = "measured results") -> Table:
    t = Table(
        title=title,
        box=None,
        padding=(0, 1, 0, 0),
        pad_edge=False,
        caption="from: bench = this tool, import = a log, pub = a published record; predictions in --json",
    )
    for col in (
        "id",
        "from",
        "strategy",
        "status",
        "ranks x mb",
        "seq",
        "step s",
        "samp/s",
        "fwd/bwd/opt s",
        "alloc GiB",
        "resv GiB",
    ):
        t.add_column(col, no_wrap=True)
    for r in results:
        m, c = r.measured, shown_values(r.config)
        phases = "/".join(_f(m.get(k), "{:.2f}") for k in ("forward_s", "backward_s", "optimizer_s"))
        peak = r.peak_allocated_bytes or m.get("peak_memory_bytes")
        reserved = r.peak_reserved_bytes
        t.add_row(
            str(r.id),
            _from(r.provenance, (m.get("published") or {}).get("id")),
            r.strategy,
            r.status,
            f"{c.get('nproc', '')}x{c.get('micro_batch', '')}",
            str(c.get("seq_len", "")),
            _f(m.get("step_time_s")),
            _f(m.get("samples_per_s"), "{:.1f}"),
            phases,
            _f(peak / 2**30 if peak else None, "{:.2f}"),
            _f(reserved / 2**30 if reserved else None, "{:.2f}"),
        )
    return t


def compare_table(rows: list[dict[str, Any]]) -> Table:
    calibrations = sorted({r["sources"]["predicted"] for r in rows if "(calibrated" in r["sources"]["predicted"]})
    plain = sorted({r["platform"] for r in rows if "(calibrated" not in r["sources"]["predicted"]})
    if calibrations and plain:
        calibrations.append(f"analytic model, uncalibrated, for platform {', '.join(plain)}")
    t = Table(
        title="predicted vs measured",
        box=None,
        padding=(0, 1, 0, 0),
        pad_edge=False,
        caption="error % = (predicted - measured) / measured; predicted: "
        + ("; ".join(calibrations) if calibrations else "analytic model")
        + "; MFU: model FLOPs (estimate/compute.py) / "
        "the platform's peak; alloc/reserved: peak allocated/reserved "
        "memory, each beside the model's figure of the same counter",
    )
    for col in ("id", "from", "strategy", "ranks x mb", "seq", "quantity", "predicted", "measured", "error %"):
        t.add_column(col, no_wrap=True)
    for r in rows:
        c = shown_values(r["config"])
        for q, pv in r["predicted"].items():
            t.add_row(
                str(r["id"]),
                _from(r.get("provenance", "bench"), r.get("record")),
                r["strategy"],
                f"{c.get('nproc', '')}x{c.get('micro_batch')}",
                str(c.get("seq_len")),
                QUANTITY.get(q, q),
                _f(pv, "{:.4g}"),
                _f(r["measured"][q], "{:.4g}"),
                _f(r["error_pct"][q], "{:+.1f}"),
            )
    return t


def _scenario_text(row: dict[str, Any], platform: str) -> str:
    c = row_values(row)
    model = c["model"] + (f" + {c['vision']}" if c.get("vision") else "")
    if lora := c.get("lora"):
        model += f" + LoRA r={lora.get('r')}"
    nodes = c["nproc"] // c["ranks_per_node"]
    ckpt = (
        "selective checkpointing (sac)"
        if c["ckpt_freq"] == "sac"
        else f"ckpt every {c['ckpt_freq']}"
        if c["ckpt_freq"]
        else "no checkpointing"
    )
    ckpt += "".join(f", {k} {c[k]}" for k, default in (("optimizer", "adamw"), ("loss", "upcast")) if c[k] != default)
    return (
        f"{model}, {c['mode']}, {c['strategy']}, {nodes} node(s) x {c['ranks_per_node']} ranks, micro-batch "
        f"{c['micro_batch']}, grad accum {c['grad_accum']}, seq {c['seq_len']}, {ckpt}, {c['precision']}, "
        f"platform {platform}"
    )


def _gib(v: float | None) -> str:
    return "-" if not v else f"{v / 2**30:.2f} GiB"


def _short(text: str, names: dict[str, str]) -> str:
    for long, name in names.items():
        text = text.replace(long, name)
    return text


def import_lines(imp: Any) -> list[str]:
    """What `results import PATH` prints: the scenario and where each field came from, the steady
    state, the measurement and the prediction."""
    import textwrap

    r, m, p = imp.result, imp.result.measured, imp.result.predicted
    told = sorted(k for k, v in imp.origin.items() if v == "flag")
    short = {str(f): f.name for f in imp.files}
    logged = [f"{k} ({_short(v, short)})" for k, v in imp.origin.items() if v != "flag"]
    phases = ", ".join(f"{k} {m[f'{k}_s']:.3f}" for k in ("data", "forward", "backward", "optimizer") if f"{k}_s" in m)
    lines = [
        f"imported {r.source} ({imp.format}) as result {r.id} [{imp.action}]",
        f"scenario: {_scenario_text(r.config, r.platform)}",
        f"from flags: {', '.join(told) or 'none'}",
        f"from the log: {'; '.join(logged) or 'none'}",
        f"steady state: {imp.steady.summary()}",
        f"measured: step {m['step_time_s']:.4g} s"
        + (f" ({phases})" if phases else "")
        + f", {m['samples_per_s']:.4g} samples/s, peak allocated {_gib(r.peak_allocated_bytes)}, "
        f"peak reserved {_gib(r.peak_reserved_bytes)}",
        f"predicted (analytic model, {r.platform}): step {p['step_time_s']:.4g} s, "
        f"{p['samples_per_s']:.4g} samples/s, {_predicted_memory(r, p)}",
    ]
    lines += [f"note: {n}" for n in imp.notes]
    return [w for line in lines for w in textwrap.wrap(line, WIDTH, subsequent_indent="    ")]


def _predicted_memory(r: Result, p: dict[str, Any]) -> str:
    """The model's figure of each counter the run reported (allocated beside allocated, reserved
    beside reserved, as compare sets them); the planner's total when the run reported neither."""
    told = [
        f"peak {name} {_gib(p[key])}"
        for name, key, measured in (
            ("allocated", "allocated_bytes", r.peak_allocated_bytes),
            ("reserved", "reserved_bytes", r.peak_reserved_bytes),
        )
        if measured and p.get(key)
    ]
    return ", ".join(told) or f"peak {_gib(p['memory_bytes'])} (allocated + framework reserve)"


def published_lines(name: str, done: list[tuple[Result, str]]) -> list[str]:
    counts = {a: sum(1 for _, x in done if x == a) for a in ("added", "updated", "unchanged")}
    head = (
        f"published {name}: {len(done)} records stored with provenance 'published' ("
        + ", ".join(f"{n} {a}" for a, n in counts.items())
        + "); `compare` shows them beside the predictions"
    )
    rows = [
        f"  {r.id:>4} {(r.measured.get('published') or {}).get('id', ''):<10} {r.status:<4} {r.strategy:<18} "
        f"{v['nproc']:>4} ranks  mb {v['micro_batch']:<3} {a}"
        for r, a in done
        for v in (shown_values(r.config),)
    ]
    import textwrap

    return textwrap.wrap(head, WIDTH, subsequent_indent="    ") + rows


def tune_lines(data: dict[str, Any]) -> list[str]:
    """`tune`: every measured candidate beside its prediction, the best marked, and why it stopped."""
    import textwrap

    best = data["best"]
    lines = [
        f"tune (measured): {data['runs']} runs of a {data['grid_size']}-run grid",
        f"  {'strategy':<20} {'mb':>4} {'ckpt':>4} {'predicted/s':>12} {'measured/s':>11}",
    ]
    for m in data["measured"]:
        mark = (
            "*"
            if best
            and (m["strategy"], m["micro_batch"], m["ckpt_freq"])
            == (best["strategy"], best["micro_batch"], best["ckpt_freq"])
            else " "
        )
        lines.append(
            f"{mark} {m['strategy']:<20} {m['micro_batch']:>4} {m['ckpt_freq']:>4} "
            f"{m['predicted_samples_per_s']:>12.2f} {m['samples_per_s']:>11.2f}"
        )
    lines.append(
        "best (measured): "
        + (
            f"{best['strategy']} at micro-batch {best['micro_batch']}, ckpt "
            f"{best['ckpt_freq']}: {best['samples_per_s']:.2f} samples/s (*)"
            if best
            else "none ran"
        )
    )
    lines.append(f"stopped: {data['stop_reason']}")
    return [w for line in lines for w in textwrap.wrap(line, WIDTH, subsequent_indent="    ")]


def ceiling_lines(data: dict[str, Any], max_micro_batch: int) -> list[str]:
    """`ceiling`: the largest micro-batch that ran, or that every size tried ran up to the cap,
    and each trial."""
    ok_all = all(status == "ok" for _, status in data["trials"])
    if data["ceiling"] >= max_micro_batch and ok_all:
        head = (
            f"{data['strategy']}: runs at every size tried up to {max_micro_batch}, the search cap (predicted "
            f"ceiling {data['predicted']}); raise --max-micro-batch to search further"
        )
    else:
        head = (
            f"{data['strategy']}: largest micro-batch that runs = {data['ceiling']} (measured; predicted "
            f"{data['predicted']})"
        )
    lines = [head, f"  {data['runs']} trial runs, in order:", f"  {'micro-batch':>11} status"]
    lines += [f"  {mb:>11} {status}" for mb, status in data["trials"]]
    import textwrap

    return [w for line in lines for w in textwrap.wrap(line, WIDTH, subsequent_indent="    ")]


def store_line(store: Any) -> str:
    """Where the results live and in which SQLite journal mode, and why (bench/results/store.py)."""
    import textwrap

    return textwrap.fill(f"store: {store.path}: {store.journal.why}", WIDTH, subsequent_indent="    ")


def calibrate_lines(report: dict[str, Any]) -> list[str]:
    """What `calibrate` prints: where the fit went (or why it did not), its errors before and after
    beside what it replaces, the values held at a physical bound, and per record the errors."""
    import textwrap

    b, a, rep = report["before"], report["after"], report["replaces"]
    rows = f"{report['runs']} {report.get('rows', 'runs')}"
    head = (
        f"calibrated {report['platform']} on {rows} -> {report['file']}"
        if report["written"]
        else f"{report['platform']}: {report['refused']}"
    )
    lines = [head]
    for key, what in (("step_time_median", "step time"), ("memory_median", "peak memory")):
        if key in a and key in b:
            was = f", {rep[key]:.1f}% with {rep['what']}" if key in rep and "calibration" in rep["what"] else ""
            lines.append(f"  {what} median error: {b[key]:.1f}% preset, {a[key]:.1f}% fitted{was}")
    if "leave_one_out" in report and "step_time_median" in a:
        loo = report["leave_one_out"]["step_time_median"]
        lines.append(
            f"  step time median error, each run left out of its fit: {loo:.1f}% (in-sample {a['step_time_median']:.1f}%)"
        )
    if report.get("free_terms") is not None:
        what = "fitted" if report["written"] else "free terms (none fitted)"
        lines.append(f"  {what}: {', '.join(report['free_terms']) or 'none'}")
    lines += [f"  held at the preset: {h['term']} ({h['why']})" for h in report.get("held_terms", [])]
    lines += [f"  held at a bound: {n}" for n in report.get("held_at_bounds", [])]
    lines += [f"  {report['kept']}"] if report.get("kept") else []
    for row in report.get("records", []):
        lines.append(
            f"  {row['id']:12s} step error {row['before_err_pct']:+7.1f}% before, {row['after_err_pct']:+7.1f}% after"
        )
    lines += [f"  {row['id']:12s} not fitted: {row['why']}" for row in report.get("not_fitted", [])]
    lines += comm_lines(report["comm"]) if "comm" in report else []
    return [w for line in lines for w in textwrap.wrap(line, WIDTH, subsequent_indent="      ")]


def comm_lines(c: dict[str, Any]) -> list[str]:
    """calibrate's communication fit (bench/fit/comm_fit.py): each term and what decided or held it,
    fitted and leave-one-out errors, busbw measured vs fitted at each curve's largest size."""
    lines = [
        f"  collectives: {c['points']} points of {', '.join(c['curves'])}; median error "
        f"{c['before']['comm_median']:.1f}% before, {c['after']['comm_median']:.1f}% fitted "
        f"(worst {c['max_abs_err_pct']:.1f}%)"
    ]
    for t in c["terms"]:
        how = f"decided by {t['decided_by']}" if t["decided_by"] else f"held: {t['held']}"
        how += f" (stopped at its {t['at_bound']} bound)" if t.get("at_bound") else ""
        lines.append(f"    {t['name']} ({t['what']}): {t['before']:.4g} -> {t['after']:.4g}; {how}")
    lines += [
        f"    leave out {r['left_out']}: median error {r['median_abs_err_pct']:.1f}% on its {r['points']} points"
        for r in c["leave_one_out"]
    ]
    lines += [f"    leave-one-out: {c['leave_one_out_note']}"] if c.get("leave_one_out_note") else []
    lines += [
        f"    busbw at {b['bytes'] / 2**20:.6g} MiB of {b['curve']}: {b['measured_busbw_gbps']:.1f} GB/s measured, "
        f"{b['fitted_busbw_gbps']:.1f} fitted"
        for b in c["bus_bandwidth"]
    ]
    lines += [f"    not fitted: {c['not_fitted']}"] if c.get("not_fitted") else []
    return lines


def failures(results: list[Result]) -> list[str]:
    return [f"{r.strategy}: {r.status}: {r.measured.get('error', '')}" for r in results if r.status != "ok"]


def progress(total: int, label: str):
    """A rich progress bar; returns (progress, task_id)."""
    p = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    )
    return p, p.add_task(label, total=total or None)


def print_table(t: Table, width: int = WIDTH) -> None:
    table_console(width).print(t)

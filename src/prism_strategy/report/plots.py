"""PNG plots: throughput per strategy (predicted vs measured), scaling curve, step-time breakdown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import NullLocator  # noqa: E402

from prism_strategy.specs.errors import SpecError  # noqa: E402


def check_out_dir(out: str | Path) -> Path:
    """The folder `report` will write into (made when the first plot is saved); SpecError, before
    any work, when it cannot be one: an existing file, a path under a file, a name too long."""
    path = Path(out)
    try:
        if path.exists() and not path.is_dir():
            raise SpecError(f"--out {path} is a file; give a folder for the plots")
        above = next((p for p in path.absolute().parents if p.exists()), None)
    except OSError as e:
        raise SpecError(f"--out {str(path)[:120]}...: not a usable folder name ({e.strerror or e})") from None
    if above is not None and not above.is_dir():
        raise SpecError(f"--out {path}: {above} is a file, not a folder")
    return path


def _save(fig, path: Path) -> Path:
    tmp = path.with_name(path.name + ".tmp.png")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(tmp, dpi=110, bbox_inches="tight")
        tmp.replace(path)
    except OSError as e:
        raise SpecError(f"cannot write {str(path)[:120]}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
    return path


def model_name(config: dict[str, Any]) -> str:
    """The model a stored config ran: its architecture's name, else the preset or the file's name."""
    spec = config.get("model_spec") or {}
    name = spec.get("name") or Path(str(config.get("model", "?"))).name
    vision = (config.get("vision_spec") or {}).get("name") or config.get("vision")
    return f"{name}+{Path(str(vision)).name}" if vision else name


def _run_label(r: dict[str, Any]) -> str:
    """One run, as a rotated tick label: id, strategy, backbone, ranks x micro-batch, sequence."""
    from prism_strategy.inputs.stored import shown_values

    c = shown_values(r["config"])
    backbone = model_name(r["config"]).split("+")[0]
    return f"#{r['id']} {r['strategy']}, {backbone}, {c.get('nproc')} ranks x mb {c.get('micro_batch')}, seq {c.get('seq_len')}"


def _ticks(ax, rows: list[dict[str, Any]]) -> None:
    ax.set_xticks(
        range(len(rows)), [_run_label(r) for r in rows], fontsize=7, rotation=35, ha="right", rotation_mode="anchor"
    )


def _scenario(rows: list[dict[str, Any]]) -> str:
    """What the plotted runs have in common, for the title: models and platforms."""
    models = sorted({model_name(r["config"]) for r in rows})
    platforms = sorted({r.get("platform", "?") for r in rows})
    return f"{', '.join(models)} on {', '.join(platforms)}"


def _wrap(title: str) -> str:
    import textwrap

    return textwrap.fill(title, 100)


def measured_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Compare rows that measured a throughput (bench runs, imported or published ones)."""
    return [r for r in rows if r["kind"] == "bench" and (r["measured"].get("samples_per_s") or 0) > 0]


def throughput_plot(rows: list[dict[str, Any]], path: Path) -> Path:
    """rows: compare rows with a measured throughput (measured_rows), each bar pair named by its run."""
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(rows)), 4.8))
    ax.bar([i - 0.2 for i in x], [r["predicted"]["samples_per_s"] for r in rows], 0.4, label="predicted")
    ax.bar([i + 0.2 for i in x], [r["measured"]["samples_per_s"] for r in rows], 0.4, label="measured")
    _ticks(ax, rows)
    values = [v for r in rows for v in (r["predicted"]["samples_per_s"], r["measured"]["samples_per_s"]) if v]
    if values and max(values) > 20 * min(values):  # runs of very different sizes: each bar pair readable
        ax.set_yscale("log")
        ax.set_ylabel("samples/s (whole job, log scale)")
    else:
        ax.set_ylim(bottom=0)
        ax.set_ylabel("samples/s (whole job)")
    ax.set_title(_wrap(f"throughput, predicted vs measured: {_scenario(rows)}"), fontsize=9)
    ax.legend(fontsize=8)
    return _save(fig, path)


MEASURED = (
    ("forward", "forward"),
    ("backward", "backward (incl. its communication)"),
    ("optimizer", "optimizer"),
    ("other", "rest of the step (data, sync, ...)"),
)
PREDICTED = (("compute", "compute"), ("exposed_comm", "communication (exposed)"), ("optimizer", "optimizer"))


def phase_scale(phases: dict[str, float | None]) -> float:
    """1, or what brings measured phases that sum past the measured step back onto it: timers
    that overlap (a backward timer that runs on while the optimizer starts, a first step's
    compile) make forward + backward + optimizer longer than the step itself."""
    timed = sum(phases.get(k) or 0.0 for k in ("forward", "backward", "optimizer"))
    step = phases.get("step_time") or 0.0
    return step / timed if step and timed > step else 1.0


def _phase(phases: dict[str, float | None], key: str, scale: float = 1.0) -> float:
    if key != "other":
        return (phases.get(key) or 0.0) * scale
    timed = sum(phases.get(k) or 0.0 for k in ("forward", "backward", "optimizer"))
    return max(0.0, (phases.get("step_time") or 0.0) - timed * scale)


def breakdown_plot(rows: list[dict[str, Any]], path: Path) -> Path:
    """rows: compare rows with measured phases. Per run, the measured step (forward, backward,
    optimizer) beside the predicted one (compute, exposed communication, optimizer), the
    communication share of the predicted step written on its bar."""
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(rows)), 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for j, (side, parts, dx) in enumerate((("measured", MEASURED, -0.2), ("predicted", PREDICTED, 0.2))):
        bottom = [0.0] * len(rows)
        for k, (key, label) in enumerate(parts):
            scales = [phase_scale(r["phases"][side]) if side == "measured" else 1.0 for r in rows]
            vals = [_phase(r["phases"][side], key, k_) for r, k_ in zip(rows, scales)]
            ax.bar(
                [i + dx for i in range(len(rows))],
                vals,
                0.38,
                bottom=bottom,
                color=colors[(4 * j + k) % 10],
                label=f"{side}: {label}",
                hatch="//" if key == "exposed_comm" else None,
            )
            bottom = [b + v for b, v in zip(bottom, vals)]
        for i, r in enumerate(rows):
            if side == "measured" and (k_ := phase_scale(r["phases"]["measured"])) < 1.0:
                ax.annotate(
                    f"phases x{k_:.2f}: timers overlap", (i + dx, bottom[i]), ha="center", va="bottom", fontsize=6
                )
        if side == "predicted":
            for i, r in enumerate(rows):
                step = r["phases"]["predicted"]["step_time"] or 0.0
                share = (r["phases"]["predicted"].get("exposed_comm") or 0.0) / step if step else 0.0
                ax.annotate(f"comm {share:.0%}", (i + dx, bottom[i]), ha="center", va="bottom", fontsize=7)
    _ticks(ax, rows)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("seconds per step")
    ax.set_title(_wrap(f"step-time breakdown, measured (left) vs predicted (right): {_scenario(rows)}"), fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, path)


def breakdown_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Compare rows whose measurement has phases (forward/backward/optimizer)."""
    return [r for r in measured_rows(rows) if any(r["phases"]["measured"].get(k) for k in ("forward", "backward"))]


def scaling_plot(
    sweep: list[dict[str, Any]],
    path: Path,
    *,
    highlight: str | None = None,
    title: str = "scaling curve",
    measured: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> Path:
    """sweep: plan sweep rows (nodes, strategy, feasible, samples_per_s, samples_per_s_range);
    `highlight`: the pick, drawn bold. Each curve's 80% range (the rows' samples_per_s_range) is
    shaded in its colour. `title` names the scenario (model, platform, ranks per node, batch).
    `measured`: runs at the curve's scenario (curve_points), drawn as crosses beside the prediction."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    colours: dict[str, str] = {}
    drawn: dict[tuple, str] = {}
    for s in dict.fromkeys(r["strategy"] for r in sweep):
        rows = [r for r in sweep if r["strategy"] == s and r["feasible"]]
        bold = s == highlight
        curve = tuple((r["nodes"], round(r["samples_per_s"], 6)) for r in rows)
        same = drawn.setdefault(curve, s)  # a curve identical to one drawn would hide under it: say so
        label = f"{s} (recommended)" if bold else s
        (line,) = ax.plot(
            [r["nodes"] for r in rows],
            [r["samples_per_s"] for r in rows],
            marker="o",
            linewidth=2.5 if bold else 1.2,
            linestyle="--" if same != s else "-",
            label=label if same == s else f"{label} (= {same})",
        )
        colours[s] = line.get_color()
        banded = [r for r in rows if r.get("samples_per_s_range")]
        if banded:
            ax.fill_between(
                [r["nodes"] for r in banded],
                [r["samples_per_s_range"][0] for r in banded],
                [r["samples_per_s_range"][1] for r in banded],
                color=line.get_color(),
                alpha=0.25 if bold else 0.1,
                linewidth=0,
            )
    for i, m in enumerate(measured):
        ax.scatter(
            [m["nodes"]], [m["samples_per_s"]], marker="x", s=70, zorder=3, color=colours.get(m["strategy"], "black"),
            label="measured (x, colour of its strategy)" if i == 0 else None,
        )  # fmt: skip
    ax.set_xscale("log", base=2)
    nodes = sorted({r["nodes"] for r in sweep} | {m["nodes"] for m in measured})
    ax.set_xticks(nodes, [str(n) for n in nodes])  # the node counts planned, not powers of two
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_yscale("log")
    ax.set_xlabel("nodes")
    ax.set_ylabel("samples/s (predicted, whole job; shaded: 80% range)")
    ax.set_title(title, fontsize=8)
    if sweep:
        ax.legend(fontsize=8)
    return _save(fig, path)


def curve_points(rows: list[dict[str, Any]], scaling: Any) -> list[dict[str, Any]]:
    """Measured runs at the scaling curve's scenario: its model, platform, ranks per node, sequence
    length and (when the curve fixes one) micro-batch; one point per run at nproc / ranks per node."""
    sc, t = scaling.scenario, scaling.scenario.training
    out = []
    from prism_strategy.inputs.stored import row_values

    for r in measured_rows(rows):
        c = row_values(r["config"])
        rpn = c.get("ranks_per_node") or c.get("nproc") or 0
        same = (
            r.get("platform") == sc.platform.name
            and model_name(r["config"]) == sc.model.name
            and rpn == sc.layout.ranks_per_node
            and c.get("seq_len") == t.seq_len
            and (t.micro_batch is None or c.get("micro_batch") == t.micro_batch)
        )
        if same and c.get("nproc"):
            out.append({"nodes": c["nproc"] // rpn, "samples_per_s": r["measured"]["samples_per_s"], **r})
    return out


def write_report(rows: list[dict[str, Any]], scaling: Any, outdir: Path, store: str) -> tuple[list[Path], list[str]]:
    """`prism-strategy report`: the predicted scaling curve of `scaling` (a Plan with a sweep), and
    from the compare rows of `store` the throughput and step-time breakdown of the measured runs.
    Returns (files written, notes: what was not drawn and why)."""
    import textwrap

    from prism_strategy.report.plan_table import plan_title

    cal = scaling.options[0].provenance.get("calibration", "none") if scaling.options else "none"
    title = textwrap.fill(f"predicted scaling ({'uncalibrated' if cal == 'none' else cal}): {plan_title(scaling)}", 90)
    points = curve_points(rows, scaling)
    written = [
        scaling_plot(scaling.sweep, outdir / "scaling.png", highlight=scaling.recommended, title=title, measured=points)
    ]
    notes = []
    measured = measured_rows(rows)
    if not measured:
        notes.append(
            f"no measured runs in {store}: the throughput and breakdown plots need some (`prism-strategy "
            "bench`, or `results import`); only the predicted scaling curve was drawn"
        )
        return written, notes
    written.append(throughput_plot(measured, outdir / "throughput.png"))
    phased = breakdown_rows(rows)
    if phased:
        written.append(breakdown_plot(phased, outdir / "breakdown.png"))
    else:
        notes.append("no measured run has forward/backward/optimizer times: no breakdown plot")
    return written, notes

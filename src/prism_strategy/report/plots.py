"""PNG plots: throughput per strategy (predicted vs measured), scaling curve, step-time breakdown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

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


def throughput_plot(rows: list[dict[str, Any]], path: Path) -> Path:
    """rows: compare rows of bench runs."""
    rows = [r for r in rows if "samples_per_s" in r["predicted"]]
    labels = [f"{r['strategy']}\nmb{r['config'].get('micro_batch')} s{r['config'].get('seq_len')}" for r in rows]
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rows)), 4))
    ax.bar([i - 0.2 for i in x], [r["predicted"]["samples_per_s"] for r in rows], 0.4, label="predicted")
    ax.bar([i + 0.2 for i in x], [r["measured"]["samples_per_s"] or 0 for r in rows], 0.4, label="measured")
    ax.set_xticks(list(x), labels, fontsize=7)
    ax.set_ylabel("samples/s")
    ax.set_title("throughput per strategy: predicted vs measured")
    ax.legend()
    return _save(fig, path)


def breakdown_plot(rows: list[dict[str, Any]], path: Path) -> Path:
    """rows: measured dicts with strategy, forward_s, backward_s, optimizer_s, step_time_s."""
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rows)), 4))
    bottom = [0.0] * len(rows)
    for phase in ("forward_s", "backward_s", "optimizer_s"):
        vals = [r.get(phase) or 0.0 for r in rows]
        ax.bar(range(len(rows)), vals, bottom=bottom, label=phase[:-2])
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(len(rows)), [r["label"] for r in rows], fontsize=7)
    ax.set_ylabel("seconds per step (measured)")
    ax.set_title("step-time breakdown")
    ax.legend()
    return _save(fig, path)


def scaling_plot(sweep: list[dict[str, Any]], path: Path, *, highlight: str | None = None,
                 title: str = "scaling curve") -> Path:
    """sweep: plan sweep rows (nodes, strategy, feasible, samples_per_s); `highlight`: the pick, drawn bold."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for s in dict.fromkeys(r["strategy"] for r in sweep):
        pts = [(r["nodes"], r["samples_per_s"]) for r in sweep if r["strategy"] == s and r["feasible"]]
        bold = s == highlight
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", linewidth=2.5 if bold else 1.2,
                label=f"{s} (recommended)" if bold else s)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("nodes")
    ax.set_ylabel("samples/s (predicted)")
    ax.set_title(title, fontsize=9)
    if sweep:
        ax.legend(fontsize=8)
    return _save(fig, path)

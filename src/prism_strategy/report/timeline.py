"""PNG timeline of a run: per rank, data/forward/backward/optimizer stacked per step, the step
time as a line, events marked (collapse as a shaded span, the others as vertical lines)."""

from __future__ import annotations

import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from prism_strategy.diagnose.analyze import Verdict  # noqa: E402
from prism_strategy.specs.errors import SpecError  # noqa: E402

MAX_PANELS = 8
FORMATS = (".png", ".svg", ".pdf")
PHASES = (("data", "#9e9e9e"), ("forward", "#1f77b4"), ("backward", "#d62728"), ("optimizer", "#2ca02c"))
EVENT_COLOR = {
    "collapse": "#d62728",
    "straggler": "#ff7f0e",
    "input_skew": "#bcbd22",
    "hang": "#000000",
    "incomplete": "#7f7f7f",
}


def _panel_ranks(v: Verdict) -> list[int]:
    """All ranks if few; else the flagged ones, then the slowest and fastest by forward."""
    s = v.series
    ranks = list(s.ranks)
    if len(ranks) <= MAX_PANELS:
        return ranks
    flagged = [r for e in v.events for r in e.ranks if r in ranks]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        fwd = np.nan_to_num(np.nanmedian(s.forward, axis=1), nan=0.0)
    order = [ranks[i] for i in np.argsort(fwd)]
    pick = list(dict.fromkeys(flagged + order[-3:] + order[:3] + ranks))
    return sorted(pick[:MAX_PANELS])


def _mark_events(ax, v: Verdict) -> None:
    for e in v.events:
        c = EVENT_COLOR.get(e.kind, "k")
        if e.kind == "collapse" and "to_step" in e.evidence:
            ax.axvspan(e.evidence["from_step"] - 0.5, e.evidence["to_step"] + 0.5, color=c, alpha=0.12)
        elif e.step >= 0:
            ax.axvline(e.step, color=c, lw=1.2, ls="--")


def _draw_rank(ax, v: Verdict, k: int) -> None:
    s = v.series
    bottom = np.zeros(s.steps.size)
    for name, color in PHASES:
        y = np.nan_to_num(getattr(s, name)[k], nan=0.0)
        if y.any():
            ax.bar(s.steps, y, bottom=bottom, color=color, width=0.9, label=name, lw=0)
            bottom += y
    ax.plot(s.steps, s.step_s[k], color="k", lw=0.8, label="step")
    _mark_events(ax, v)
    flagged = any(s.ranks[k] in e.ranks for e in v.events if e.kind in ("straggler", "hang"))
    ax.set_ylabel(f"rank {s.ranks[k]}" + (" *" if flagged else ""), color="red" if flagged else "k")


def plot_timeline(v: Verdict, path: str | Path) -> Path:
    """Write the timeline PNG; SpecError when there are no step records or the folder is missing."""
    path = Path(path)
    if v.series is None or v.series.steps.size == 0:
        raise SpecError("no step records to plot")
    if path.suffix.lower() not in FORMATS:
        raise SpecError(f"--plot {path}: name the image file with one of {', '.join(FORMATS)}")
    try:
        parent_ok, is_dir = path.parent.is_dir(), path.is_dir()
    except OSError as e:  # a name too long
        raise SpecError(f"--plot {str(path)[:120]}...: not a usable file name ({e.strerror})") from None
    if not parent_ok:
        raise SpecError(f"{path.parent}: folder does not exist (for --plot {path})")
    if is_dir:
        raise SpecError(f"--plot {path} is a folder; give an image file name")
    ranks = _panel_ranks(v)
    fig, axes = plt.subplots(len(ranks), 1, sharex=True, squeeze=False, figsize=(11, 1.2 + 1.6 * len(ranks)))
    idx = {r: i for i, r in enumerate(v.series.ranks)}
    for ax, r in zip(axes[:, 0], ranks):
        _draw_rank(ax, v, idx[r])
    axes[0, 0].legend(loc="upper left", ncol=5, fontsize=7, frameon=False)
    axes[-1, 0].set_xlabel("step")
    axes[-1, 0].xaxis.set_major_locator(MaxNLocator(integer=True))
    kinds = ", ".join(sorted({e.kind for e in v.events})) or "no events"
    fig.suptitle(f"verdict: {v.verdict} (events: {kinds}); seconds per phase, stacked per step")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as e:
        raise SpecError(f"--plot {str(path)[:120]}: cannot write it ({e.strerror or e})") from None
    finally:
        plt.close(fig)
    return path

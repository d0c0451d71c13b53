"""The report's figures, as matplotlib ``Figure`` objects (no pyplot state, no files): pure functions
of a model's history, cluster sizes and 2-D view. matplotlib is imported when a figure is made,
not with the module (the command line imports this package to build its parser)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import InvalidParameterError
from .view import Projection

if TYPE_CHECKING:
    from matplotlib.figure import Figure

HISTORY_COLUMNS = ("free_energy", "quantization_error", "n_distances", "distance_speedup", "seconds")
"""History columns the figures plot (see :data:`daskclust.em.loop.HISTORY_FIELDS`)."""

HEXBIN_ROWS = 5_000
"""Above this many sampled rows the data are drawn as a hexbin density instead of points."""

LOG_SPAN = 10.0
"""A positive series whose largest value exceeds its smallest this many times is drawn on a log axis
(:func:`_value_axis`), any other on a linear one."""


def check_history(history, owner: str) -> list[dict]:
    """The history rows of the model ``owner`` (its class name), refusing a model without them or
    without the columns the figures plot."""
    if not history:
        raise InvalidParameterError(f"the {owner} model has no history (history_ is empty): a report plots the "
                                    "fit's iterations; refit the model and save it")
    missing = [key for key in HISTORY_COLUMNS if key not in history[0]]
    if missing:
        raise InvalidParameterError(f"the {owner} model's history lacks the columns {missing}: refit the model "
                                    "with this version of daskclust and save it")
    return list(history)


MARGINS = {"left": 1.0, "right": 0.3, "bottom": 0.6, "top": 0.6, "between_columns": 1.15, "between_rows": 0.8}
"""The figures' margins in inches: room for the tick labels and the axis labels (the widest: six
digits and a sign, or a decade such as 1e+07), the title above, and between panels for the
labels of the panel beside or below. Fixed margins, not matplotlib's constrained layout, which
measured every text twice: 1.1-1.2 s of the 2.7 s of CPU a report took (``daskclust demo``)."""


def new_figure(width: float, height: float, rows: int = 1, columns: int = 1) -> tuple[Figure, np.ndarray]:
    """An empty figure with a grid of ``rows`` x ``columns`` axes placed by :data:`MARGINS`, outside
    pyplot (thread-safe, nothing global); returns it and its axes (an array, squeezed as pyplot's)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    m = MARGINS
    panel_width = (width - m["left"] - m["right"] - (columns - 1) * m["between_columns"]) / columns
    panel_height = (height - m["bottom"] - m["top"] - (rows - 1) * m["between_rows"]) / rows
    axes = fig.subplots(rows, columns, gridspec_kw={
        "left": m["left"] / width, "right": 1 - m["right"] / width,
        "bottom": m["bottom"] / height, "top": 1 - m["top"] / height,
        "wspace": m["between_columns"] / panel_width, "hspace": m["between_rows"] / panel_height})
    return fig, axes


def _value_axis(ax, values: np.ndarray, label: str) -> None:
    """Label the y axis; log scale, decades labelled in plain text, when the finite ``values`` are
    positive and span more than :data:`LOG_SPAN`, else linear. matplotlib's own log labels are
    mathtext (10^k, and 7.99 x 10^4 on an axis spanning less than a decade), whose parser took
    0.3-0.4 s to build in the first report of a process (``daskclust demo``)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    finite = values[np.isfinite(values)]
    ax.set_ylabel(label)
    if len(finite) and finite.min() > 0 and finite.max() > LOG_SPAN * finite.min():
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())


def _column(history: list[dict], key: str) -> np.ndarray:
    return np.array([row[key] for row in history], dtype=np.float64)


def _phases(history: list[dict]) -> list[tuple[str, np.ndarray]]:
    """The EM steps of each phase of the fit (``data``: "coreset" then "full"), as (label, row
    indices); one unlabelled phase for a plain fit."""
    kinds = [row.get("data", "full") for row in history]
    names = list(dict.fromkeys(kinds))
    if len(names) == 1:
        return [("", np.arange(len(history)))]
    return [(f"{name} data" if name == "full" else name, np.flatnonzero(np.array(kinds) == name)) for name in names]


def _plot_phases(ax, x: np.ndarray, y: np.ndarray, phases, color: str) -> None:
    """One line per phase: in ``color`` for a single phase, else in the colour cycle, with a legend."""
    for label, rows in phases:
        ax.plot(x[rows], y[rows], marker=".", label=label or None, color=color if len(phases) == 1 else None)
    if len(phases) > 1:
        ax.legend()


def convergence_figure(history: list[dict]) -> Figure:
    """Free energy per point and quantization error against the EM step (every phase of the fit
    in order: a coreset fit's iterations, then the full data's) and against the cumulative
    seconds of the iterations."""
    steps = np.arange(len(history))
    seconds = np.cumsum(_column(history, "seconds"))
    free_energy, qe = _column(history, "free_energy"), _column(history, "quantization_error")
    phases = _phases(history)
    fig, axes = new_figure(10, 7, 2, 2)
    for row, (x, xlabel) in enumerate(((steps, "EM iteration"), (seconds, "seconds (cumulative, iterations)"))):
        _plot_phases(axes[row, 0], x, free_energy, phases, "tab:blue")
        axes[row, 0].set(xlabel=xlabel, ylabel="free energy per point")
        _plot_phases(axes[row, 1], x, qe, phases, "tab:red")
        axes[row, 1].set_xlabel(xlabel)
        _value_axis(axes[row, 1], qe, "quantization error")
    fig.suptitle("Convergence")
    return fig


def distances_figure(history: list[dict]) -> Figure:
    """Distance evaluations per EM iteration against exact EM's N C (N rows of the data the
    iteration saw, C clusters), and the fraction of them saved; the steps of a stream
    (``partial_fit``), which do not count them (-1), are left blank."""
    steps = np.arange(len(history))
    counted = _column(history, "n_distances")
    tracked = counted >= 0
    evaluated = np.where(tracked, counted, np.nan)
    exact = evaluated * _column(history, "distance_speedup")  # speedup = N C / evaluations
    saved = 100 * (1 - np.divide(evaluated, exact, out=np.where(tracked, 1.0, np.nan), where=exact > 0))
    phases = _phases(history)
    fig, (left, right) = new_figure(10, 3.8, 1, 2)
    _plot_phases(left, steps, evaluated, phases, "tab:blue")
    left.plot(steps, exact, color="0.4", linestyle="--", label="exact EM: N C")
    left.legend()
    left.set_xlabel("EM iteration")
    _value_axis(left, np.concatenate([evaluated, exact]), "distance evaluations")
    _plot_phases(right, steps, saved, phases, "tab:green")
    low = float(np.nanmin(saved)) if np.isfinite(saved).any() else 0.0
    right.set(xlabel="EM iteration", ylabel="saved against exact EM (%)", ylim=(min(0.0, low), 100))
    fig.suptitle("Distance evaluations per iteration" + ("" if tracked.all() else " (a stream's steps: not counted)"))
    return fig


def sizes_figure(sizes: np.ndarray) -> Figure:
    """The clusters' sizes (weighted rows, or responsibility mass) sorted from the largest, and
    their histogram."""
    from matplotlib.ticker import MaxNLocator

    ranked = np.sort(np.asarray(sizes, dtype=np.float64))[::-1]
    fig, (left, right) = new_figure(10, 3.8, 1, 2)
    # one artist per panel (stairs, a filled step histogram): a bar per cluster made thousands of patches
    left.stairs(ranked, np.arange(len(ranked) + 1) - 0.5, fill=True, color="tab:blue")
    left.set(xlabel="cluster, by size", ylabel="size (rows)")
    right.hist(ranked, bins=min(50, max(5, len(ranked) // 4)), color="tab:blue", histtype="stepfilled")
    right.set(xlabel="size (rows)", ylabel="clusters")
    right.yaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(f"Cluster sizes ({len(ranked)} clusters; smallest {ranked[-1]:.4g}, largest {ranked[0]:.4g})")
    return fig


def centres_figure(view: Projection, centres: np.ndarray, rows: np.ndarray | None) -> Figure:
    """The centres in the 2-D ``view``, over the sampled ``rows`` when given (points, or a hexbin
    density above :data:`HEXBIN_ROWS` rows)."""
    fig, ax = new_figure(7.5, 7)
    if rows is not None:
        points = view(rows)
        if len(points) > HEXBIN_ROWS:
            ax.hexbin(points[:, 0], points[:, 1], gridsize=120, cmap="Greys", mincnt=1, bins="log", linewidths=0)
        else:
            ax.scatter(points[:, 0], points[:, 1], s=3, color="0.65", alpha=0.5, linewidths=0)
    at = view(centres)
    ax.scatter(at[:, 0], at[:, 1], s=18, marker="x", color="tab:red", linewidths=1, label="centres")
    ax.set(xlabel=view.labels[0], ylabel=view.labels[1])
    over = f"over {len(rows)} sampled rows" if rows is not None else "(no data given)"
    ax.set_title(f"{len(centres)} centres {over}")
    ax.legend(loc="upper right")
    return fig

"""The report's HTML page: a summary table, the model's parameters and the figures, embedded as
base64 PNGs (the page is self-contained) with a link to each PNG file written beside it."""

from __future__ import annotations

import base64
import html
import json
from dataclasses import dataclass

from .mark import PAGE_START, page_mark_line

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
td, th { border-bottom: 1px solid #ddd; padding: 0.25em 1em 0.25em 0; text-align: left; vertical-align: top; }
th { font-weight: 600; }
img { max-width: 100%; }
.note { color: #555; }
"""


@dataclass(frozen=True)
class Panel:
    """One figure of the page: its heading, the PNG's file name (beside the page) and bytes."""

    title: str
    filename: str
    png: bytes


def summary(model, history: list[dict], data: str | None, n_sampled: int | None) -> list[tuple[str, str]]:
    """(name, value) rows describing the fit: model, iterations, final free energy and quantization
    error, times, distance evaluations against exact EM's, the coreset, the data shown."""
    last = history[-1]
    evaluated = sum(row["n_distances"] for row in history)
    exact = sum(row["n_distances"] * row["distance_speedup"] for row in history)
    centres = model.centres_
    rows = [
        ("model", f"{type(model).__name__}: {centres.shape[0]} clusters, {centres.shape[1]} features"),
        ("iterations", f"{model.n_iter_} M-steps, {len(history)} E-steps recorded, converged: {bool(model.converged_)}"),
        ("final free energy per point", f"{last['free_energy']:.6g}"),
        ("final quantization error", f"{last['quantization_error']:.6g}"),
        ("variance sigma^2", f"{float(model.sigma2_):.6g}"),
        ("seeding time", f"{float(model.seeding_time_):.3f} s ({int(model.seeding_distances_):,} distances)"),
        ("iterations' time", f"{sum(row['seconds'] for row in history):.3f} s"),
        ("fit time", f"{float(model.fit_time_):.3f} s"),
        ("distance evaluations (EM)", f"{int(evaluated):,}, exact EM's N C per iteration: {int(exact):,} "
                                      f"({100 * (1 - evaluated / exact) if exact else 0:.2f}% saved, "
                                      f"{exact / evaluated if evaluated else float('nan'):.3g}x fewer)"),
    ]
    coreset = getattr(model, "coreset_", None)
    if coreset:
        rows.append(("coreset", f"{coreset['size']:,} rows built in {coreset['seconds']:.3f} s "
                                f"({int(coreset['n_distances']):,} distances)"))
    rows.append(("data shown", f"{n_sampled:,} rows sampled from {data}" if data is not None
                 else "none (the centres alone, projected by the PCA of the centres)"))
    return rows


def render(title: str, rows: list[tuple[str, str]], params: dict, panels: list[Panel], notes: list[str],
           report_id: str) -> str:
    """The HTML page of the report ``report_id``, its ownership mark on its third line
    (:mod:`daskclust.report.mark`)."""
    esc = html.escape
    parts = [
        *PAGE_START,
        page_mark_line(report_id),
        f"<title>{esc(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        "<h2>Summary</h2>",
        _table(rows),
        "<h2>Parameters</h2>",
        _table([(name, json.dumps(value, default=str)) for name, value in sorted(params.items())]),
    ]
    parts += [f'<p class="note">{esc(note)}</p>' for note in notes]
    for panel in panels:
        data = base64.b64encode(panel.png).decode("ascii")
        parts += [
            f"<h2>{esc(panel.title)}</h2>",
            f'<img src="data:image/png;base64,{data}" alt="{esc(panel.title)}">',
            f'<p class="note">PNG: <a href="{esc(panel.filename)}">{esc(panel.filename)}</a></p>',
        ]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _table(rows) -> str:
    cells = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
    return f"<table>{cells}</table>"


"""A model's report written to disk: PNG figures and a self-contained HTML page beside them.

Everything that can fail on the input (a model without history, data of another width, an output
that would replace a file no report wrote) fails before a row is read or a file is written; the
figures are then drawn in memory and the files written last, each to a temporary sibling renamed
into place.
"""

from __future__ import annotations

import io
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import InvalidParameterError, OutputRefusedError
from ..io import Location, input_stores, source_location
from .figures import centres_figure, check_history, convergence_figure, distances_figure, sizes_figure
from .mark import MARK_KEY, mark, marked_kind, new_report_id
from .page import Panel, render, summary
from .view import DEFAULT_SAMPLE, check_width, sample_rows, view_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FIGURES = {
    "convergence": "Convergence: free energy and quantization error",
    "distances": "Distance evaluations against exact EM",
    "sizes": "Cluster sizes",
    "centres": "Centres over a 2-D view of the data",
}
"""The report's figures, by name (the PNG of ``name`` is ``<page stem>-<name>.png``), with their titles."""


def report_paths(output: str | os.PathLike, png_paths: dict[str, str | os.PathLike] | None = None) -> dict[str, Path]:
    """The files of a report whose page is ``output``: ``"html"`` and one PNG per figure, beside the page
    (``<stem>-<name>.png``) unless ``png_paths`` gives another path for it."""
    page = Path(output)
    if "://" in str(output):
        raise InvalidParameterError(f"a report is written to a local path, not to {output!r}")
    if page.suffix.lower() not in (".html", ".htm"):
        raise InvalidParameterError(f"the report's page must be an .html file, got {str(output)!r}")
    stem = page.with_suffix("")
    paths = {"html": page, **{name: stem.with_name(f"{stem.name}-{name}.png") for name in FIGURES}}
    paths.update({name: Path(path) for name, path in (png_paths or {}).items()})
    return paths


def model_centres(model) -> np.ndarray:
    """The model's centres in the data's space (a mixture's ``means_``, k-means' ``cluster_centers_``)."""
    means = getattr(model, "means_", None)
    return np.asarray(means if means is not None else model.cluster_centers_, dtype=np.float64)


def write_report(model, output: str | os.PathLike, *, data=None, array: str | None = None,
                 sample: int = DEFAULT_SAMPLE, seed: int = 0, overwrite: bool = False,
                 png_paths: dict[str, str | os.PathLike] | None = None, inputs=()) -> dict[str, Path]:
    """Write the report of the fitted ``model`` to the HTML page ``output`` and PNGs beside it.

    Parameters
    ----------
    model : fitted daskclust estimator (e.g. from :func:`daskclust.load`)
    output : str or PathLike
        The page (``.html``, a local path); figure ``name`` goes to ``<stem>-<name>.png`` beside it.
    data : array-like, dask array, zarr.Array, xarray.DataArray or str, optional
        The data, of the model's width, to draw the centres over; at most ``sample`` rows of it
        are read (chunk by chunk). Without it the centres are drawn alone.
    array : str, optional
        The array inside a zarr group ``data`` (default ``X``).
    sample : int, default=20000
        Rows drawn from ``data`` for the view (and, for D > 2, its PCA).
    seed : int, default=0
        Seed of the sample.
    overwrite : bool, default=False
        Replace the files of an earlier report; files no report wrote are never replaced.
    png_paths : dict, optional
        Other paths for some figures' PNGs, by figure name (:data:`FIGURES`).
    inputs : iterable of str or PathLike
        Stores of the same job (e.g. the model's) that no output may lie inside.

    Returns
    -------
    dict of str to Path
        The files written: ``"html"`` and the figures' names.

    Raises
    ------
    InvalidParameterError
        The model has no history, or ``output`` is not a local ``.html`` path.
    InvalidDataError
        ``data`` are not of the model's width (checked before any row is read).
    OutputRefusedError
        An output exists and no report wrote it, or exists and ``overwrite`` is false, or lies
        inside an input.
    """
    from ..data import as_chunked_data

    owner = type(model).__name__
    history = check_history(getattr(model, "history_", None), owner)
    chunked = None
    if data is not None:
        chunked = as_chunked_data(data, array=array)
        check_width(chunked, int(model.n_features_in_), owner)
    paths = report_paths(output, png_paths)
    sizes = getattr(model, "cluster_sizes_", None)
    if sizes is None:
        del paths["sizes"]
    source = source_location(data)
    check_targets(paths, overwrite, [*input_stores(data), *map(Location.parse, inputs)])

    rows = sample_rows(chunked, sample, seed) if chunked is not None else None
    centres = model_centres(model)
    figures = {"convergence": convergence_figure(history), "distances": distances_figure(history),
               "centres": centres_figure(view_of(centres, rows), centres, rows)}
    if sizes is not None:
        figures["sizes"] = sizes_figure(sizes)
    report_id = new_report_id()
    pngs = {name: png_bytes(figures[name], report_id) for name in FIGURES if name in figures}  # in the page's order
    panels = [Panel(FIGURES[name], _relative(paths[name], paths["html"]), png) for name, png in pngs.items()]
    notes = [] if sizes is not None else ["Cluster sizes: not stored with this model (saved by an older daskclust)."]
    described = None if data is None else str(source) if source is not None else f"the {type(data).__name__} given"
    page = render(f"daskclust report: {owner}", summary(model, history, described, None if rows is None else len(rows)),
                  model.model_params(), panels, notes, report_id)
    for name, png in pngs.items():
        write_atomically(paths[name], png)
    write_atomically(paths["html"], page.encode("utf-8"))
    return paths


def png_bytes(fig: Figure, report_id: str) -> bytes:
    """The figure as PNG bytes, carrying the figure mark of the report ``report_id``."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, metadata={"Software": "daskclust", MARK_KEY: mark("figure", report_id)})
    return buffer.getvalue()


def _relative(path: Path, page: Path) -> str:
    """How the page links to ``path``: relative to the page's directory."""
    return os.path.relpath(path.resolve(), page.resolve().parent)


def check_targets(paths: dict[str, Path], overwrite: bool, inputs) -> None:
    """Refuse, before any work, outputs lying inside an input or under a file, files that carry no
    report mark of their own kind (a page for the page, a figure for a figure), and a report's files
    without ``overwrite``."""
    for role, path in paths.items():
        target = Location.parse(path)
        for source in inputs:
            if source is not None and target.overlaps(source):
                raise OutputRefusedError(f"refusing to write the report's {path}: it lies inside the input {source}")
        existing = next(parent for parent in path.absolute().parents if parent.exists())
        if not existing.is_dir():
            raise OutputRefusedError(f"cannot write the report's {path}: {existing} is a file, not a directory")
        if not path.exists():
            continue
        if not path.is_file() or marked_kind(path) != ("page" if role == "html" else "figure"):
            raise OutputRefusedError(f"refusing to write the report's {path}: something exists there that no "
                                     "daskclust report wrote; choose another output")
        if not overwrite:
            raise OutputRefusedError(f"a report's file exists at {path}; pass overwrite=True (--overwrite) to "
                                     "replace it")


def write_atomically(path: Path, content: bytes) -> None:
    """Write ``content`` to a temporary sibling of ``path`` (its directory made if missing), then rename
    it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:12]}")
    try:
        tmp.write_bytes(content)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)

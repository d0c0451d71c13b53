"""Reports on fitted models: convergence, distance evaluations against exact EM, cluster sizes and
the centres over a 2-D view of the data, as PNG figures and one self-contained HTML page
(``daskclust report``, and the picture of ``daskclust demo``).

The names below are imported from their module when first asked for: the command line builds its
parser (``DEFAULT_SAMPLE``) and checks a report's files without importing the data layer (Dask's
arrays, the kernels: 3 s of a first ``daskclust demo`` before it could start compiling)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import imported_on_use

if TYPE_CHECKING:
    from .view import DEFAULT_SAMPLE, pca_2d, sample_rows
    from .write import FIGURES, report_paths, write_report

_IMPORTED_ON_USE = {"DEFAULT_SAMPLE": "view", "pca_2d": "view", "sample_rows": "view",
                    "FIGURES": "write", "report_paths": "write", "write_report": "write"}
"""The public names, by the module they are imported from when first asked for."""


__getattr__, __dir__ = imported_on_use(__name__, _IMPORTED_ON_USE, globals())

__all__ = ["DEFAULT_SAMPLE", "FIGURES", "pca_2d", "report_paths", "sample_rows", "write_report"]

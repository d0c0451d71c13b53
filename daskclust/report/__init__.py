"""Reports on fitted models: convergence, distance evaluations against exact EM, cluster sizes and
the centres over a 2-D view of the data, as PNG figures and one self-contained HTML page
(``daskclust report``, and the picture of ``daskclust demo``)."""

from .view import DEFAULT_SAMPLE, pca_2d, sample_rows
from .write import FIGURES, report_paths, write_report

__all__ = ["DEFAULT_SAMPLE", "FIGURES", "pca_2d", "report_paths", "sample_rows", "write_report"]

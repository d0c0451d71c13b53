"""What a streaming chunk transform is, and what it gives.

A :class:`Transform` makes a pass or a few over chunked rows -- on data it opens itself
(``fit_transform``) or on an engine a fit already holds (``transform_engine``) -- and gives
:class:`Transformed` rows: a smaller data set that every estimator fits as it fits data (``fit(T)``,
the weights travelling with the rows), by the rows' own reading of them (:meth:`Transformed.chunked`)
and, where the rows are not plain feature vectors, the family that reads them
(:meth:`Transformed.family`). Lightweight coresets give weighted rows of the data
(:class:`~daskclust.transforms.coreset.CoresetRows`); SGMM sketches give packed rows of Q
preconditioned entries each, read by the sketched family
(:class:`~daskclust.transforms.sketch.SketchedData`).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..data import ChunkedData
from ..models import Family


@runtime_checkable
class Transformed(Protocol):
    """Rows a transform gave, with their weights, in memory or in a store."""

    @property
    def n_samples(self) -> int:
        """Rows."""

    @property
    def n_features(self) -> int:
        """The dimension of a model fitted on them (of the rows they were taken from)."""

    @property
    def sources(self) -> tuple[dict | None, dict | None]:
        """Where they and their weights are stored (``{"url", "array"}``; None in memory), or the rows and
        weights they were taken from, as models record their training data."""

    def chunked(self, chunk_rows: int | None = None, min_samples: int = 1) -> ChunkedData:
        """The rows as the engine's data (with their weights), checked as any data are."""

    def family(self, family: Family) -> Family:
        """The family that fits ``family``'s model on these rows (``family`` itself for feature vectors)."""


class Transform(Protocol):
    """A streaming chunk transform (see the module docstring)."""

    def fit_transform(self, X, sample_weight=None, *, client=None, chunk_rows: int | None = None) -> Transformed:
        """Transform ``X`` (any input the estimators take), on ``client`` or an embedded cluster."""

    def transform_engine(self, engine) -> Transformed:
        """The transform's passes on an open :class:`~daskclust.engine.engine.Engine` over the data."""

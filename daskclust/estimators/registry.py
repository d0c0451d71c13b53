"""The estimators by class name, and a fitted estimator from a loaded model store."""

from __future__ import annotations

from ..errors import ModelStoreError
from .base import TruncatedEMEstimator
from .cell_mixtures import CellGaussianMixture, GreedyGaussianMixture
from .gaussian_mixture import GaussianMixture
from .kmeans import KMeans
from .sketched import SketchedGaussianMixture
from .stored import restore

ESTIMATORS: dict[str, type[TruncatedEMEstimator]] = {
    cls.__name__: cls
    for cls in (KMeans, GaussianMixture, SketchedGaussianMixture, CellGaussianMixture, GreedyGaussianMixture)
}
"""Every estimator class under its name, the ``kind`` of its model stores and checkpoints."""


def from_stored(stored, where: str) -> TruncatedEMEstimator:
    """The fitted estimator of a :class:`~daskclust.persistence.model.StoredModel` (:func:`~daskclust.estimators.stored.restore`);
    a kind no estimator has is a :class:`ModelStoreError` naming ``where``."""
    if stored.kind not in ESTIMATORS:
        raise ModelStoreError(f"{where} holds a model of unknown kind {stored.kind!r}")
    return restore(ESTIMATORS[stored.kind], stored, where)

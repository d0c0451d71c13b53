"""daskclust: k-means and Gaussian mixtures with many clusters on data larger than RAM, on Dask.

>>> from daskclust import KMeans
>>> model = KMeans(n_clusters=100).fit("data.zarr")   # doctest: +SKIP
"""

from .errors import InvalidDataError, InvalidParameterError, NotFittedError
from .estimators import CellGaussianMixture, GaussianMixture, GreedyGaussianMixture, KMeans, SketchedGaussianMixture
from .versions import __version__


def load(path, *, storage_options=None):
    """Load a model saved with ``model.save(path)``.

    Raises :class:`~daskclust.errors.ModelStoreError` for anything but a whole,
    consistent model store (missing, incomplete, damaged, non-finite centres,
    parameters that do not match the arrays).
    """
    from .estimators.registry import from_stored
    from .persistence.model import load_model

    return from_stored(load_model(path, storage_options=storage_options), repr(path))


__all__ = ["__version__", "KMeans", "GaussianMixture", "SketchedGaussianMixture", "CellGaussianMixture", "GreedyGaussianMixture", "load", "InvalidDataError", "InvalidParameterError", "NotFittedError"]

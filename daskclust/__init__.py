"""daskclust: k-means and Gaussian mixtures with many clusters on data larger than RAM, on Dask.

>>> from daskclust import KMeans
>>> model = KMeans(n_clusters=100).fit("data.zarr")   # doctest: +SKIP

Many fits on the same data place them once:

>>> from daskclust import persist
>>> with persist("data.zarr") as X:                  # doctest: +SKIP
...     models = [KMeans(C).fit(X) for C in (64, 256, 1024)]
"""

from .errors import InvalidDataError, InvalidParameterError, NotFittedError
from .estimators import CellGaussianMixture, GaussianMixture, GreedyGaussianMixture, KMeans, SketchedGaussianMixture
from .fit import PlacedData, persist
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


__all__ = ["__version__", "KMeans", "GaussianMixture", "SketchedGaussianMixture", "CellGaussianMixture", "GreedyGaussianMixture", "load", "persist", "PlacedData", "InvalidDataError", "InvalidParameterError", "NotFittedError"]

"""daskclust: k-means and Gaussian mixtures with many clusters on data larger than RAM, on Dask.

>>> from daskclust import KMeans
>>> model = KMeans(n_clusters=100).fit("data.zarr")   # doctest: +SKIP
"""

__version__ = "0.1.0"

from .estimators import GaussianMixture, KMeans  # noqa: E402
from .errors import InvalidDataError, InvalidParameterError, NotFittedError  # noqa: E402


def load(path, *, storage_options=None):
    """Load a model saved with ``model.save(path)``."""
    from .estimators.base import restore
    from .store import load_model

    stored = load_model(path, storage_options=storage_options)
    classes = {"KMeans": KMeans, "GaussianMixture": GaussianMixture}
    estimator = classes[stored.kind](**stored.params)
    restore(estimator, stored.arrays, stored.scalars)
    estimator.history_ = list(stored.history)
    return estimator


__all__ = ["KMeans", "GaussianMixture", "load", "InvalidDataError", "InvalidParameterError", "NotFittedError"]

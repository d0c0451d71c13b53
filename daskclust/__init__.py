"""daskclust: k-means and Gaussian mixtures with many clusters on data larger than RAM, on Dask.

>>> from daskclust import KMeans
>>> model = KMeans(n_clusters=100).fit("data.zarr")   # doctest: +SKIP

Many fits on the same data place them once:

>>> from daskclust import persist
>>> with persist("data.zarr") as X:                  # doctest: +SKIP
...     models = [KMeans(C).fit(X) for C in (64, 256, 1024)]

The estimators are imported when first asked for (``from daskclust import KMeans`` included):
importing a module of the package (the command line, the kernels' helper process, a Dask
worker unpickling an operation) then does not import scikit-learn (1.6 s of CPU).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import InvalidDataError, InvalidParameterError
from .lazy import imported_on_use
from .versions import __version__

if TYPE_CHECKING:
    from .errors import NotFittedError
    from .estimators import (
        CellGaussianMixture,
        GaussianMixture,
        GreedyGaussianMixture,
        KMeans,
        SketchedGaussianMixture,
    )
    from .fit import PlacedData, persist


def load(path, *, storage_options=None):
    """Load a model saved with ``model.save(path)``.

    Raises :class:`~daskclust.errors.ModelStoreError` for anything but a whole,
    consistent model store (missing, incomplete, damaged, non-finite centres,
    parameters that do not match the arrays).
    """
    from .estimators.registry import from_stored
    from .persistence.model import load_model

    return from_stored(load_model(path, storage_options=storage_options), repr(path))


_IMPORTED_ON_USE = {
    "KMeans": "estimators",
    "GaussianMixture": "estimators",
    "SketchedGaussianMixture": "estimators",
    "CellGaussianMixture": "estimators",
    "GreedyGaussianMixture": "estimators",
    "NotFittedError": "errors",
    "persist": "fit",
    "PlacedData": "fit",
}
"""The public names imported from their module when first asked for."""


__getattr__, __dir__ = imported_on_use(__name__, _IMPORTED_ON_USE, globals())

__all__ = ["__version__", "KMeans", "GaussianMixture", "SketchedGaussianMixture", "CellGaussianMixture", "GreedyGaussianMixture", "load", "persist", "PlacedData", "InvalidDataError", "InvalidParameterError", "NotFittedError"]

"""scikit-learn-style estimators."""

from .cell_mixtures import CellGaussianMixture, GreedyGaussianMixture
from .gaussian_mixture import GaussianMixture
from .kmeans import KMeans
from .sketched import SketchedGaussianMixture

__all__ = ["KMeans", "GaussianMixture", "SketchedGaussianMixture", "CellGaussianMixture", "GreedyGaussianMixture"]

"""scikit-learn-style estimators."""

from .gaussian_mixture import GaussianMixture
from .kmeans import KMeans

__all__ = ["KMeans", "GaussianMixture"]

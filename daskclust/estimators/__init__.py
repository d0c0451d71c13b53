"""scikit-learn-style estimators."""

from ..engine.cluster import set_kernel_preparation
from .cells import CellGaussianMixture, GreedyGaussianMixture
from .gaussian_mixture import GaussianMixture
from .kmeans import KMeans
from .sketched import SketchedGaussianMixture
from .warmup import prepare_kernels

set_kernel_preparation(prepare_kernels)  # what an embedded cluster compiles first: a fit's kernels

__all__ = ["KMeans", "GaussianMixture", "SketchedGaussianMixture", "CellGaussianMixture", "GreedyGaussianMixture"]

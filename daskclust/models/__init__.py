"""Model families on one seam: each owns its parameters, kernel cost, statistics, M-step and free energy.

``FAMILIES`` maps a family's name to its (stateless) instance: ``"kmeans"`` (hard
assignments, Lücke & Forster 2019 Prop. 3), ``"isotropic"`` (Forster & Lücke 2018's equal-weight mixture with
one shared variance), and the mixtures with learned weights ``"spherical"``,
``"diag"``, ``"full"`` and ``"tied"`` (scikit-learn's covariance types). A new family is one
new module registering its kernel overloads and a :class:`Family` subclass, and its line here.
"""

from __future__ import annotations

from .base import Family, Params, SuffStats, variance_floor
from .diag import DiagFamily
from .full import FullFamily
from .isotropic import IsotropicFamily, MeanParams
from .kmeans import KMeansFamily
from .spherical import SphericalFamily
from .tied import TiedFamily

FAMILIES: dict[str, Family] = {family.name: family for family in (
    KMeansFamily(), IsotropicFamily(), SphericalFamily(), DiagFamily(), FullFamily(), TiedFamily())}

__all__ = ["FAMILIES", "Family", "MeanParams", "Params", "SuffStats", "variance_floor"]

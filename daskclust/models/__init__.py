"""Model families on one seam: each owns its statistics, M-step and free energy.

``FAMILIES`` maps a family's name to its (stateless) instance. Today: ``"kmeans"``
(hard assignments, seed 004 Prop. 3) and ``"isotropic"`` (seed 000's equal-weight
mixture with one shared variance).
"""

from __future__ import annotations

from .base import Family, MeanStats, variance_floor
from .isotropic import IsotropicFamily
from .kmeans import KMeansFamily

FAMILIES: dict[str, Family] = {family.name: family for family in (KMeansFamily(), IsotropicFamily())}

__all__ = ["FAMILIES", "Family", "IsotropicFamily", "KMeansFamily", "MeanStats", "variance_floor"]

"""Streaming chunk transforms: a pass or a few over a chunked source that give a smaller data set every
estimator fits as it fits data (:mod:`daskclust.transforms.interface`): Exarchakis et al. 2022's
lightweight coresets (weighted rows) and Kightley & Becker 2019's sketches (Q of P preconditioned
entries per row)."""

from __future__ import annotations

from .coreset import CoresetRows, LightweightCoreset
from .interface import Transform, Transformed
from .sketch import Sketch, SketchedData, SketchGeometry, SketchTransform

__all__ = ["CoresetRows", "LightweightCoreset", "Sketch", "SketchedData", "SketchGeometry", "SketchTransform",
           "Transform", "Transformed"]

"""Streaming chunk transforms: a pass or two over a chunked source that give a smaller data set every
estimator accepts: Exarchakis et al. 2022's lightweight coresets (weighted rows) and Kightley & Becker 2019's sketches (Q of P
preconditioned entries per row)."""

from __future__ import annotations

from .coreset import LightweightCoreset
from .sketch import Sketch, SketchedData, SketchGeometry, SketchTransform

__all__ = ["LightweightCoreset", "Sketch", "SketchedData", "SketchGeometry", "SketchTransform"]

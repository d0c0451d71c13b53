"""Streaming chunk transforms: a pass or two over a chunked source that give a smaller weighted data set
every estimator accepts (seed 003's lightweight coresets; seed 002's sketches to come)."""

from __future__ import annotations

from .coreset import LightweightCoreset

__all__ = ["LightweightCoreset"]

"""Benchmark suites behind ``daskclust bench``."""

from .runner import run

__all__ = ["run"]

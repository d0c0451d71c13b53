"""The ``daskclust`` command line: make-data, fit, predict, info, demo, bench."""

from .main import main

__all__ = ["main"]

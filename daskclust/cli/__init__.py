"""The ``daskclust`` command line: make-data, fit, predict, info, demo, bench."""

from .main import console, main

__all__ = ["console", "main"]

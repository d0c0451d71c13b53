"""Exceptions raised by daskclust.

Each class also inherits the builtin it refines, so ``except ValueError`` keeps
working for callers that do not know daskclust (the zarr / xarray habit).
"""

from __future__ import annotations


class DaskclustError(Exception):
    """Base class of every error daskclust raises on purpose."""


class InvalidDataError(DaskclustError, ValueError):
    """The input data cannot be clustered (shape, dtype, NaN/inf, too few rows...)."""


class InvalidParameterError(DaskclustError, ValueError):
    """An estimator or command-line parameter has an unsupported value."""


class NotFittedError(DaskclustError, ValueError, AttributeError):
    """A fitted attribute was requested from an estimator that was not fitted."""


class CheckpointError(DaskclustError, RuntimeError):
    """A checkpoint cannot be written or is incomplete / inconsistent."""


class WorkerLost(DaskclustError, RuntimeError):
    """A worker holding chunks left the cluster during a pass; the fit recovers from it."""

    def __init__(self, addresses: list[str]):
        self.addresses = list(addresses)
        super().__init__(f"lost worker(s) {', '.join(self.addresses)} during a pass")


class ModelStoreError(DaskclustError, OSError):
    """A saved model cannot be read (missing, truncated or of another kind)."""

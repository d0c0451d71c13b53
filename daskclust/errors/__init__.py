"""Exceptions and warnings raised by daskclust.

Each class also inherits the builtin it refines, so ``except ValueError`` keeps
working for callers that do not know daskclust (the zarr / xarray habit).

:class:`NotFittedError` and :class:`ConvergenceWarning` also refine scikit-learn's classes of
those names; they live in :mod:`daskclust.errors.sklearn_refined` and are imported from there when
first asked for (``from daskclust.errors import NotFittedError`` included), so that the rest of
daskclust (the command line, the kernels' helper process, Dask workers) does not import
scikit-learn, whose base module imports scipy.stats and pandas (1.6 s of CPU on a 2-core machine).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import imported_on_use

if TYPE_CHECKING:  # for readers and type checkers; imported on first use (__getattr__ below)
    from .sklearn_refined import ConvergenceWarning as ConvergenceWarning
    from .sklearn_refined import NotFittedError as NotFittedError


class DaskclustError(Exception):
    """Base class of every error daskclust raises on purpose."""


class InvalidDataError(DaskclustError, ValueError):
    """The input data cannot be clustered (shape, dtype, NaN/inf, too few rows, missing chunks...)."""


class InvalidParameterError(DaskclustError, ValueError):
    """An estimator or command-line parameter has an unsupported value."""


class ClusterError(DaskclustError, RuntimeError):
    """The Dask cluster cannot run the work: no scheduler at the address, no workers,
    or a worker that was restarted or paused (memory) while the work waited on it."""


class WorkerLost(DaskclustError, RuntimeError):
    """A worker holding chunks left the cluster during a pass; the fit recovers from it.

    ``memory`` maps each lost worker its nanny restarted for memory to (process memory, memory
    limit) in bytes, as the nanny reported them to the scheduler.
    """

    def __init__(self, addresses: list[str], memory: dict[str, tuple[int, int]] | None = None):
        self.addresses = list(addresses)
        self.memory = dict(memory or {})
        lost = []
        for address in self.addresses:
            if address in self.memory:
                used, limit = self.memory[address]
                limit_text = f" of its {limit / 1e6:.0f} MB limit" if limit else ""
                lost.append(f"{address} (restarted by its nanny: its memory reached {used / 1e6:.0f} MB{limit_text})")
            else:
                lost.append(address)
        super().__init__(f"lost worker(s) {', '.join(lost)} during a pass")


class PlacedDataError(DaskclustError, ValueError):
    """Placed data (``daskclust.persist``) cannot serve a call: the handle was closed, or another
    call is using it (a handle serves one fit at a time)."""


class StoreError(DaskclustError, OSError):
    """A store cannot be read or written safely (see :mod:`daskclust.io`)."""


class OutputRefusedError(StoreError, FileExistsError):
    """An output location was refused before any work: it holds something daskclust did
    not write (or of another kind), it needs ``overwrite``, it overlaps an input of the
    same call, or the workers cannot see it."""


class ModelStoreError(StoreError):
    """A saved model cannot be read (missing, damaged, truncated or of another kind)."""


class CheckpointError(StoreError, RuntimeError):
    """A checkpoint cannot be written or is incomplete / damaged / inconsistent."""


class ConvergenceError(DaskclustError, ValueError):
    """The fit cannot go on: a covariance is not positive definite (raise ``reg_covar``)."""


_SKLEARN_REFINED = {"NotFittedError": "sklearn_refined", "ConvergenceWarning": "sklearn_refined"}
"""The errors refining scikit-learn's, imported with scikit-learn when first asked for."""

__getattr__, __dir__ = imported_on_use(__name__, _SKLEARN_REFINED, globals())


__all__ = ["DaskclustError", "InvalidDataError", "InvalidParameterError", "NotFittedError", "ClusterError", "WorkerLost",
           "StoreError", "OutputRefusedError", "ModelStoreError", "CheckpointError", "ConvergenceError",
           "ConvergenceWarning"]

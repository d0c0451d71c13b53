"""Exceptions and warnings raised by daskclust.

Each class also inherits the builtin it refines, so ``except ValueError`` keeps
working for callers that do not know daskclust (the zarr / xarray habit).
"""

from __future__ import annotations

from sklearn.exceptions import ConvergenceWarning as SklearnConvergenceWarning
from sklearn.exceptions import NotFittedError as SklearnNotFittedError


class DaskclustError(Exception):
    """Base class of every error daskclust raises on purpose."""


class InvalidDataError(DaskclustError, ValueError):
    """The input data cannot be clustered (shape, dtype, NaN/inf, too few rows, missing chunks...)."""


class InvalidParameterError(DaskclustError, ValueError):
    """An estimator or command-line parameter has an unsupported value."""


class NotFittedError(DaskclustError, SklearnNotFittedError):
    """A fitted attribute was requested from an estimator that was not fitted (also
    scikit-learn's ``NotFittedError``, itself a ``ValueError`` and ``AttributeError``)."""


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


class ConvergenceWarning(SklearnConvergenceWarning):
    """The fit ended with a degenerate model (e.g. fewer distinct points than clusters), or a mixture
    stopped at ``max_iter`` before it converged; scikit-learn's ``ConvergenceWarning`` (a
    ``UserWarning``), so that filters on scikit-learn's class apply."""

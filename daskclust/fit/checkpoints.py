"""Checkpointing a running fit and resuming from a checkpoint (the layout is
:mod:`daskclust.persistence.checkpoint`'s).

:class:`Checkpointer` saves the loop state every ``every`` iterations, the workers writing their
chunks' states; :func:`load` reads a checkpoint back as a :class:`Checkpoint` (the loop state to
continue from); :func:`check_resumable` and :func:`check_content` refuse to resume with another
estimator, other parameters or other data. The random streams are keyed by seed, iteration and
chunk, so a resumed fit equals the uninterrupted one.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import numpy as np

from ..em.loop import LoopState
from ..errors import CheckpointError
from ..io import Location
from ..models import Params
from ..names import FINGERPRINT_CONTENT
from ..persistence.checkpoint import StoredCheckpoint, prepare_directory, read_checkpoint, write_checkpoint
from .result import FitRecord

log = logging.getLogger("daskclust")


@dataclass
class Checkpoint:
    """A loaded checkpoint: where it is, the loop state to continue from, the search tables, and what the
    fit recorded of itself (:class:`~daskclust.fit.result.FitRecord`)."""

    url: str
    state: LoopState
    search: dict[str, np.ndarray]
    record: FitRecord


class Checkpointer:
    """Saves a checkpoint every ``every`` iterations into the checkpoint directory ``path``.

    ``record`` (:class:`~daskclust.fit.result.FitRecord`: estimator kind and parameters, data
    fingerprint and location, seed, seeding figures) is stored with every checkpoint. :meth:`prepare`
    checks and creates the directory before any work.
    """

    def __init__(self, path: str | os.PathLike | Location, every: int, record: FitRecord):
        if isinstance(every, bool) or not isinstance(every, (int, np.integer)) or every < 1:
            raise CheckpointError(f"checkpoint_every must be a positive integer, got {every!r}")
        self.location = Location.parse(path)
        if self.location.is_url:
            raise CheckpointError(
                f"checkpoint {self.location.url!r} is a URL: checkpoints go to a directory on a file system every "
                "worker mounts at the same path (e.g. NFS); the data may stay at a URL. Checkpoints at fsspec URLs "
                "are not supported (their atomic renames, listing and pruning are file-system operations)")
        self.path = self.location.url
        self.every = int(every)
        self.record = record

    def prepare(self, *, overwrite: bool = False, resuming: Location | None = None, inputs=()) -> None:
        """Check the directory may be written and create it (:func:`~daskclust.persistence.checkpoint.prepare_directory`)."""
        prepare_directory(self.location, overwrite=overwrite, resuming=resuming, inputs=inputs)

    def due(self, iteration: int) -> bool:
        return iteration % self.every == 0

    def save(self, engine, state: LoopState, search: dict[str, np.ndarray]) -> str:
        """Write the checkpoint of ``state`` (the workers write the chunk states); returns its URL."""
        self.record.fingerprint[FINGERPRINT_CONTENT] = engine.content_fingerprint()
        stored = StoredCheckpoint(state.params.arrays(), search, state.iteration, state.prev_f, state.history,
                                  self.record.as_json())
        url = write_checkpoint(self.location, stored, engine.save_state)
        log.info("checkpoint of iteration %d written: %s", state.iteration, url)
        return url


def load(path: str | os.PathLike) -> Checkpoint:
    """Load a checkpoint (a directory of checkpoints resolves to its newest complete one); a missing,
    incomplete, damaged or foreign one is a :class:`CheckpointError`."""
    stored = read_checkpoint(path)
    state = LoopState(stored.iteration, Params(**stored.params), stored.prev_f, stored.history)
    return Checkpoint(stored.url, state, stored.search, FitRecord.from_json(stored.meta))


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_resumable(checkpoint: Checkpoint, kind: str, params: dict, fingerprint: dict) -> None:
    """Refuse to resume with another estimator, other parameters or other data."""
    record = checkpoint.record
    if record.kind != kind:
        raise CheckpointError(f"checkpoint {checkpoint.url!r} is of a {record.kind}, not a {kind}")
    differing = sorted(k for k, v in params.items() if k in record.params and record.params[k] != v
                       and k != "max_iter")
    if differing:
        listed = ", ".join(f"{k}={record.params[k]!r}" for k in differing)
        raise CheckpointError(f"checkpoint {checkpoint.url!r} was written with other parameters: {listed}")
    max_iter, n_init_esteps = params.get("max_iter"), params.get("n_init_esteps", 0)
    if _is_int(max_iter) and _is_int(n_init_esteps) and checkpoint.state.iteration > max_iter + n_init_esteps:
        raise CheckpointError(f"checkpoint {checkpoint.url!r} is at iteration {checkpoint.state.iteration}, beyond "
                              f"max_iter={max_iter}: pass a larger max_iter to continue it")
    recorded = {k: v for k, v in record.fingerprint.items() if k != FINGERPRINT_CONTENT}
    if recorded != fingerprint:
        differing = sorted(k for k in set(recorded) | set(fingerprint) if recorded.get(k) != fingerprint.get(k))
        listed = "; ".join(f"{k}: checkpoint {recorded.get(k)!r}, data {fingerprint.get(k)!r}" for k in differing)
        raise CheckpointError(f"checkpoint {checkpoint.url!r} was written for other data ({listed})")
    if not isinstance(record.fingerprint.get(FINGERPRINT_CONTENT), str):
        raise CheckpointError(f"checkpoint {checkpoint.url!r} records no content fingerprint of its data (written by "
                              "an older daskclust), so it cannot be checked against the data given: start a new fit")


def check_content(checkpoint: Checkpoint, engine, described: str) -> None:
    """Refuse to resume on data whose content differs from the data the checkpoint was written on
    (before any of its state is restored)."""
    recorded, found = checkpoint.record.fingerprint[FINGERPRINT_CONTENT], engine.content_fingerprint()
    if recorded != found:
        raise CheckpointError(
            f"checkpoint {checkpoint.url!r} was written for other data: same shape, dtype and chunking, but its data's "
            f"content fingerprint is {recorded[:16]}... and that of {described} is {found[:16]}...; resume with the "
            "data it was written on, or start a new fit"
        )

"""Checkpoints of a running fit, written atomically, and resuming from them.

A checkpoint directory (``fit(..., checkpoint="run.zarr")``) holds one zarr group
per saved iteration, ``ckpt-000012``, of which the newest two complete ones are kept:

- attributes: the estimator's kind and parameters, the data's fingerprint and
  location, the seed (the random streams are keyed by seed, iteration and chunk,
  so the iteration is the RNG position), the seeding's figures, the history, the
  loop position, and ``complete``, written last;
- arrays: the centres and the search strategy's tables;
- ``chunks/NNNNNN/``: each chunk's per-row state (K(n)) and row order, written
  by the worker that holds the chunk (nothing of size N passes the driver).

A checkpoint is written under a ``.tmp`` name and renamed when complete (local
paths), so an interrupted write leaves no directory that looks complete; one
without the ``complete`` attribute is refused, and resuming takes the newest
complete one.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from dataclasses import dataclass, field

import numpy as np
import zarr

from . import __version__
from .errors import CheckpointError

FORMAT = 1
KEEP = 2
PREFIX = "ckpt-"


@dataclass
class LoopState:
    """Where the EM loop stands before its next E-step."""

    iteration: int
    centres: np.ndarray
    sigma2: float
    prev_f: float | None = None
    history: list[dict] = field(default_factory=list)


@dataclass
class Checkpoint:
    """A loaded checkpoint: loop position, search tables, metadata, and where its chunk states are."""

    url: str
    state: LoopState
    search: dict[str, np.ndarray]
    meta: dict


def data_fingerprint(data) -> dict:
    """What must match for a checkpoint to resume on given data."""
    return {
        "n_samples": data.n_samples,
        "n_features": data.n_features,
        "dtype": str(data.dtype),
        "bounds": [int(b) for b in data.bounds],
        "weighted": data.weights is not None,
    }


def _is_local(url: str) -> bool:
    return "://" not in url


class Checkpointer:
    """Saves a checkpoint every ``every`` iterations into directory ``path``.

    ``meta`` (JSON-serialisable) is stored with every checkpoint: estimator
    kind and parameters, data fingerprint and location, seed, seeding figures.
    """

    def __init__(self, path: str | os.PathLike, every: int, meta: dict):
        if every < 1:
            raise CheckpointError(f"checkpoint_every must be a positive integer, got {every!r}")
        self.path = os.fspath(path).rstrip("/")
        self.every = int(every)
        self.meta = meta

    def due(self, iteration: int) -> bool:
        return iteration % self.every == 0

    def save(self, engine, state: LoopState, search: dict[str, np.ndarray]) -> str:
        """Write the checkpoint of ``state`` (workers write the chunk states); returns its URL."""
        name = f"{PREFIX}{state.iteration:06d}"
        final = f"{self.path}/{name}"
        target = f"{final}.tmp" if _is_local(self.path) else final
        if _is_local(self.path):
            os.makedirs(self.path, exist_ok=True)
            shutil.rmtree(target, ignore_errors=True)
        group = zarr.open_group(target, mode="w")
        group.create_array("centres", data=np.ascontiguousarray(state.centres))
        for key, value in search.items():
            group.create_array(f"search_{key}", data=np.ascontiguousarray(value))
        engine.save_state(target)
        group.attrs.update({
            "daskclust_checkpoint": FORMAT,
            "daskclust_version": __version__,
            "meta": json.dumps(self.meta),
            "iteration": state.iteration,
            "sigma2": state.sigma2,
            "prev_f": state.prev_f,
            "history": json.dumps(state.history),
            "search_keys": sorted(search),
        })
        group.attrs["complete"] = True  # last: a checkpoint without it is refused
        if _is_local(self.path):
            shutil.rmtree(final, ignore_errors=True)
            os.replace(target, final)
            self._prune()
        return final

    def _prune(self) -> None:
        complete = [c for c in list_checkpoints(self.path) if is_complete(f"{self.path}/{c}")]
        for name in complete[:-KEEP]:
            shutil.rmtree(f"{self.path}/{name}", ignore_errors=True)


def list_checkpoints(path: str) -> list[str]:
    """Names of the checkpoints in ``path``, oldest first (local directories only)."""
    if not os.path.isdir(path):
        return []
    return sorted(n for n in os.listdir(path) if n.startswith(PREFIX) and not n.endswith(".tmp"))


def is_complete(url: str) -> bool:
    try:
        return bool(zarr.open_group(url, mode="r").attrs.get("complete", False))
    except (FileNotFoundError, ValueError, KeyError):
        return False


def latest(path: str | os.PathLike) -> str:
    """URL of the checkpoint to resume from: ``path`` itself if it is one, else the newest
    complete checkpoint in the directory ``path`` (warning about newer incomplete ones)."""
    path = os.fspath(path).rstrip("/")
    if os.path.basename(path).startswith(PREFIX) or not _is_local(path):
        return path
    names = list_checkpoints(path)
    if not names:
        raise CheckpointError(f"no checkpoint in {path!r}")
    for name in reversed(names):
        url = f"{path}/{name}"
        if is_complete(url):
            return url
        warnings.warn(f"skipping checkpoint {url}: incomplete (interrupted while writing)", UserWarning,
                      stacklevel=2)
    raise CheckpointError(f"no complete checkpoint in {path!r}: every one was interrupted while writing")


def load(path: str | os.PathLike) -> Checkpoint:
    """Load a checkpoint (a directory of checkpoints resolves to its newest complete one).

    Raises
    ------
    CheckpointError
        Missing, not a checkpoint, incomplete (interrupted while writing), or of a newer format.
    """
    url = latest(path)
    try:
        group = zarr.open_group(url, mode="r")
    except (FileNotFoundError, ValueError) as exc:
        raise CheckpointError(f"{url!r} is not a daskclust checkpoint") from exc
    attrs = dict(group.attrs)
    if not attrs.get("complete"):
        if "centres" in group or url.endswith(".tmp"):
            raise CheckpointError(f"checkpoint {url!r} is incomplete: it was interrupted while writing; "
                                  "resume from the checkpoint directory to use the previous one")
        raise CheckpointError(f"{url!r} is not a daskclust checkpoint")
    if attrs.get("daskclust_checkpoint", 0) > FORMAT:
        raise CheckpointError(f"checkpoint {url!r} has format {attrs['daskclust_checkpoint']}, newer than this "
                              f"daskclust ({__version__}) reads")
    search = {key: group[f"search_{key}"][:] for key in attrs["search_keys"]}
    state = LoopState(int(attrs["iteration"]), group["centres"][:], float(attrs["sigma2"]), attrs["prev_f"],
                      json.loads(attrs["history"]))
    return Checkpoint(url, state, search, json.loads(attrs["meta"]))


def check_resumable(checkpoint: Checkpoint, kind: str, params: dict, fingerprint: dict) -> None:
    """Refuse to resume with another estimator, other parameters or other data."""
    meta = checkpoint.meta
    if meta["kind"] != kind:
        raise CheckpointError(f"checkpoint {checkpoint.url!r} is of a {meta['kind']}, not a {kind}")
    differing = sorted(k for k, v in params.items() if k in meta["params"] and meta["params"][k] != v
                       and k not in RUNTIME_PARAMS)
    if differing:
        listed = ", ".join(f"{k}={meta['params'][k]!r}" for k in differing)
        raise CheckpointError(f"checkpoint {checkpoint.url!r} was written with other parameters: {listed}")
    if meta["data"] != fingerprint:
        raise CheckpointError(f"checkpoint {checkpoint.url!r} was written for other data "
                              f"(shape, dtype, chunking or weights differ)")


RUNTIME_PARAMS = {"verbose", "callback", "scheduler_address", "memory_budget", "max_iter"}
"""Parameters that may change between a checkpoint and its resumption."""

"""Checkpoints of a running fit, written atomically, and resuming from them.

A checkpoint directory (``fit(..., checkpoint="run.zarr")``) is a zarr group
marked as a daskclust ``"checkpoints"`` store (see :mod:`daskclust.io`: a fit
only writes into a new directory, one it is resuming from, or, with
``overwrite=True``, replaces an older checkpoint directory; never anything
else). It holds one zarr group per saved iteration, ``ckpt-000012``, of which
the newest two complete ones are kept:

- attributes: the estimator's kind and model parameters (runtime settings such
  as the scheduler address are never stored), the data's fingerprint and
  location, the seed (the random streams are keyed by seed, iteration and
  chunk, so the iteration is the RNG position), the seeding's figures, the
  history, the loop position, and ``complete``, written last;
- arrays: the model's parameters (means, weights, covariances) and the search strategy's tables;
- ``chunks/NNNNNN/``: each chunk's per-row state (K(n)) and row order, written
  by the worker that holds the chunk (nothing of size N passes the driver).

A checkpoint is written under a ``.tmp`` name and renamed when complete (local
paths), so an interrupted write leaves no directory that looks complete; one
without the ``complete`` attribute is refused, and resuming takes the newest
complete one. Loading verifies that every array and every chunk's state is
present, so a damaged checkpoint is refused rather than resumed on zeros.
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from dataclasses import dataclass

import numpy as np
import zarr

from .em.loop import LoopState
from .errors import CheckpointError
from .io import ARRAY_CONFIG, Location, check_target, discard, mark, missing_chunks, remove_store, store_kind, swap_in
from .models import Params
from .versions import __version__

FORMAT = 2
"""Version of the layout; 2: the model's means, weights and covariances (format 1 held centres and sigma^2)."""
PARAM_ARRAYS = ("means", "weights", "covariances")
KEEP = 2
PREFIX = "ckpt-"

log = logging.getLogger("daskclust")


@dataclass
class Checkpoint:
    """A loaded checkpoint: loop position, search tables, metadata, and where its chunk states are."""

    url: str
    state: LoopState
    search: dict[str, np.ndarray]
    meta: dict


CONTENT = "content"
"""Key of the data's content fingerprint (:meth:`daskclust.engine.Engine.content_fingerprint`) in a
:func:`data_fingerprint`: added once the fit has read the data, before anything derived is saved."""


def data_fingerprint(data) -> dict:
    """What must match, before any work, for a checkpoint to resume on given data: shape, dtype,
    chunking, weights (the content is compared once the data are read, :func:`check_content`)."""
    return {
        "n_samples": data.n_samples,
        "n_features": data.n_features,
        "dtype": str(data.dtype),
        "bounds": [int(b) for b in data.bounds],
        "weighted": data.weights is not None,
    }


class Checkpointer:
    """Saves a checkpoint every ``every`` iterations into the checkpoint directory ``path``.

    ``meta`` (JSON-serialisable) is stored with every checkpoint: estimator
    kind and parameters, data fingerprint and location, seed, seeding figures.
    :meth:`prepare` checks and creates the directory before any work.
    """

    def __init__(self, path: str | os.PathLike | Location, every: int, meta: dict):
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
        self.meta = meta

    def prepare(self, *, overwrite: bool = False, resuming: Location | None = None, inputs=()) -> None:
        """Check the directory may be written (before any work) and create it, marked as ours.

        An existing checkpoint directory is continued when the fit resumes from
        it (or from a checkpoint inside it) and replaced with ``overwrite``, or
        when it holds no checkpoint (a fit that failed before its first one).
        """
        ours = store_kind(self.location) == "checkpoints"
        continuing = ours and resuming is not None and resuming.overlaps(self.location)
        empty = ours and not self.location.is_url and not list_checkpoints(self.path)
        check_target(self.location, "checkpoints", overwrite=overwrite or continuing or empty, inputs=inputs,
                     option="overwrite=True (--overwrite)", also=", or resume= (--resume) to continue from it")
        if self.location.exists() and not continuing:
            remove_store(self.location)
        zarr.open_group(self.location.url, mode="a", **self.location.zarr_kwargs)
        mark(self.location, "checkpoints", complete=False)

    def due(self, iteration: int) -> bool:
        return iteration % self.every == 0

    def save(self, engine, state: LoopState, search: dict[str, np.ndarray]) -> str:
        """Write the checkpoint of ``state`` (workers write the chunk states); returns its URL."""
        local = not self.location.is_url
        # numbered by the history rows so far: the iteration for a plain fit, and still increasing when the
        # loop restarts its count (each refinement round of a cell fit)
        final = f"{self.path}/{PREFIX}{len(state.history):06d}"
        target = f"{final}.tmp" if local else final
        if local:
            discard(target)
        self.meta["data"][CONTENT] = engine.content_fingerprint()
        group = zarr.open_group(target, mode="w", **self.location.zarr_kwargs)
        for name, value in state.params.arrays().items():
            group.create_array(name, data=np.array(value, order="C"), config=ARRAY_CONFIG)  # 0-d stays 0-d
        for key, value in search.items():
            group.create_array(f"search_{key}", data=np.ascontiguousarray(value), config=ARRAY_CONFIG)
        engine.save_state(target)
        group.attrs.update({
            "daskclust_checkpoint": FORMAT,
            "daskclust_version": __version__,
            "meta": json.dumps(self.meta),
            "iteration": state.iteration,
            "prev_f": state.prev_f,
            "history": json.dumps(state.history),
            "search_keys": sorted(search),
        })
        group.attrs["complete"] = True  # last: a checkpoint without it is refused
        if local:
            swap_in(target, final)
            self._prune()
        log.info("checkpoint of iteration %d written: %s", state.iteration, final)
        return final

    def _prune(self) -> None:
        complete = [c for c in list_checkpoints(self.path) if is_complete(f"{self.path}/{c}")]
        for name in complete[:-KEEP]:
            discard(f"{self.path}/{name}")


def list_checkpoints(path: str) -> list[str]:
    """Names of the checkpoints in ``path``, oldest first (local directories only)."""
    path = Location.parse(path).url if "://" not in os.fspath(path) else os.fspath(path)
    if not os.path.isdir(path):
        return []
    return sorted(n for n in os.listdir(path) if n.startswith(PREFIX) and not n.endswith(".tmp"))


def is_complete(url: str) -> bool:
    try:
        return bool(zarr.open_group(url, mode="r").attrs.get("complete", False))
    except Exception:  # noqa: BLE001 - unreadable or damaged: not a complete checkpoint
        return False


def latest(path: str | os.PathLike) -> str:
    """URL of the checkpoint to resume from: ``path`` itself if it is one, else the newest
    complete checkpoint in the directory ``path`` (warning about newer incomplete ones)."""
    path = Location.parse(path).url
    if os.path.basename(path).startswith(PREFIX) or "://" in path:
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
        Missing, not a checkpoint, incomplete (interrupted while writing),
        damaged (unreadable attributes, missing arrays, chunks or chunk states)
        or of a newer format.
    """
    url = latest(path)
    try:
        group = zarr.open_group(url, mode="r")
        attrs = dict(group.attrs)
    except Exception as exc:  # noqa: BLE001 - missing or unreadable: not a checkpoint
        raise CheckpointError(f"{url!r} is not a daskclust checkpoint ({type(exc).__name__}: {exc})") from exc
    if not attrs.get("complete"):
        if "means" in group or url.endswith(".tmp"):
            raise CheckpointError(f"checkpoint {url!r} is incomplete: it was interrupted while writing; "
                                  "resume from the checkpoint directory to use the previous one")
        raise CheckpointError(f"{url!r} is not a daskclust checkpoint")
    if attrs.get("daskclust_checkpoint") != FORMAT:
        raise CheckpointError(f"checkpoint {url!r} has format {attrs.get('daskclust_checkpoint')!r}, not one this "
                              f"daskclust ({__version__}) reads")
    try:
        meta = check_meta(json.loads(attrs["meta"]))
        _verify(group, url, len(meta["data"]["bounds"]) - 1)
        search = {key: group[f"search_{key}"][:] for key in attrs["search_keys"]}
        params = Params(**{name: group[name][...] for name in PARAM_ARRAYS})  # [...]: 0-d arrays too
        history = json.loads(attrs["history"])
        for row in history:
            row.setdefault("data", "full")  # a checkpoint written before history_ had the column
        iteration, prev_f = attrs["iteration"], attrs["prev_f"]
        if not _is_int(iteration) or not 0 <= iteration <= len(history):
            raise ValueError(f"its iteration {iteration!r} is not a count of its {len(history)} history rows")
        if prev_f is not None and not isinstance(prev_f, (int, float)):
            raise ValueError(f"its previous free energy {prev_f!r} is not a number")
        state = LoopState(iteration, params, prev_f, history)
    except Exception as exc:  # noqa: BLE001 - damaged attributes or arrays: one clear error
        raise CheckpointError(f"checkpoint {url!r} is damaged ({type(exc).__name__}: {exc})") from exc
    if not all(np.all(np.isfinite(value)) for value in state.params.arrays().values()):
        raise CheckpointError(f"checkpoint {url!r} is damaged: its parameters are not all finite")
    return Checkpoint(url, state, search, meta)


RUNTIME_PARAMS = ("scheduler_address", "security", "state_store", "tree_store", "memory_budget", "verbose", "callback")
"""Parameters saying where and how a fit runs, not what it fits: never saved with a model or a
checkpoint, never restored from one (a tampered store must not point a refit at another scheduler);
a checkpoint that records one was altered."""


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_meta(meta) -> dict:
    """The checkpoint's metadata, checked field by field (ValueError naming the first wrong one): what a
    resumed fit takes from it (estimator kind and parameters, data fingerprint and location, seed,
    seeding figures) is only used once every field has the type and range the writer gives it."""
    if not isinstance(meta, dict):
        raise ValueError(f"its metadata are a {type(meta).__name__}, not a mapping")
    missing = {"kind", "params", "data", "seed"} - set(meta)
    if missing:
        raise ValueError(f"its metadata lack {', '.join(sorted(missing))}")
    if not isinstance(meta["kind"], str):
        raise ValueError(f"its estimator kind {meta['kind']!r} is not a name")
    params = meta["params"]
    if not isinstance(params, dict) or not all(isinstance(k, str) for k in params):
        raise ValueError("its parameters are not a mapping of names")
    runtime = sorted(set(params) & set(RUNTIME_PARAMS))
    if runtime:
        raise ValueError(f"it records runtime settings ({', '.join(runtime)}), which are never written into a "
                         "checkpoint: it was altered")
    if not _is_int(meta["seed"]) or meta["seed"] < 0:
        raise ValueError(f"its seed {meta['seed']!r} is not a non-negative integer")
    data = meta["data"]
    if not isinstance(data, dict):
        raise ValueError("its data fingerprint is not a mapping")
    n, bounds = data.get("n_samples"), data.get("bounds")
    if not (_is_int(n) and n >= 1 and _is_int(data.get("n_features")) and data["n_features"] >= 1):
        raise ValueError("its data fingerprint's n_samples and n_features are not positive integers")
    if not (isinstance(bounds, list) and len(bounds) >= 2 and all(_is_int(b) for b in bounds)
            and bounds[0] == 0 and bounds[-1] == n and all(a < b for a, b in zip(bounds, bounds[1:]))):
        raise ValueError("its data fingerprint's chunk bounds do not split its rows")
    if data.get("dtype") not in ("float32", "float64") or not isinstance(data.get("weighted"), bool):
        raise ValueError("its data fingerprint's dtype or weights flag is not valid")
    if CONTENT in data and not isinstance(data[CONTENT], str):
        raise ValueError("its data's content fingerprint is not a string")
    for name in ("source", "weights"):
        where = meta.get(name)
        if where is not None and not (isinstance(where, dict) and isinstance(where.get("url"), str)
                                      and isinstance(where.get("array"), (str, type(None)))):
            raise ValueError(f"its {name} location {where!r} is not a url and array")
    seeding = meta.get("seeding")
    if seeding is not None and not (isinstance(seeding, dict) and isinstance(seeding.get("method"), str)
                                    and all(isinstance(seeding.get(k), (int, float)) and not isinstance(seeding.get(k), bool)
                                            for k in ("seconds", "n_distances"))):
        raise ValueError(f"its seeding figures {seeding!r} are not valid")
    return meta


def _verify(group: zarr.Group, url: str, n_chunks: int) -> None:
    """Raise unless every array of the checkpoint at ``url``, and each of the ``n_chunks`` chunk
    states (groups ``chunks/NNNNNN`` written by the shards), is whole."""
    names = list(PARAM_ARRAYS) + [f"search_{key}" for key in group.attrs["search_keys"]]
    arrays = [(name, group[name]) for name in names]
    for index in range(n_chunks):
        try:
            state = zarr.open_group(f"{url}/chunks/{index:06d}", mode="r")
        except FileNotFoundError as exc:
            raise ValueError(f"the state of chunk {index} is missing") from exc
        listed = state.attrs.get("arrays")  # written by the shard after its arrays
        if not isinstance(listed, list) or "__perm__" not in listed:
            raise ValueError(f"the state of chunk {index} is incomplete")
        for name in listed:
            try:
                arrays.append((f"chunks/{index:06d}/{name}", zarr.open_array(f"{url}/chunks/{index:06d}/{name}",
                                                                              mode="r")))
            except FileNotFoundError as exc:
                raise ValueError(f"array {name!r} of the state of chunk {index} is missing") from exc
    for name, array in arrays:
        missing = missing_chunks(array)
        if missing:
            raise ValueError(f"array {name!r} has {missing} missing chunk(s)")


def check_resumable(checkpoint: Checkpoint, kind: str, params: dict, fingerprint: dict) -> None:
    """Refuse to resume with another estimator, other parameters or other data."""
    meta = checkpoint.meta
    if meta["kind"] != kind:
        raise CheckpointError(f"checkpoint {checkpoint.url!r} is of a {meta['kind']}, not a {kind}")
    differing = sorted(k for k, v in params.items() if k in meta["params"] and meta["params"][k] != v
                       and k != "max_iter")
    if differing:
        listed = ", ".join(f"{k}={meta['params'][k]!r}" for k in differing)
        raise CheckpointError(f"checkpoint {checkpoint.url!r} was written with other parameters: {listed}")
    max_iter, n_init_esteps = params.get("max_iter"), params.get("n_init_esteps", 0)
    if _is_int(max_iter) and _is_int(n_init_esteps) and checkpoint.state.iteration > max_iter + n_init_esteps:
        raise CheckpointError(f"checkpoint {checkpoint.url!r} is at iteration {checkpoint.state.iteration}, beyond "
                              f"max_iter={max_iter}: pass a larger max_iter to continue it")
    recorded = {k: v for k, v in meta["data"].items() if k != CONTENT}
    if recorded != fingerprint:
        differing = sorted(k for k in set(recorded) | set(fingerprint) if recorded.get(k) != fingerprint.get(k))
        listed = "; ".join(f"{k}: checkpoint {recorded.get(k)!r}, data {fingerprint.get(k)!r}" for k in differing)
        raise CheckpointError(f"checkpoint {checkpoint.url!r} was written for other data ({listed})")
    if not isinstance(meta["data"].get(CONTENT), str):
        raise CheckpointError(f"checkpoint {checkpoint.url!r} records no content fingerprint of its data (written by "
                              "an older daskclust), so it cannot be checked against the data given: start a new fit")


def check_content(checkpoint: Checkpoint, engine, described: str) -> None:
    """Refuse to resume on data whose content differs from the data the checkpoint was written on
    (before any of its state is restored)."""
    recorded, found = checkpoint.meta["data"][CONTENT], engine.content_fingerprint()
    if recorded != found:
        raise CheckpointError(
            f"checkpoint {checkpoint.url!r} was written for other data: same shape, dtype and chunking, but its data's "
            f"content fingerprint is {recorded[:16]}... and that of {described} is {found[:16]}...; resume with the "
            "data it was written on, or start a new fit"
        )


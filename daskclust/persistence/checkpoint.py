"""Checkpoint directories: the layout of a running fit's checkpoints, their writing and their checks on read.

A checkpoint directory (``fit(..., checkpoint="run.zarr")``) is a zarr group marked as a daskclust
``"checkpoints"`` store (:mod:`daskclust.io`: a fit only writes into a new directory, one it is
resuming from, or, with ``overwrite=True``, replaces an older checkpoint directory; never anything
else). It holds one zarr group per saved iteration, ``ckpt-000012``, of which the newest
:data:`KEEP` complete ones are kept:

- attributes: ``daskclust_checkpoint`` (:data:`FORMAT`), the writer's version, ``meta`` (JSON:
  the estimator's kind and model parameters -- runtime settings never --, the data's fingerprint
  and location, the seed, the seeding's figures; checked field by field on read,
  :func:`check_meta`), the loop position (``iteration``, ``prev_f``), the ``history`` (JSON), the
  names of the search tables (``search_keys``) and ``complete``, written last;
- arrays: the model's parameters (:data:`PARAM_ARRAYS`) and the search tables (``search_<name>``);
- ``chunks/NNNNNN/``: each chunk's state and row order (:mod:`.chunk_states`), written by the
  worker that holds the chunk.

A checkpoint is written under a ``.tmp`` name and renamed when complete, so an interrupted write
leaves no directory that looks complete; one without ``complete`` is refused, and resuming takes
the newest complete one. Reading verifies every array and every chunk's state, so a damaged
checkpoint is refused rather than resumed on zeros. Checkpoints live on file systems every worker
mounts at the same path (their renames, listing and pruning are file-system operations).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import zarr

from ..errors import CheckpointError
from ..io import ARRAY_CONFIG, Location, check_target, discard, mark, missing_chunks, remove_store, store_kind, swap_in
from ..names import FINGERPRINT_CONTENT
from ..versions import __version__
from . import RUNTIME_PARAMS
from .chunk_states import verify_states

FORMAT = 2
"""Version of the layout; 2: the model's means, weights and covariances (format 1 held centres and sigma^2)."""
PARAM_ARRAYS = ("means", "weights", "covariances")
KEEP = 2
"""Complete checkpoints kept in a directory: the newest two."""
PREFIX = "ckpt-"


@dataclass
class StoredCheckpoint:
    """One checkpoint as stored: the model's parameter arrays (:data:`PARAM_ARRAYS`), the search
    tables, the loop position and history, and the metadata; ``url`` where it was read."""

    params: dict[str, np.ndarray]
    search: dict[str, np.ndarray]
    iteration: int
    prev_f: float | None
    history: list[dict]
    meta: dict
    url: str = ""


def prepare_directory(location: Location, *, overwrite: bool = False, resuming: Location | None = None,
                      inputs=()) -> None:
    """Check that the checkpoint directory at ``location`` may be written (before any work), then
    create it, marked as a checkpoint directory.

    An existing checkpoint directory is continued when the fit resumes from it (or from a checkpoint
    inside it) and replaced with ``overwrite``, or when it holds no checkpoint (a fit that failed
    before its first one).
    """
    ours = store_kind(location) == "checkpoints"
    continuing = ours and resuming is not None and resuming.overlaps(location)
    empty = ours and not location.is_url and not list_checkpoints(location.url)
    check_target(location, "checkpoints", overwrite=overwrite or continuing or empty, inputs=inputs,
                 option="overwrite=True (--overwrite)", also=", or resume= (--resume) to continue from it")
    if location.exists() and not continuing:
        remove_store(location)
    zarr.open_group(location.url, mode="a", **location.zarr_kwargs)
    mark(location, "checkpoints", complete=False)


def write_checkpoint(directory: Location, checkpoint: StoredCheckpoint,
                     write_chunk_states: Callable[[str], object]) -> str:
    """Write ``checkpoint`` into ``directory`` under a temporary name, have ``write_chunk_states(url)``
    write the chunk states into it (the workers), mark it complete, rename it in and prune the older
    ones; returns its URL. It is numbered by its history rows, which keep increasing when the loop
    restarts its count (each refinement round of a cell fit)."""
    final = f"{directory.url}/{PREFIX}{len(checkpoint.history):06d}"
    target = f"{final}.tmp"
    discard(target)
    group = zarr.open_group(target, mode="w")
    for name in PARAM_ARRAYS:
        group.create_array(name, data=np.array(checkpoint.params[name], order="C"), config=ARRAY_CONFIG)
    for key, value in checkpoint.search.items():
        group.create_array(f"search_{key}", data=np.ascontiguousarray(value), config=ARRAY_CONFIG)
    write_chunk_states(target)
    group.attrs.update({
        "daskclust_checkpoint": FORMAT,
        "daskclust_version": __version__,
        "meta": json.dumps(checkpoint.meta),
        "iteration": checkpoint.iteration,
        "prev_f": checkpoint.prev_f,
        "history": json.dumps(checkpoint.history),
        "search_keys": sorted(checkpoint.search),
    })
    group.attrs["complete"] = True  # last: a checkpoint without it is refused
    swap_in(target, final)
    complete = [name for name in list_checkpoints(directory.url) if is_complete(f"{directory.url}/{name}")]
    for name in complete[:-KEEP]:
        discard(f"{directory.url}/{name}")
    return final


def list_checkpoints(path: str | os.PathLike) -> list[str]:
    """Names of the checkpoints in the directory ``path``, oldest first."""
    path = Location.parse(path).url if "://" not in os.fspath(path) else os.fspath(path)
    if not os.path.isdir(path):
        return []
    return sorted(n for n in os.listdir(path) if n.startswith(PREFIX) and not n.endswith(".tmp"))


def is_complete(url: str) -> bool:
    """Whether the checkpoint at ``url`` was written to its end."""
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


def read_checkpoint(path: str | os.PathLike) -> StoredCheckpoint:
    """Read a checkpoint (a directory of checkpoints resolves to its newest complete one), checked.

    Raises
    ------
    CheckpointError
        Missing, not a checkpoint, incomplete (interrupted while writing), damaged (unreadable
        attributes, missing arrays, chunks or chunk states, non-finite parameters) or of another format.
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
        names = list(PARAM_ARRAYS) + [f"search_{key}" for key in attrs["search_keys"]]
        for name in names:
            missing = missing_chunks(group[name])
            if missing:
                raise ValueError(f"array {name!r} has {missing} missing chunk(s)")
        verify_states(url, len(meta["data"]["bounds"]) - 1)
        search = {key: group[f"search_{key}"][:] for key in attrs["search_keys"]}
        params = {name: group[name][...] for name in PARAM_ARRAYS}  # [...]: 0-d arrays too
        history = json.loads(attrs["history"])
        for row in history:
            row.setdefault("data", "full")  # a checkpoint written before history_ had the column
        iteration, prev_f = attrs["iteration"], attrs["prev_f"]
        if not _is_int(iteration) or not 0 <= iteration <= len(history):
            raise ValueError(f"its iteration {iteration!r} is not a count of its {len(history)} history rows")
        if prev_f is not None and not isinstance(prev_f, (int, float)):
            raise ValueError(f"its previous free energy {prev_f!r} is not a number")
    except Exception as exc:  # noqa: BLE001 - damaged attributes or arrays: one clear error
        raise CheckpointError(f"checkpoint {url!r} is damaged ({type(exc).__name__}: {exc})") from exc
    if not all(np.all(np.isfinite(value)) for value in params.values()):
        raise CheckpointError(f"checkpoint {url!r} is damaged: its parameters are not all finite")
    return StoredCheckpoint(params, search, iteration, prev_f, history, meta, url)


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
    if FINGERPRINT_CONTENT in data and not isinstance(data[FINGERPRINT_CONTENT], str):
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

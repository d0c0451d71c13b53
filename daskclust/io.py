"""Where daskclust reads and writes, and the rules every writer follows.

Locations
    A local path is made absolute on the driver: a worker started in another
    directory would otherwise resolve a relative path in its own working
    directory. An fsspec URL is kept as given, with its storage options.
Ownership
    Every store daskclust writes carries in its root ``zarr.json`` the attribute
    ``daskclust_store`` naming its kind (:data:`KINDS`) and, written last,
    ``daskclust_complete``. A writer only ever replaces a store of its own kind,
    and only with ``overwrite``; it refuses a target that is, contains or lies
    inside an input of the same call. Everything is checked before any work.
Atomic writes
    :func:`writing` gives the location to write to. Local: a temporary sibling
    ``<path>.tmp-<hex>``, renamed over the target when complete (the old store
    stays loadable until then) and removed on failure or interrupt. URL: the
    target itself (object stores cannot rename), after the old store's
    completion mark is removed, so a reader never takes a half-written store
    for a complete one.
Deletion
    Nothing is deleted by pattern. A URL output may not hold glob characters
    (``*``, ``?``, ``[``, ``]``): fsspec's ``rm`` and zarr's overwrite expand
    them, so ``memory://x[1].zarr`` would clear ``memory://x1.zarr``. What a
    writer removes at a URL is listed file by file (:func:`delete_tree`).
Worker visibility
    :func:`check_workers_see` asks every worker for the fingerprint of a store
    and refuses a store that a worker cannot read or sees differently (a local
    path that is not on a file system shared at the same place).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import shutil
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import zarr
from fsspec.core import url_to_fs

from .errors import InvalidParameterError, OutputRefusedError

KINDS = ("model", "labels", "distances", "scores", "checkpoints", "dataset", "state", "sketch", "trees")
"""Kinds of store daskclust writes (the value of the ``daskclust_store`` attribute)."""

GLOB_CHARACTERS = frozenset("*?[]")
"""Characters fsspec (and every object store client built on it) expands as a pattern."""

KIND_ATTR = "daskclust_store"
COMPLETE_ATTR = "daskclust_complete"

ARRAY_CONFIG = {"write_empty_chunks": True}
"""zarr array configuration of every array daskclust writes: all chunks are stored, even
those equal to the fill value, so that a missing chunk always means damage (readers check)."""

VISIBILITY_TIMEOUT = 120.0
"""Seconds the workers get to report what they see at a location (one small read each). A fresh
worker first imports daskclust to run the check: 45 s were seen on a 2-core machine at a load of 18,
where 30 s had failed fits that nothing was wrong with; a hung file system still fails the fit."""


@dataclass(frozen=True)
class Location:
    """A store location: an absolute local path, or an fsspec URL and its options."""

    url: str
    storage_options: dict | None = None

    @classmethod
    def parse(cls, path: str | os.PathLike | Location, storage_options: dict | None = None) -> Location:
        """Normalise ``path`` (absolute if local); ``storage_options`` only go with a URL. A ``file://``
        URL makes the directories it writes into, as an object store needs none (``auto_mkdir``)."""
        if isinstance(path, Location):
            return path
        if not isinstance(path, (str, os.PathLike)):
            raise InvalidParameterError(f"a store's location must be a path or URL (str or os.PathLike), got "
                                        f"{type(path).__name__} {path!r}")
        path = os.fspath(path)
        if "://" in path:
            check_protocol(path)
            options = dict(storage_options or {})
            if path.startswith("file://"):
                options.setdefault("auto_mkdir", True)
            return cls(path.rstrip("/"), options)
        if storage_options:
            raise InvalidParameterError(f"storage_options only apply to fsspec URLs, not to {path!r}")
        return cls(os.path.abspath(os.path.expanduser(path)), None)

    def __str__(self) -> str:
        return self.url

    @property
    def is_url(self) -> bool:
        return self.storage_options is not None

    @property
    def zarr_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for zarr / xarray (they reject storage_options for local paths)."""
        return {"storage_options": self.storage_options} if self.is_url else {}

    def filesystem(self):
        """``(fsspec filesystem, path inside it)``."""
        return url_to_fs(self.url, **(self.storage_options or {}))

    def exists(self, key: str = "") -> bool:
        """Whether the location (or the file ``key`` inside it) exists."""
        fs, root = self.filesystem()
        return fs.exists(f"{root}/{key}" if key else root)

    def child(self, name: str) -> Location:
        return Location(f"{self.url}/{name}", self.storage_options)

    def _identity(self) -> tuple[str, str]:
        """(protocol, normalised path) for comparing locations; local paths with symlinks resolved."""
        if not self.is_url:
            return "file", os.path.realpath(self.url)
        fs, root = self.filesystem()
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        return protocol, posixpath.normpath("/" + root.strip("/"))

    def overlaps(self, other: Location) -> bool:
        """Whether one of the two locations is the other or lies inside it."""
        (p1, a), (p2, b) = self._identity(), other._identity()
        if p1 != p2:
            return False
        a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
        return a.startswith(b) or b.startswith(a)


def check_protocol(url: str) -> None:
    """Refuse a URL whose fsspec protocol is unknown or whose package is not installed
    (InvalidParameterError with fsspec's advice, e.g. "install gcsfs"), before anything is opened."""
    import fsspec

    protocol = url.split("://", 1)[0].split("::")[-1]
    try:
        fsspec.get_filesystem_class(protocol)
    except (ImportError, ValueError) as exc:
        raise InvalidParameterError(f"cannot open {url}: {exc}") from None


def source_location(X: Any) -> Location | None:
    """Where the data ``X`` is stored, when it is a path / URL or a zarr array on a file system."""
    if isinstance(X, (str, os.PathLike)):
        return Location.parse(X)
    if isinstance(X, zarr.Array):
        base = store_root(X)
        if base is not None:
            return base.child(X.path) if X.path else base
    return None


def describe_source(X: Any) -> dict | None:
    """Where the data ``X`` live, as checkpoints and models record it (for ``daskclust fit --resume``):
    ``{"url", "array"}`` for a path or URL or a zarr array on a file system (local paths absolute),
    None for data in memory."""
    if isinstance(X, (str, os.PathLike)):
        return {"url": Location.parse(X).url, "array": None}
    if isinstance(X, zarr.Array):
        root = store_root(X)
        if root is not None:
            return {"url": root.url, "array": X.path or None}
    return None


def input_store(X: Any) -> Location | None:
    """The whole store the data ``X`` are read from: the path or URL given, or the root of a zarr
    array's store, widened to the outermost zarr group enclosing it (an array opened at its own path
    inside a group belongs to the group). What an output must not be, contain or lie inside: a store
    written into an input's group changes that group."""
    location = store_root(X) if isinstance(X, zarr.Array) else source_location(X)
    return None if location is None else enclosing_group(location)


def enclosing_group(location: Location) -> Location:
    """``location`` or the outermost zarr group above it (parents whose ``zarr.json`` is a group's)."""
    fs, root = location.filesystem()
    outer = location
    while True:
        parent = posixpath.dirname(root.rstrip("/"))
        if not parent or parent == root:
            return outer
        try:
            with fs.open(f"{parent}/zarr.json", "rb") as f:
                is_group = json.loads(f.read()).get("node_type") == "group"
        except (OSError, ValueError, AttributeError):
            return outer
        if not is_group:
            return outer
        root = parent
        protocol = location.url.split("://", 1)[0]
        outer = Location(f"{protocol}://{parent}" if location.is_url else parent, location.storage_options)


def input_stores(X: Any) -> list[Location]:
    """Every store the data ``X`` are read from, whatever form they came in: a path or URL, a zarr
    array, or the zarr arrays behind a dask array or an xarray DataArray (:func:`zarr_arrays_behind`).
    What no output of the same call may be, contain or lie inside."""
    found = [input_store(X)] if isinstance(X, (str, os.PathLike, zarr.Array)) else []
    found += [input_store(array) for array in zarr_arrays_behind(X)]
    unique: list[Location] = []
    for location in found:
        if location is not None and location not in unique:
            unique.append(location)
    return unique


WRAPPER_DEPTH = 8
"""How many ``.array`` / ``._array`` links :func:`zarr_arrays_behind` follows from a graph value (xarray
wraps a zarr array in 3-5 layers of lazy indexing adapters)."""


def zarr_arrays_behind(X: Any) -> list[zarr.Array]:
    """The zarr arrays a dask array (or an xarray DataArray, chunked or lazily indexed) reads from:
    the values of its task graph, and the arrays they wrap."""
    roots = []
    variable = getattr(X, "variable", None)
    if variable is not None:  # an xarray DataArray: its lazily indexed data, or the dask array over it
        roots.append(getattr(variable, "_data", None))
        X = getattr(X, "data", None)
    graph = getattr(X, "__dask_graph__", None)
    if callable(graph):
        roots += list(dict(graph()).values())
    arrays: list[zarr.Array] = []
    for root in roots:
        node = root
        for _ in range(WRAPPER_DEPTH):
            if isinstance(node, zarr.Array):
                if not any(node is a for a in arrays):
                    arrays.append(node)
                break
            node = getattr(node, "array", None) if hasattr(node, "array") else getattr(node, "_array", None)
            if node is None:
                break
    return arrays


def store_root(array: zarr.Array) -> Location | None:
    """The location of the store holding ``array`` (a local or fsspec store), or None (in memory)."""
    store = array.store
    if getattr(store, "root", None) is not None:  # LocalStore
        return Location.parse(os.fspath(store.root))
    if getattr(store, "fs", None) is not None:  # FsspecStore
        protocol = store.fs.protocol if isinstance(store.fs.protocol, str) else store.fs.protocol[0]
        return Location(f"{protocol}://{store.path.rstrip('/')}", dict(store.fs.storage_options))
    return None


# ---------------------------------------------------------------- ownership
def read_root_attrs(location: Location) -> dict | None:
    """Attributes in the root ``zarr.json`` at ``location``; None if there is none or it is unreadable."""
    fs, root = location.filesystem()
    try:
        with fs.open(f"{root}/zarr.json", "rb") as f:
            meta = json.loads(f.read())
    except (OSError, ValueError):
        return None
    attrs = meta.get("attributes") if isinstance(meta, dict) else None
    return attrs if isinstance(attrs, dict) else {}


def store_kind(location: Location) -> str | None:
    """The kind daskclust marked the store at ``location`` with, or None (not ours, or nothing there)."""
    attrs = read_root_attrs(location)
    if attrs is None:
        return None
    kind = attrs.get(KIND_ATTR)
    if kind is None and isinstance(attrs.get("daskclust_format"), int):
        return "model"  # models saved before the kind mark existed
    return kind if kind in KINDS else None


def missing_chunks(array: zarr.Array) -> int:
    """How many chunks of ``array`` are absent from its store (zarr would read them as its fill
    value). One listing of the store: every reader of data, models and checkpoints asks this."""
    return int(array.nchunks) - int(array.nchunks_initialized)


def is_complete(location: Location) -> bool:
    """Whether the store at ``location`` carries the completion mark (written last)."""
    attrs = read_root_attrs(location)
    return bool(attrs and attrs.get(COMPLETE_ATTR) is True)


def mark(location: Location, kind: str, *, complete: bool = True, extra: dict | None = None) -> None:
    """Write the kind (and completion) mark into the root of the store at ``location``."""
    node = zarr.open(store=location.url, mode="r+", **location.zarr_kwargs)
    node.attrs.update({KIND_ATTR: kind, **(extra or {}), **({COMPLETE_ATTR: True} if complete else {})})


def unmark_complete(location: Location) -> None:
    """Remove the completion mark of the store at ``location`` (before rewriting it in place)."""
    if read_root_attrs(location) is None:
        return
    node = zarr.open(store=location.url, mode="r+", **location.zarr_kwargs)
    node.attrs.pop(COMPLETE_ATTR, None)


_NAMES = {
    "model": "model", "labels": "labels", "distances": "distances", "scores": "scores",
    "checkpoints": "checkpoint directory",
    "dataset": "data set", "state": "state store", "sketch": "sketch", "trees": "tree store",
}


def check_target(location: Location, kind: str, *, overwrite: bool = False,
                 inputs: Iterable[Location | None] = (), option: str = "overwrite=True", also: str = "") -> None:
    """Refuse ``location`` as the output of kind ``kind`` unless writing there is safe.

    Raises :class:`OutputRefusedError` when the location is, contains or lies
    inside one of ``inputs``; when something exists there that daskclust did
    not write as a ``kind`` store; or when such a store exists and ``overwrite``
    is false (``option`` names the switch in the message, ``also`` follows it:
    ", or ... to ...").
    """
    assert kind in KINDS, kind
    check_no_pattern(location)
    refuse_overlap(location, kind, inputs)
    if not location.exists():
        return
    found = store_kind(location)
    if found != kind:
        what = f"a daskclust {_NAMES[found]}" if found else "not a store daskclust wrote"
        raise OutputRefusedError(
            f"refusing to write the {_NAMES[kind]} to {location}: something exists there ({what}); "
            f"daskclust only replaces its own {_NAMES[kind]} stores: choose another path"
        )
    if not overwrite:
        raise OutputRefusedError(
            f"a daskclust {_NAMES[kind]} exists at {location}; pass {option} to replace it{also}"
        )


def refuse_overlap(location: Location, kind: str, others: Iterable[Location | None], what: str = "the input") -> None:
    """Refuse ``location`` as the output of kind ``kind`` if it is, contains or lies inside one of
    ``others`` (``what``: the inputs, or another output, of the same call)."""
    for source in others:
        if source is not None and location.overlaps(source):
            raise OutputRefusedError(
                f"refusing to write the {_NAMES[kind]} to {location}: it overlaps {what} {source} "
                "(an output must not be, contain or lie inside an input or another output of the same call)"
            )


# ---------------------------------------------------------------- atomic writes
@contextlib.contextmanager
def writing(location: Location, kind: str, *, overwrite: bool = False,
            inputs: Iterable[Location | None] = (), option: str = "overwrite=True",
            checked: bool = False) -> Iterator[Location]:
    """Yield where to write a ``kind`` store that is to end up at ``location``; mark and swap it in after.

    The caller writes a zarr store (group or array) at the yielded location.
    ``checked`` says :func:`check_target` already ran (before the work whose
    result is written); it is otherwise run here.
    """
    if not checked:
        check_target(location, kind, overwrite=overwrite, inputs=inputs, option=option)
    check_no_pattern(location)
    if location.is_url:
        unmark_complete(location)
        try:
            yield location
            mark(location, kind)
        except BaseException:
            remove_partial(location)
            raise
        return
    tmp = temporary_sibling(location)
    try:
        yield tmp
        mark(tmp, kind)
        swap_in(tmp.url, location.url)
    finally:
        discard(tmp.url)


def temporary_sibling(location: Location) -> Location:
    """A fresh location beside ``location``, for a store written before it is swapped in."""
    os.makedirs(os.path.dirname(location.url) or ".", exist_ok=True)
    return Location(f"{location.url}.tmp-{uuid.uuid4().hex[:12]}", None)


def swap_in(src: str, dst: str) -> None:
    """Rename ``src`` to ``dst``; an existing ``dst`` is moved away first and restored on failure."""
    old = f"{dst}.old-{uuid.uuid4().hex[:12]}" if os.path.lexists(dst) else None
    if old is not None:
        os.rename(dst, old)
    try:
        os.rename(src, dst)
    except BaseException:
        if old is not None:
            os.rename(old, dst)
        raise
    if old is not None:
        discard(old)


def discard(path: str) -> None:
    """Delete the local directory or file ``path`` if it exists (best effort)."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.remove(path)


def remove_partial(location: Location) -> None:
    """Delete what this call wrote at a URL and could not complete (best effort)."""
    with contextlib.suppress(Exception):
        delete_tree(location)


def delete_tree(location: Location) -> None:
    """Delete the files under the URL ``location`` one by one, then its directories, deepest first.

    Never by pattern: ``find`` lists the tree without expanding glob characters, and each file
    goes through ``rm_file``, which does not expand them either (``rm`` does).
    """
    check_no_pattern(location)
    fs, root = location.filesystem()
    entries = fs.find(root, withdirs=True, detail=True)
    if fs.isfile(root):
        entries = {root: {"type": "file"}}
    for path, info in entries.items():
        if info.get("type") != "directory":
            fs.rm_file(path)
    for path in sorted((p for p, info in entries.items() if info.get("type") == "directory"), key=len, reverse=True):
        with contextlib.suppress(OSError):
            fs.rmdir(path)
    with contextlib.suppress(OSError):
        fs.rmdir(root)


def check_no_pattern(location: Location) -> None:
    """Refuse a URL output holding glob characters (see *Deletion* in the module docstring)."""
    if location.is_url and GLOB_CHARACTERS & set(location.url):
        found = "".join(sorted(GLOB_CHARACTERS & set(location.url)))
        raise OutputRefusedError(
            f"refusing to write to {location}: a URL output may not contain the glob characters {found!r} "
            "(fsspec and object stores expand them as patterns when they clear a target, which would delete "
            "other stores); choose a name without *, ?, [ or ]"
        )


def remove_store(location: Location) -> None:
    """Delete a store daskclust wrote (checked by kind first; anything else is left alone)."""
    if store_kind(location) is None:
        return
    if not location.is_url:
        discard(location.url)
        return
    with contextlib.suppress(FileNotFoundError):
        delete_tree(location)


# ---------------------------------------------------------------- worker visibility
def fingerprint(url: str, storage_options: dict | None = None) -> str:
    """A digest of what is at a store: its root ``zarr.json`` and, for local stores, the
    names and sizes of its files (so a different copy of the same shape differs).

    Runs on the driver and on every worker; raises OSError when there is no store.
    """
    location = Location(url, storage_options)
    fs, root = location.filesystem()
    digest = hashlib.sha256()
    with fs.open(f"{root}/zarr.json", "rb") as f:
        digest.update(f.read())
    if not location.is_url:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                digest.update(f"{os.path.relpath(path, root)}:{os.path.getsize(path)}\n".encode())
    return digest.hexdigest()


def _fingerprints_here(locations: list[tuple[str, dict | None]]) -> list[str]:
    """Run on a worker: the fingerprint of each location, or ``"error: ..."``."""
    out = []
    for url, options in locations:
        try:
            out.append(fingerprint(url, options))
        except Exception as exc:  # noqa: BLE001 - reported to the driver as what this worker sees
            out.append(f"error: {type(exc).__name__}: {exc}")
    return out


def check_workers_see(client, locations: list[Location], *, error=OutputRefusedError) -> None:
    """Refuse stores that some worker cannot read, or sees with another fingerprint than the driver.

    One small read per location and worker, bounded by :data:`VISIBILITY_TIMEOUT`.
    """
    if not locations:
        return
    pairs = [(loc.url, loc.storage_options) for loc in locations]
    expected = [fingerprint(url, options) for url, options in pairs]
    try:
        seen = client.sync(client._run, _fingerprints_here, pairs, on_error="return",
                           callback_timeout=VISIBILITY_TIMEOUT)
    except TimeoutError as exc:
        raise error(f"the workers did not report what they see at {', '.join(map(str, locations))} "
                    f"within {VISIBILITY_TIMEOUT:.0f} s") from exc
    for worker, answers in sorted(seen.items()):
        if isinstance(answers, BaseException):
            raise error(f"worker {worker} could not check the stores: {answers}")
        for location, want, got in zip(locations, expected, answers):
            if got != want:
                why = got.removeprefix("error: ") if got.startswith("error: ") else "a different store"
                raise error(
                    f"worker {worker} cannot see {location} as the driver does ({why}): every worker must "
                    "reach the same store, on a file system mounted at the same path on every machine "
                    "or at an fsspec URL (s3://, gs://, ...); see docs/guide/safety.md"
                )

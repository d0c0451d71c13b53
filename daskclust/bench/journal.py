"""A journal of finished rows, so that a suite of several hours survives an interruption.

A long suite (``realdata-mixtures``) appends each row's measurements to a JSON-lines file as soon
as the row is done. Run again, it takes back the rows of its journal that were measured by the same
code (a fingerprint of every source file of the package and the versions of the libraries that
compute the figures) with the same settings, and measures only the rest. A row measured by other
code is never reused; the file is only appended to, never rewritten or deleted.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

JOURNAL_ENV = "DASKCLUST_BENCH_JOURNAL"
LIBRARIES = ("numpy", "numba", "scikit-learn", "dask", "distributed")


def default_journal(suite: str) -> Path:
    """``$DASKCLUST_BENCH_JOURNAL/<suite>.jsonl``, else ``.daskclust-bench/<suite>.jsonl`` in the working directory."""
    return Path(os.environ.get(JOURNAL_ENV, ".daskclust-bench")) / f"{suite}.jsonl"


def code_fingerprint() -> str:
    """sha256 of every ``.py`` file of the package (path and content) and the libraries' versions."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    for name in LIBRARIES:
        try:
            digest.update(f"{name}={version(name)}".encode())
        except PackageNotFoundError:
            digest.update(f"{name}=absent".encode())
    return digest.hexdigest()


class Journal:
    """Rows of one suite, keyed by a tuple, valid for one code fingerprint and one settings dict."""

    def __init__(self, path: Path, settings: dict, fingerprint: str | None = None):
        self.path = Path(path)
        self.stamp = {"fingerprint": fingerprint or code_fingerprint(), "settings": settings}
        self.rows: dict[tuple, dict] = {}
        if self.path.is_file():
            for line in self.path.read_text().splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:  # a line cut short by the interruption itself
                    continue
                if isinstance(entry, dict) and {k: entry.get(k) for k in self.stamp} == self.stamp:
                    self.rows[tuple(entry["key"])] = entry["row"]

    def get(self, key: tuple) -> dict | None:
        """The row measured under ``key`` by this code with these settings, or None."""
        return self.rows.get(tuple(key))

    def add(self, key: tuple, row: dict) -> None:
        """Append one finished row (flushed at once: an interruption loses at most the row under way)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps({**self.stamp, "key": list(key), "row": row}) + "\n"
        with open(self.path, "ab+") as fh:
            if fh.tell() and (fh.seek(-1, os.SEEK_END), fh.read(1))[1] != b"\n":
                line = "\n" + line  # end the line an interruption cut short
            fh.write(line.encode())
        self.rows[tuple(key)] = row

"""Runs benchmark suites, prints their tables, appends JSON lines and refreshes the docs.

Each suite is a function ``suite(client) -> Table``; tables are written
between ``<!-- bench:NAME -->`` markers, under a header describing the machine
and the library versions of the run, in the page of docs/ that holds the
suite's markers (docs/scaling.md holds the costmodel suite's), else in
docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import platform
import re
import time
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path

SUITES = {
    "overhead": "daskclust.bench.overhead",
    "seeding": "daskclust.bench.seeding",
    "paper": "daskclust.bench.paper",
    "wallclock": "daskclust.bench.wallclock",
    "scaling": "daskclust.bench.scaling",
    "throughput": "daskclust.bench.throughput",
    "outofcore": "daskclust.bench.outofcore",
    "realdata": "daskclust.bench.realdata",
    "realdata-mixtures": "daskclust.bench.realmixtures",
    "mixtures": "daskclust.bench.mixtures",
    "transforms": "daskclust.bench.transforms",
    "cells": "daskclust.bench.cells",
    "stream": "daskclust.bench.stream",
    "reuse": "daskclust.bench.reuse",
    "costmodel": "daskclust.bench.costmodel",
}
"""Suite name -> module defining ``run(client) -> Table`` and ``COMMAND`` (how to reproduce it)."""


@dataclass
class Table:
    """A suite's results: a title, column names, rows (lists), notes printed under the table as
    a list and prose paragraphs after them (written by the suite from the same run's values)."""

    title: str
    columns: list[str]
    rows: list[list] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    prose: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        lines = [f"| {' | '.join(self.columns)} |", f"|{'|'.join('---' for _ in self.columns)}|"]
        lines += [f"| {' | '.join(_fmt(v) for v in row)} |" for row in self.rows]
        lines += [""] + [f"- {note}" for note in self.notes]
        for paragraph in self.prose:
            lines += ["", paragraph]
        return "\n".join(lines)

    def records(self) -> list[dict]:
        return [dict(zip(self.columns, row)) for row in self.rows]


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")


def machine() -> dict:
    import psutil

    from ..versions import package_versions

    libs = package_versions(("daskclust", "dask", "distributed", "numpy", "numba", "zarr", "scikit-learn", "faiss-cpu"))
    return {
        "cpu_count": os.cpu_count(),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "libraries": libs,
    }


def run(suites: list[str] | None, output: str, docs: str | Path | None = None) -> int:
    """Run the named suites (default: all), print, append JSON lines to ``output``, refresh the docs.

    ``docs`` is the benchmarks page (default docs/benchmarks.md); a suite whose markers are in
    another page of its folder is written there (:func:`page_for`).
    """
    from distributed import Client

    from ..engine.cluster import start_local_cluster

    names = suites or list(SUITES)
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        raise SystemExit(f"unknown suite(s) {unknown}; valid: {', '.join(SUITES)}")
    info = machine()
    docs_path = Path(docs) if docs else Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
    for name in names:
        module = import_module(SUITES[name])
        t0 = time.perf_counter()
        try:
            with start_local_cluster(**getattr(module, "CLUSTER", {})) as cluster, Client(cluster) as client:
                table = module.run(client)
        except ModuleNotFoundError as exc:  # the anchors are optional extras
            print(f"\nskipping suite {name!r}: {exc.name} is not installed (pip install 'daskclust[bench]')")
            continue
        seconds = time.perf_counter() - t0
        print(f"\n## {table.title}  ({seconds:.0f} s)\n")
        print(table.markdown())
        with open(output, "a") as fh:
            fh.writelines(json.dumps({"suite": name, "time": time.time(), "machine": info, **record}) + "\n" for record in table.records())
        if docs_path.parent.is_dir():
            update_docs(page_for(docs_path, name), name, table, module.COMMAND, info)
    return 0


def page_for(default: Path, name: str) -> Path:
    """The page of ``default``'s folder (or below it) that holds suite ``name``'s markers, else ``default``."""
    markers = (f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->")
    for page in [default, *sorted(default.parent.rglob("*.md"))]:
        if page.is_file() and all(marker in page.read_text() for marker in markers):
            return page
    return default


def update_docs(path: Path, name: str, table: Table, command: str, info: dict) -> None:
    """Replace the section of suite ``name`` in the benchmarks page (appending it if new)."""
    libs = ", ".join(f"{k} {v}" for k, v in info["libraries"].items())
    section = (
        f"<!-- bench:{name} -->\n### {table.title}\n\n"
        f"Command: `{command}` — {time.strftime('%Y-%m-%d')}, {info['cpu_count']} cores, {info['ram_gib']} GiB RAM, "
        f"Python {info['python']}; {libs}.\n\n{table.markdown()}\n<!-- /bench:{name} -->"
    )
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", re.DOTALL)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip() + "\n\n" + section + "\n"
    path.write_text(text)

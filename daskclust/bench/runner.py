"""Runs benchmark suites, prints a table, appends JSON lines and refreshes docs/benchmarks.md."""

from __future__ import annotations


def run(suites, output) -> int:
    raise SystemExit("no benchmark suites yet")

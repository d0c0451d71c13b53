"""``daskclust bench``: benchmark suites (filled in by the benchmark issues)."""

from __future__ import annotations


def add_bench_parser(sub) -> None:
    bench = sub.add_parser("bench", help="run benchmark suites and refresh docs/benchmarks.md")
    bench.add_argument("--suite", action="append", default=None, help="suite to run (repeatable)")
    bench.add_argument("--output", default="bench-results.jsonl")


def run_bench(args) -> int:
    from ..bench import run

    return run(args.suite, args.output)

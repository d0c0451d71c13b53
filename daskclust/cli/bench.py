"""``daskclust bench``: benchmark suites (filled in by the benchmark issues)."""

from __future__ import annotations


def add_bench_parser(sub) -> None:
    bench = sub.add_parser("bench", help="run benchmark suites and refresh docs/benchmarks.md")
    bench.add_argument("--suite", action="append", default=None, help="suite to run (repeatable)")
    bench.add_argument("--output", default="bench-results.jsonl")
    bench.add_argument("--data-dir", default=None,
                       help="the real data sets of the realdata suite (default: $DASKCLUST_DATA_DIR, else "
                            "../shared/data beside the repository)")


def run_bench(args) -> int:
    import os

    from ..bench import run
    from ..bench.realdata import DATA_ENV

    if args.data_dir:
        os.environ[DATA_ENV] = os.path.abspath(args.data_dir)
    return run(args.suite, args.output)

"""Argument parsing and the sub-commands of ``daskclust``."""

from __future__ import annotations

import argparse
import gc
import signal
import sys

from ..display import command_logging
from ..errors import DaskclustError
from .arguments import add_cluster_arguments, add_data_arguments, add_output_arguments

FIT_HELP = "fit a model on a zarr store and save it"


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``daskclust`` and its sub-commands. ``daskclust fit``'s options are generated
    from the estimators, which import scikit-learn (1.6 s of CPU): given another ``command``, the one
    to be parsed, its sub-parser is left without them."""
    parser = argparse.ArgumentParser(prog="daskclust", description=__doc__)
    parser.add_argument("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                        help="daskclust's messages shown on stderr, from this level up (default INFO; ERROR with "
                        "a command's --quiet)")
    sub = parser.add_subparsers(dest="command", required=True)

    make = sub.add_parser("make-data", help="write a synthetic data set to a zarr store")
    make.add_argument("kind", choices=("birch", "blobs"))
    make.add_argument("--clusters", type=int, default=100, help="number of true clusters (birch: a square)")
    make.add_argument("--samples", type=int, default=200_000, help="blobs: number of rows")
    make.add_argument("--features", type=int, default=64, help="blobs: number of features")
    make.add_argument("--points-per-cluster", type=int, default=100, help="birch: rows per cluster")
    make.add_argument("--separation", type=float, default=None,
                      help="blobs: mean nearest-centre distance in noise std (default: scikit-learn's box)")
    make.add_argument("--seed", type=int, default=0)
    add_output_arguments(make, "data set")

    if command in (None, "fit"):
        from .fit import add_fit_parser

        add_fit_parser(sub, FIT_HELP)
    else:
        sub.add_parser("fit", help=FIT_HELP)

    predict = sub.add_parser("predict", help="write the label of every row to a zarr store")
    predict.add_argument("model", metavar="MODEL", help="a daskclust model store: path or fsspec URL")
    add_data_arguments(predict)
    add_output_arguments(predict, "labels")
    add_cluster_arguments(predict)

    from .info import add_info_parser

    add_info_parser(sub)

    demo = sub.add_parser("demo", help="generate BIRCH data, fit it on a LocalCluster, report")
    demo.add_argument("--clusters", type=int, default=400)
    demo.add_argument("--plot", default="daskclust-demo.png", help="where to write the convergence plot (PNG), "
                      "with the fit's report beside it (<stem>.html, <stem>-<figure>.png); '' for none")
    demo.add_argument("--seed", type=int, default=0)

    from .bench import add_bench_parser
    from .report import add_report_parser

    add_bench_parser(sub)
    add_report_parser(sub)
    return parser


def _terminate(signum, frame):
    """SIGTERM ends the command like Ctrl-C: cleanup code runs, no temporary store stays."""
    raise KeyboardInterrupt(f"signal {signum}")


def console() -> int:
    """The ``daskclust`` command: :func:`main` on the process's arguments, then an exit that skips the
    interpreter's last garbage collections over every object of the imported libraries (``gc.freeze``;
    reference counting still frees them, atexit handlers still run): they took 0.7-0.8 s after every
    command on this 2-core machine."""
    code = main()
    gc.freeze()
    return code


def named_command(argv: list[str]) -> str | None:
    """The sub-command ``argv`` runs when only ``--log-level`` precedes it, else None."""
    rest = list(argv)
    while rest and rest[0].startswith("--log-level"):
        rest = rest[1:] if "=" in rest[0] else rest[2:]
    return rest[0] if rest and rest[0] in COMMANDS else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(named_command(argv)).parse_args(argv)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)
    try:
        level = args.log_level or ("ERROR" if getattr(args, "quiet", False) else "INFO")
        with command_logging(level):
            return COMMANDS[args.command](args)
    except (DaskclustError, FileExistsError, FileNotFoundError) as exc:
        print(f"daskclust {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"daskclust {args.command}: interrupted; nothing is left half-written (what was complete before, "
              "such as checkpoints, is kept)", file=sys.stderr)
        return 130


def cmd_make_data(args) -> int:
    from ..datasets import make_birch, make_blobs
    from ..io import Location, check_target

    check_target(Location.parse(args.output), "dataset", overwrite=args.overwrite, option="--overwrite")
    if args.kind == "birch":
        group = make_birch(args.output, args.clusters, points_per_cluster=args.points_per_cluster,
                           seed=args.seed, overwrite=args.overwrite)
    else:
        group = make_blobs(args.output, args.samples, args.features, args.clusters, seed=args.seed,
                           separation=args.separation, overwrite=args.overwrite)
    X = group["X"]
    if not args.quiet:
        print(f"wrote {args.output}: X {X.shape} {X.dtype}, chunks {X.chunks}, {args.clusters} true clusters")
    return 0


def cmd_fit(args) -> int:
    from .fit import run_fit

    return run_fit(args)


def cmd_predict(args) -> int:
    from .. import load
    from ..data import open_zarr_array
    from ..engine.cluster import connect, security_from_files
    from ..io import Location, check_target

    model = load(args.model).set_params(verbose=0 if args.quiet else 1)  # a bar of the spans written
    data = open_zarr_array(args.data, args.array)
    inputs = [Location.parse(args.model), Location.parse(args.data)]
    check_target(Location.parse(args.output), "labels", overwrite=args.overwrite, inputs=inputs, option="--overwrite")
    with connect(None, args.scheduler, security=security_from_files(args.tls_ca_file, args.tls_cert, args.tls_key)):
        labels = model.predict(data, output=args.output, overwrite=args.overwrite, inputs=inputs)
    if not args.quiet:
        print(f"wrote {labels.shape[0]} labels to {args.output}")
    return 0


def cmd_info(args) -> int:
    from .info import run_info

    return run_info(args)


def cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(args.clusters, args.plot, args.seed)


def cmd_bench(args) -> int:
    from .bench import run_bench

    return run_bench(args)


def cmd_report(args) -> int:
    from .report import run_report

    return run_report(args)


COMMANDS = {
    "make-data": cmd_make_data,
    "fit": cmd_fit,
    "predict": cmd_predict,
    "info": cmd_info,
    "demo": cmd_demo,
    "bench": cmd_bench,
    "report": cmd_report,
}

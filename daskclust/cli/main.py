"""Argument parsing and the sub-commands of ``daskclust``."""

from __future__ import annotations

import argparse
import json
import signal
import sys

from ..display import command_logging
from ..errors import DaskclustError, InvalidParameterError

ALGORITHMS = {"kmeans": "KMeans", "gmm": "GaussianMixture"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="daskclust", description=__doc__)
    parser.add_argument("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"), default="INFO",
                        help="daskclust's messages shown on stderr, from this level up (default INFO)")
    sub = parser.add_subparsers(dest="command", required=True)

    make = sub.add_parser("make-data", help="write a synthetic data set to a zarr store")
    make.add_argument("kind", choices=("birch", "blobs"))
    make.add_argument("--output", required=True, help="zarr store path or fsspec URL to write")
    make.add_argument("--clusters", type=int, default=100, help="number of true clusters (birch: a square)")
    make.add_argument("--samples", type=int, default=200_000, help="blobs: number of rows")
    make.add_argument("--features", type=int, default=64, help="blobs: number of features")
    make.add_argument("--points-per-cluster", type=int, default=100, help="birch: rows per cluster")
    make.add_argument("--separation", type=float, default=None,
                      help="blobs: mean nearest-centre distance in noise std (default: scikit-learn's box)")
    make.add_argument("--seed", type=int, default=0)
    make.add_argument("--overwrite", action="store_true")

    fit = sub.add_parser("fit", help="fit a model on a zarr store and save it")
    fit.add_argument("data", nargs="?", help="zarr store path or fsspec URL (with --resume: default the "
                     "checkpoint's data)")
    fit.add_argument("--array", default=None, help="array inside the zarr group (default: X)")
    fit.add_argument("--clusters", type=int, default=None, help="number of clusters C")
    fit.add_argument("--algorithm", choices=sorted(ALGORITHMS), default="kmeans")
    fit.add_argument("--covariance-type", choices=("diag", "spherical", "full", "isotropic"), default=None,
                     help="gmm: the mixture family (default diag)")
    fit.add_argument("--init", default="k-means||")
    fit.add_argument("--max-iter", type=int, default=None)
    fit.add_argument("--tol", type=float, default=1e-5)
    fit.add_argument("--seed", type=int, default=0)
    fit.add_argument("--chunk-rows", type=int, default=None)
    fit.add_argument("--memory-budget", type=int, default=None, help="bytes of cluster memory for the data")
    fit.add_argument("--coreset", type=int, default=None, metavar="M",
                     help="fit on a lightweight coreset of M weighted rows, then evaluate on the full data")
    fit.add_argument("--refine-iter", type=int, default=0, metavar="K",
                     help="with --coreset: at most K iterations on the full data from the coreset's model")
    add_cluster_arguments(fit)
    fit.add_argument("--output", required=True, help="where to save the model (zarr); never replaces anything "
                     "but a daskclust model, and that only with --overwrite")
    fit.add_argument("--overwrite", action="store_true",
                     help="replace an existing daskclust model at --output and an earlier fit's --checkpoint")
    fit.add_argument("--quiet", action="store_true", help="no progress display")
    fit.add_argument("--checkpoint", default=None, help="directory for checkpoints of the running fit")
    fit.add_argument("--checkpoint-every", type=int, default=10, help="iterations between checkpoints")
    fit.add_argument("--resume", default=None, help="continue from this checkpoint (or checkpoint directory), "
                     "with its parameters and data")
    fit.add_argument("--state", choices=("memory", "zarr"), default="memory",
                     help="keep the per-row state K(n) in worker memory or in a zarr store")

    predict = sub.add_parser("predict", help="write the label of every row to a zarr store")
    predict.add_argument("model")
    predict.add_argument("data")
    predict.add_argument("--array", default=None)
    add_cluster_arguments(predict)
    predict.add_argument("--output", required=True, help="labels store (zarr); never replaces anything but "
                         "daskclust labels, and those only with --overwrite")
    predict.add_argument("--overwrite", action="store_true", help="replace existing daskclust labels at --output")
    predict.add_argument("--quiet", action="store_true", help="no progress bar")

    info = sub.add_parser("info", help="describe a saved model")
    info.add_argument("model")
    info.add_argument("--json", action="store_true", help="machine-readable output")

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


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """Where to run: a scheduler address, and TLS files for a secured cluster."""
    parser.add_argument("--scheduler", default=None, help="address of a Dask scheduler, e.g. tls://host:8786 "
                        "(default: a LocalCluster on 127.0.0.1)")
    parser.add_argument("--tls-ca-file", default=None, help="CA certificate of a TLS-secured cluster")
    parser.add_argument("--tls-cert", default=None, help="client certificate (TLS)")
    parser.add_argument("--tls-key", default=None, help="client private key (TLS), if not in --tls-cert")


def cluster_security(args):
    """The ``distributed.security.Security`` given by the TLS arguments, or None (dask's config)."""
    from ..engine.cluster import security_from_files

    return security_from_files(args.tls_ca_file, args.tls_cert, args.tls_key)


def _terminate(signum, frame):
    """SIGTERM ends the command like Ctrl-C: cleanup code runs, no temporary store stays."""
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)
    try:
        with command_logging(args.log_level):
            return COMMANDS[args.command](args)
    except (DaskclustError, FileExistsError, FileNotFoundError) as exc:
        print(f"daskclust {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"daskclust {args.command}: interrupted; nothing was written", file=sys.stderr)
        return 130


def cmd_make_data(args) -> int:
    from ..datasets import make_birch, make_blobs

    if args.kind == "birch":
        group = make_birch(args.output, args.clusters, points_per_cluster=args.points_per_cluster,
                           seed=args.seed, overwrite=args.overwrite)
    else:
        group = make_blobs(args.output, args.samples, args.features, args.clusters, seed=args.seed,
                           separation=args.separation, overwrite=args.overwrite)
    X = group["X"]
    print(f"wrote {args.output}: X {X.shape} {X.dtype}, chunks {X.chunks}, {args.clusters} true clusters")
    return 0


def make_estimator(kind: str, n_clusters: int | None = None, **params):
    """An estimator of class ``kind`` ("KMeans" / "GaussianMixture") with these parameters."""
    from .. import GaussianMixture, KMeans

    cls = {"KMeans": KMeans, "GaussianMixture": GaussianMixture}[kind]
    if n_clusters is not None:
        params[{"KMeans": "n_clusters", "GaussianMixture": "n_components"}[kind]] = n_clusters
    return cls(**params)


def cmd_fit(args) -> int:
    from ..checkpoint import load as load_checkpoint
    from ..data import open_zarr_array
    from ..io import Location
    from ..store import check_model_target

    runtime = dict(verbose=0 if args.quiet else 1, scheduler_address=args.scheduler, security=cluster_security(args))
    if args.resume:
        meta = load_checkpoint(args.resume).meta
        model = make_estimator(meta["kind"], **{**meta["params"], **runtime})
        source = meta.get("source") or {}
        url, array = (args.data, args.array) if args.data else (source.get("url"), source.get("array"))
        if url is None:
            raise InvalidParameterError("the checkpoint does not record where its data is: pass DATA")
    else:
        if args.data is None or args.clusters is None:
            raise InvalidParameterError("fit needs DATA and --clusters (or --resume CHECKPOINT)")
        params = dict(init=args.init, tol=args.tol, random_state=args.seed, chunk_rows=args.chunk_rows,
                      memory_budget=args.memory_budget, state=args.state, coreset=args.coreset,
                      refine_iter=args.refine_iter, **runtime)
        if args.max_iter is not None:
            params["max_iter"] = args.max_iter
        if args.covariance_type is not None:
            if args.algorithm != "gmm":
                raise InvalidParameterError("--covariance-type needs --algorithm gmm")
            params["covariance_type"] = args.covariance_type
        model = make_estimator(ALGORITHMS[args.algorithm], n_clusters=args.clusters, **params)
        url, array = args.data, args.array
    inputs = [Location.parse(p) for p in (url, args.checkpoint, args.resume) if p]
    check_model_target(args.output, overwrite=args.overwrite, inputs=inputs, option="--overwrite")
    model.fit(open_zarr_array(url, array), checkpoint=args.checkpoint, checkpoint_every=args.checkpoint_every,
              resume=args.resume, overwrite=args.overwrite)
    model.save(args.output, overwrite=args.overwrite)
    print(f"saved {type(model).__name__} with {model.centres_.shape[0]} clusters to {args.output}")
    return 0


def cmd_predict(args) -> int:
    from .. import load
    from ..data import open_zarr_array
    from ..engine.cluster import connect
    from ..io import Location

    model = load(args.model).set_params(verbose=0 if args.quiet else 1)  # a bar of the spans written
    data = open_zarr_array(args.data, args.array)
    with connect(None, args.scheduler, security=cluster_security(args)):
        labels = model.predict(data, output=args.output, overwrite=args.overwrite,
                               inputs=[Location.parse(args.model), Location.parse(args.data)])
    print(f"wrote {labels.shape[0]} labels to {args.output}")
    return 0


def cmd_info(args) -> int:
    from .. import load

    model = load(args.model)
    last = model.history_[-1] if model.history_ else {}
    summary = {
        "kind": type(model).__name__,
        "n_clusters": int(model.centres_.shape[0]),
        "n_features": int(model.centres_.shape[1]),
        "n_iter": int(model.n_iter_),
        "converged": bool(model.converged_),
        "free_energy": last.get("free_energy"),
        "quantization_error": last.get("quantization_error"),
        "sigma2": float(model.sigma2_),
        "fit_time_s": float(model.fit_time_),
        "seeding_time_s": float(model.seeding_time_),
        "coreset": model.coreset_,  # size, seconds, n_distances, total_weight of a coreset fit's construction
        "params": {k: v for k, v in model.get_params().items() if not callable(v)},
    }
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
        return 0
    for key, value in summary.items():
        if key != "params":
            print(f"{key:>20}: {value}")
    print(f"{'params':>20}: {summary['params']}")
    return 0


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

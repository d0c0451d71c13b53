"""``daskclust report``: a saved model's report, as an HTML page and PNG figures beside it."""

from __future__ import annotations

from .arguments import add_array_argument, add_quiet_argument


def add_report_parser(sub) -> None:
    """Register ``daskclust report`` on the sub-command parsers ``sub``."""
    from ..report import DEFAULT_SAMPLE

    report = sub.add_parser("report", help="write a model's report: convergence, distance evaluations, cluster "
                            "sizes, the centres over the data (HTML + PNGs)")
    report.add_argument("model", metavar="MODEL", help="a daskclust model store: path or fsspec URL")
    report.add_argument("--data", default=None, help="zarr store path or fsspec URL of data to draw the centres "
                        "over (default: the centres alone)")
    add_array_argument(report, "--data")
    report.add_argument("--output", required=True, help="the report's page (.html); the PNGs are written beside it "
                        "as <stem>-<figure>.png, directories made as needed")
    report.add_argument("--sample", type=int, default=None,
                        help=f"rows of --data drawn for the view and its PCA (default {DEFAULT_SAMPLE})")
    report.add_argument("--overwrite", action="store_true", help="replace the files of an earlier report")
    add_quiet_argument(report)


def run_report(args) -> int:
    """Load the model, write its report, list the files written."""
    from .. import load
    from ..data import open_zarr_array
    from ..errors import InvalidParameterError
    from ..report import DEFAULT_SAMPLE, write_report

    unused = [flag for flag, value in (("--array", args.array), ("--sample", args.sample)) if value is not None]
    if unused and args.data is None:
        raise InvalidParameterError(f"{unused[0]} is about the rows of --data: give --data")
    model = load(args.model)
    data = open_zarr_array(args.data, args.array) if args.data is not None else None
    sample = DEFAULT_SAMPLE if args.sample is None else args.sample
    paths = write_report(model, args.output, data=data, sample=sample, overwrite=args.overwrite,
                         inputs=[args.model])  # and the store holding --data (write_report)
    if not args.quiet:
        print(f"wrote {paths['html']} and {', '.join(str(p) for name, p in paths.items() if name != 'html')}")
    return 0

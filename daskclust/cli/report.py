"""``daskclust report``: a saved model's report, as an HTML page and PNG figures beside it."""

from __future__ import annotations


def add_report_parser(sub) -> None:
    """Register ``daskclust report`` on the sub-command parsers ``sub``."""
    from ..report import DEFAULT_SAMPLE

    report = sub.add_parser("report", help="write a model's report: convergence, distance evaluations, cluster "
                            "sizes, the centres over the data (HTML + PNGs)")
    report.add_argument("model", help="a saved model (zarr)")
    report.add_argument("--data", default=None, help="zarr store path or fsspec URL of data to draw the centres "
                        "over (default: the centres alone)")
    report.add_argument("--array", default=None, help="array inside the --data zarr group (default: X)")
    report.add_argument("--output", required=True, help="the report's page (.html); the PNGs are written beside it "
                        "as <stem>-<figure>.png")
    report.add_argument("--sample", type=int, default=DEFAULT_SAMPLE,
                        help="rows of --data drawn for the view and its PCA (default %(default)s)")
    report.add_argument("--overwrite", action="store_true", help="replace the files of an earlier report")
    report.add_argument("--quiet", action="store_true", help="print nothing but errors")


def run_report(args) -> int:
    """Load the model, write its report, list the files written."""
    from .. import load
    from ..data import open_zarr_array
    from ..report import write_report

    model = load(args.model)
    data = open_zarr_array(args.data, args.array) if args.data is not None else None
    paths = write_report(model, args.output, data=data, sample=args.sample, overwrite=args.overwrite,
                         inputs=[args.model])
    if not args.quiet:
        print(f"wrote {paths['html']} and {', '.join(str(p) for name, p in paths.items() if name != 'html')}")
    return 0

"""Arguments several sub-commands share, with the same names and help everywhere."""

from __future__ import annotations

import argparse


def add_data_arguments(parser: argparse.ArgumentParser, *, optional: bool = False, also: str = "") -> None:
    """The data read: the positional DATA (a zarr store path or fsspec URL) and ``--array``."""
    parser.add_argument("data", metavar="DATA", nargs="?" if optional else None,
                        help=f"the data: a zarr store path or fsspec URL{also}")
    add_array_argument(parser, "DATA")


def add_array_argument(parser: argparse.ArgumentParser, data: str) -> None:
    """``--array``: which array of the zarr group given as ``data`` (an argument's name) to read."""
    parser.add_argument("--array", metavar="NAME", help=f"the array inside {data}'s zarr group (default: X, or its "
                        "only 2-D array)")


def add_output_arguments(parser: argparse.ArgumentParser, kind: str, *, required: bool = True,
                         also: str = "") -> None:
    """Where a command writes, whether it may replace what it wrote before, and ``--quiet``."""
    parser.add_argument("--output", metavar="PATH", required=required,
                        help=f"where to write the {kind}: a zarr store path or fsspec URL; never replaces anything "
                             f"but a daskclust {kind}, and that only with --overwrite")
    parser.add_argument("--overwrite", action="store_true",
                        help=f"replace the daskclust {kind} at --output{also}")
    add_quiet_argument(parser)


def add_quiet_argument(parser: argparse.ArgumentParser) -> None:
    """``--quiet``: only errors (no bars, no messages below ERROR unless ``--log-level`` says otherwise)."""
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """Where to run: a scheduler address, and TLS files for a secured cluster."""
    parser.add_argument("--scheduler", metavar="ADDRESS", help="address of a Dask scheduler, e.g. tls://host:8786 "
                        "(default: a LocalCluster on 127.0.0.1)")
    parser.add_argument("--tls-ca-file", metavar="PATH", help="CA certificate of a TLS-secured cluster")
    parser.add_argument("--tls-cert", metavar="PATH", help="client certificate (TLS)")
    parser.add_argument("--tls-key", metavar="PATH", help="client private key (TLS), if not in --tls-cert")


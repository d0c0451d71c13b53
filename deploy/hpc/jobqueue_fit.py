#!/usr/bin/env python
"""Fit a daskclust model on a SLURM or PBS cluster with dask-jobqueue, then describe it.

The Dask scheduler runs in this process (on the login node) and every batch job runs one Dask
worker with --cores threads and --memory. Once the workers have joined, the fit runs here with
daskclust's command line, the same command as the other recipes' (the "job" service of
deploy/docker/compose.yaml), and `daskclust info` describes the model.

The cluster uses TLS with temporary certificates: an HPC network is shared with every user of
the machine, and a Dask scheduler runs any code a client sends it. The workers read their
certificate from --shared-dir, which must be on a file system the compute nodes see (as the data
and the model must be).

Example:

    python deploy/hpc/jobqueue_fit.py slurm /scratch/$USER/birch.zarr --clusters 36 \\
        --output /scratch/$USER/model.zarr --jobs 4 --cores 8 --memory 32GB --walltime 01:00:00

The system `local` runs the jobs as processes of this machine (dask-jobqueue's LocalCluster),
to try the recipe without a queue.
"""

from __future__ import annotations

import argparse
import contextlib
import operator
import os
import shlex
import sys
import tempfile
from pathlib import Path

SYSTEMS = {"slurm": "SLURMCluster", "pbs": "PBSCluster", "local": "local.LocalCluster"}
"""The dask-jobqueue cluster class of each ``system`` argument (a name in the package)."""


def build_parser() -> argparse.ArgumentParser:
    """The script's arguments: where the data and model are, and what each batch job asks for."""
    parser = argparse.ArgumentParser(prog="jobqueue_fit.py", description=__doc__.split("\n\n")[0],
                                     epilog="See deploy/hpc/README.md.")
    parser.add_argument("system", choices=sorted(SYSTEMS), help="the batch system (local: processes here)")
    parser.add_argument("data", help="the data's zarr store, on a file system the compute nodes see")
    parser.add_argument("--clusters", type=int, required=True, help="number of clusters C")
    parser.add_argument("--output", required=True, help="where to save the model (zarr)")
    parser.add_argument("--jobs", type=int, default=2, help="batch jobs, one worker each (default 2)")
    parser.add_argument("--cores", type=int, default=8, help="cores of each job: its worker's threads (default 8)")
    parser.add_argument("--memory", default="32GB", help="memory of each job: its worker's limit (default 32GB)")
    parser.add_argument("--walltime", default="01:00:00", help="walltime of each job (default 01:00:00)")
    parser.add_argument("--queue", default=None, help="queue / partition of the jobs")
    parser.add_argument("--account", default=None, help="account charged for the jobs")
    parser.add_argument("--interface", default=None,
                        help="network interface of the scheduler and the workers, e.g. ib0 (default: the host's)")
    parser.add_argument("--dashboard-address", default="127.0.0.1:8787",
                        help="where the dashboard listens (default 127.0.0.1:8787: reach it with ssh -L)")
    parser.add_argument("--shared-dir", default=".",
                        help="directory seen by the compute nodes for the workers' TLS files (default: here)")
    parser.add_argument("--prologue", action="append", default=[], metavar="LINE",
                        help="shell line each job runs before its worker, e.g. 'source ~/venv/bin/activate' "
                        "(repeatable)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the job script and the fit command; submit no job")
    return parser


def fit_argv(data: str, clusters: int, output: str, scheduler: str) -> list[str]:
    """The ``daskclust fit`` arguments of the recipes (the compose file's job), for these paths."""
    return ["fit", data, "--clusters", str(clusters), "--scheduler", scheduler, "--output", output,
            "--seed", "0", "--overwrite"]


def info_argv(output: str) -> list[str]:
    """The ``daskclust info`` arguments of the recipes (the compose file's info service)."""
    return ["info", output]


def make_cluster(args: argparse.Namespace):
    """The dask-jobqueue cluster of ``args.system``, TLS-secured; no job is submitted yet.

    Raises
    ------
    SystemExit
        If dask-jobqueue is not installed.
    """
    try:
        import dask_jobqueue
        import dask_jobqueue.local
    except ImportError:
        raise SystemExit("jobqueue_fit.py: error: dask-jobqueue is not installed here: "
                         "pip install dask-jobqueue (and cryptography, for the TLS certificates)") from None
    options = {key: value for key, value in (("queue", args.queue), ("account", args.account)) if value}
    cls = operator.attrgetter(SYSTEMS[args.system])(dask_jobqueue)
    return cls(cores=args.cores, memory=args.memory, processes=1, walltime=args.walltime,
               interface=args.interface, job_script_prologue=args.prologue, security=True,
               shared_temp_directory=os.path.abspath(args.shared_dir),
               scheduler_options={"dashboard_address": args.dashboard_address}, **options)


@contextlib.contextmanager
def client_tls_files(security):
    """Write the client's certificate, key and CA of ``security`` to a private temporary directory;
    yield the ``--tls-*`` options of daskclust's command line that name them."""
    with tempfile.TemporaryDirectory(prefix="daskclust-tls-") as tmp:
        options = []
        for option, pem in (("--tls-ca-file", security.tls_ca_file), ("--tls-cert", security.tls_client_cert),
                            ("--tls-key", security.tls_client_key)):
            path = Path(tmp) / f"{option[2:]}.pem"
            path.touch(mode=0o600)
            path.write_text(pem)
            options += [option, str(path)]
        yield options


def main(argv: list[str] | None = None) -> int:
    """Start the cluster, submit the jobs, wait for their workers, fit and describe the model."""
    args = build_parser().parse_args(argv)
    from distributed import Client

    from daskclust.cli import main as daskclust

    with make_cluster(args) as cluster:
        fit = fit_argv(args.data, args.clusters, args.output, cluster.scheduler_address)
        print(f"scheduler {cluster.scheduler_address}, dashboard {cluster.dashboard_link}", flush=True)
        if args.dry_run:
            print(cluster.job_script())
            print("daskclust " + shlex.join(fit))
            return 0
        cluster.scale(jobs=args.jobs)
        print(f"submitted {args.jobs} jobs; waiting for their workers", flush=True)
        with Client(cluster) as client:
            client.wait_for_workers(args.jobs)  # as long as the jobs wait in the queue (Ctrl-C cancels them)
        with client_tls_files(cluster.security) as tls:
            code = daskclust(fit + tls)
        return code or daskclust(info_argv(args.output))


if __name__ == "__main__":
    sys.exit(main())

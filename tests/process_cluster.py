"""A real ``dask scheduler`` and ``dask worker`` processes on 127.0.0.1, for tests that need a
cluster made of separate processes (as a deployment runs it) rather than a ``LocalCluster``.

The scheduler listens on port 0 and reports its address through its scheduler file, so two
clusters never race for a port; the workers' ports are chosen by the system too. Teardown stops
the workers first (a worker whose scheduler is gone waits for it before it gives up), then the
scheduler: SIGTERM, then SIGKILL for whatever of each process tree (nannies and the worker
processes they started) is still running after the grace period.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from distributed import Client

START_TIMEOUT = 60.0
"""Seconds for the scheduler to write its file and for every worker to join it."""

STOP_GRACE = 15.0
"""Seconds a process tree has to exit after SIGTERM before it is killed."""

SCHEDULER_ARGS = ("--port", "0", "--dashboard-address", "127.0.0.1:0")
WORKER_ARGS = ("--nthreads", "1", "--no-dashboard")


@dataclass
class ProcessCluster:
    """A running scheduler and its workers.

    Attributes
    ----------
    address : str
        The scheduler's address, e.g. ``tcp://127.0.0.1:40123``.
    scheduler_file : pathlib.Path
        The JSON file the scheduler wrote (address, dashboard port).
    directory : pathlib.Path
        Where the processes run and write their logs (``scheduler.log``, ``worker-<i>.log``).
    processes : list of subprocess.Popen
        The scheduler first, then the ``dask worker`` processes.
    """

    address: str
    scheduler_file: Path
    directory: Path
    processes: list[subprocess.Popen] = field(default_factory=list)

    def dashboard_port(self) -> int:
        """The port of the scheduler's dashboard (its HTTP server: ``/health``, ``/status``)."""
        return int(json.loads(self.scheduler_file.read_text())["services"]["dashboard"])

    def tree(self) -> list[psutil.Process]:
        """Every process still running that this cluster started, with their descendants."""
        found = []
        for proc in self.processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                top = psutil.Process(proc.pid)
                found += [top, *top.children(recursive=True)]
        return found


@contextlib.contextmanager
def process_cluster(directory: Path, *, processes: int = 2, workers_per_process: int = 1,
                    scheduler_args=SCHEDULER_ARGS, worker_args=WORKER_ARGS, env: dict | None = None):
    """Start ``dask scheduler`` and ``processes`` ``dask worker`` processes; yield a :class:`ProcessCluster`.

    Parameters
    ----------
    directory : pathlib.Path
        Working directory of every process, and where the scheduler file and the logs go.
    processes : int, default 2
        How many ``dask worker`` commands to start (as replicas of a worker service would be).
    workers_per_process : int, default 1
        Workers each command starts (its ``--nworkers``): the cluster is ready when
        ``processes * workers_per_process`` workers have joined.
    scheduler_args : sequence of str
        Options after ``dask scheduler``; ``--host 127.0.0.1`` and ``--scheduler-file`` are added.
        Keep the port and the dashboard at 0 (the default does).
    worker_args : sequence of str
        Options after ``dask worker ADDRESS``; ``--host 127.0.0.1`` is added.
    env : dict, optional
        The processes' environment (default: this process's).

    Raises
    ------
    RuntimeError
        If the scheduler exits or writes no address, or the workers do not all join, within
        ``START_TIMEOUT`` seconds; the message holds the end of the logs.
    """
    directory = Path(directory)
    scheduler_file = directory / "scheduler.json"
    scheduler_file.unlink(missing_ok=True)
    cluster = ProcessCluster(address="", scheduler_file=scheduler_file, directory=directory)
    try:
        _spawn(cluster, "scheduler", ["scheduler", *scheduler_args, "--host", "127.0.0.1",
                                      "--scheduler-file", str(scheduler_file)], env)
        cluster.address = _scheduler_address(cluster)
        for i in range(processes):
            _spawn(cluster, f"worker-{i}", ["worker", cluster.address, *worker_args, "--host", "127.0.0.1"], env)
        expected = processes * workers_per_process
        with Client(cluster.address, timeout=START_TIMEOUT, set_as_default=False) as client:
            try:
                client.wait_for_workers(expected, timeout=START_TIMEOUT)
            except TimeoutError:
                raise RuntimeError(f"{expected} workers did not join within {START_TIMEOUT:g} s\n"
                                   f"{_logs(cluster)}") from None
        yield cluster
    finally:
        stop(cluster.processes[1:])  # the workers first
        stop(cluster.processes[:1])


def still_running(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``processes`` that are running (zombies waiting for their parent do not count)."""
    running = []
    for proc in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                running.append(proc)
    return running


def stop(processes: list[subprocess.Popen]) -> None:
    """SIGTERM ``processes``; SIGKILL what is left of their process trees after ``STOP_GRACE`` s."""
    tree = []
    for proc in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            top = psutil.Process(proc.pid)
            tree += [top, *top.children(recursive=True)]
    for proc in processes:
        if proc.poll() is None:
            proc.terminate()
    _, left = psutil.wait_procs(tree, timeout=STOP_GRACE)
    for proc in left:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(left, timeout=STOP_GRACE)
    for proc in processes:
        proc.wait(STOP_GRACE)  # reaped already, or now


def _spawn(cluster: ProcessCluster, name: str, args: list[str], env: dict | None) -> None:
    with open(cluster.directory / f"{name}.log", "wb") as log:
        cluster.processes.append(subprocess.Popen([sys.executable, "-m", "dask", *args], cwd=cluster.directory,
                                                  env=env, stdout=log, stderr=subprocess.STDOUT))


def _scheduler_address(cluster: ProcessCluster) -> str:
    """The address in the scheduler file, read once the scheduler has written all of it."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if cluster.processes[0].poll() is not None:
            raise RuntimeError(f"the scheduler exited with code {cluster.processes[0].returncode}\n"
                               f"{_logs(cluster)}")
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError, KeyError):
            return json.loads(cluster.scheduler_file.read_text())["address"]
        time.sleep(0.1)
    raise RuntimeError(f"the scheduler wrote no address within {START_TIMEOUT:g} s\n{_logs(cluster)}")


def _logs(cluster: ProcessCluster, lines: int = 20) -> str:
    """The last ``lines`` lines of every process's log."""
    tails = []
    for log in sorted(cluster.directory.glob("*.log")):
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        tails.append(f"--- {log.name}\n" + "\n".join(tail))
    return "\n".join(tails)

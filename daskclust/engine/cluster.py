"""Which Dask cluster a fit runs on.

Order of preference: an explicit ``client``; else a ``scheduler_address``; else
the active client; else an embedded ``LocalCluster`` that is closed afterwards.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

from distributed import Client, LocalCluster

log = logging.getLogger("daskclust")


def active_client() -> Client | None:
    """The client the caller has made current, if any."""
    try:
        from distributed import default_client

        return default_client()
    except ValueError:
        return None


def start_local_cluster(**kwargs) -> LocalCluster:
    """An embedded ``LocalCluster`` with Dask's defaults for this machine.

    The dashboard goes on a free port (``:0``) so that a busy 8787 is no error.
    """
    options = dict(dashboard_address=":0", processes=True)
    options.update(kwargs)
    return LocalCluster(**options)


@contextlib.contextmanager
def connect(
    client: Client | None = None,
    scheduler_address: str | None = None,
    *,
    announce: Callable[[str], None] | None = None,
    cluster_kwargs: dict | None = None,
) -> Iterator[Client]:
    """Yield the client to run on, closing what this function started.

    ``announce`` receives one line with the dashboard link when a cluster is started here.
    """
    if client is not None:
        yield client
        return
    if scheduler_address:
        with Client(scheduler_address) as own:
            yield own
        return
    current = active_client()
    if current is not None:
        yield current
        return
    cluster = start_local_cluster(**(cluster_kwargs or {}))
    try:
        with Client(cluster, set_as_default=False) as own:
            if announce is not None:
                n = len(cluster.workers)
                announce(f"started a LocalCluster with {n} worker(s); dashboard: {own.dashboard_link}")
            yield own
    finally:
        cluster.close()

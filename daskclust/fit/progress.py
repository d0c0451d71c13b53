"""Progress of a fit: its messages (logged), a line per iteration when ``verbose``, the ``callback`` hook.

The bars of long passes are the engine's (:mod:`daskclust.engine.events`), shown when the
estimator's ``verbose`` is set.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable

from tqdm import tqdm

log = logging.getLogger("daskclust")


class Progress:
    """Reports a fit's progress and passes each history row to ``callback``.

    Messages (seeding time, cluster start, restarts, the summary) go to the ``daskclust`` logger
    at INFO; a verbose fit (``verbose >= 1``) also prints them when logging would not show them
    and nobody configured that logger (the command line gives it a handler and a level).
    A verbose fit prints one line per iteration: iteration, quantization error (k-means' inertia,
    as scikit-learn's KMeans prints it), free energy,
    distance evaluations per second, data throughput, elapsed time and an upper bound of the
    remaining time (``max_iter`` iterations at the recent pace; the fit usually converges sooner),
    every ``interval``-th iteration (scikit-learn's GaussianMixture's ``verbose_interval``).
    Nothing is printed when ``verbose`` is 0.
    """

    def __init__(self, verbose: int, callback: Callable[[dict], object] | None, nbytes: int,
                 max_rows: int, stream=None, interval: int = 1):
        self.verbose = verbose
        self.interval = interval
        self.callback = callback
        self.nbytes = nbytes
        self.max_rows = max_rows
        self.stream = stream if stream is not None else sys.stdout
        self.t0 = time.perf_counter()
        self.iter_seconds: list[float] = []

    def phase(self, nbytes: int, max_rows: int) -> None:
        """A new phase of the fit (a coreset fit's coreset, then the full data): its data's bytes,
        its most iterations; the pace starts anew."""
        self.nbytes, self.max_rows, self.iter_seconds = nbytes, max_rows, []

    def say(self, message: str) -> None:
        """Log ``message`` (INFO); print it too if the fit is verbose, logging does not show INFO and
        the ``daskclust`` logger has no handler of its own."""
        log.info(message)
        if self.verbose and not log.isEnabledFor(logging.INFO) and not log.handlers:
            self._print(message)

    def _print(self, line: str) -> None:
        tqdm.write(line, file=self.stream)  # above a progress bar being drawn, if any
        self.stream.flush()

    def row(self, row: dict) -> None:
        """One iteration done: ``callback`` gets the row, a verbose fit prints its line."""
        if self.callback is not None:
            self.callback(dict(row))
        if not self.verbose:
            return
        seconds = max(row["seconds"], 1e-9)
        self.iter_seconds.append(seconds)
        if row["iteration"] % self.interval:
            return
        left = max(0, self.max_rows - row["iteration"] - 1)
        recent = self.iter_seconds[-5:]
        self._print(
            f"Iteration {row['iteration']}, inertia {row['quantization_error']:.6e}, free energy "
            f"{row['free_energy']: .6e}  {row['n_distances'] / seconds:9.3e} dist/s  {self.nbytes / seconds / 1e6:8.1f} MB/s  "
            f"elapsed {time.perf_counter() - self.t0:7.2f} s  remaining <= {left * sum(recent) / len(recent):7.1f} s"
        )

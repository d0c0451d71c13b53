"""What daskclust shows while it works: tqdm progress bars of long passes, and the command line's
log handler, which prints around the bars.

Library messages go through ``logging.getLogger("daskclust")`` (INFO: what a fit is doing, DEBUG:
details); the library installs no handler: an API call shows them where the application configured
logging, and a verbose fit prints its own when logging would not show them
(:class:`daskclust.fit.progress.Progress`). The command line shows them on stderr
(:func:`command_logging`). Bars are shown only when asked for (an estimator's or transform's
``verbose``, the command line), on stderr.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

from tqdm import tqdm

log = logging.getLogger("daskclust")


def progress_bar(name: str, total: int, unit: str = "chunk", leave: bool = False) -> tqdm:
    """A bar ``name`` of ``total`` ``unit``s on stderr (erased when closed unless ``leave``)."""
    return tqdm(total=total, desc=name, unit=unit, leave=leave, file=sys.stderr, dynamic_ncols=True,
                mininterval=0.2)


@contextlib.contextmanager
def optional_bar(show: bool, name: str, total: int, unit: str = "chunk", leave: bool = False) -> Iterator[tqdm | None]:
    """:func:`progress_bar` while the block runs if ``show``, else None; closed after."""
    if not show:
        yield None
        return
    with progress_bar(name, total, unit, leave) as bar:
        yield bar


class BarSafeHandler(logging.Handler):
    """Writes records to stderr above any progress bar being drawn (``tqdm.write``)."""

    def emit(self, record: logging.LogRecord) -> None:
        """Write the formatted record on its own line."""
        try:
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001 - logging's contract: a failing handler reports, never raises
            self.handleError(record)


@contextlib.contextmanager
def command_logging(level: str) -> Iterator[None]:
    """While a command runs: daskclust's messages of ``level`` and above on stderr, as
    ``daskclust: <message>``; the logger's previous level is restored after."""
    handler = BarSafeHandler()
    handler.setFormatter(logging.Formatter("daskclust: %(message)s"))
    before = log.level
    log.setLevel(level)
    log.addHandler(handler)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(before)

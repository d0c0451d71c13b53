"""Chunk-completion events from the shards to the driver, which advance a pass's progress bar.

A pass runs inside the shard actors, on the workers' threads, while the driver waits for the root's
result: the driver cannot see chunks finish. When a pass shows progress, the engine sends a
:class:`ChunkEvents` with the operation; each shard then logs one event per chunk done through its
worker's batched stream to the scheduler (``Worker.log_event``, a few bytes, no round trip), and the
scheduler forwards it to the driver's client, subscribed to :data:`TOPIC`
(``Client.subscribe_topic``), where the :class:`ChunkListener` of the engine advances the bar.
A pass that shows no progress sends nothing (no ``ChunkEvents``, no event).

Events can arrive after the pass's result (they take the scheduler's way): the listener closes
the bar, complete, when the pass returns and ignores the late events of closed passes.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from ..display import progress_bar

TOPIC = "daskclust-chunks"
"""The scheduler's event topic of chunk completions (one for all engines: events name their engine)."""

_listeners: dict[str, ChunkListener] = {}
_subscribed: dict[str, int] = {}  # client id -> listeners subscribed through it
_lock = threading.Lock()


@dataclass(frozen=True)
class ChunkEvents:
    """Sent with a pass that shows progress: which engine and pass its chunk events belong to."""

    token: str
    pass_id: int

    def sender(self) -> Callable[[], None]:
        """A function logging one chunk event on this worker (bound to it here, on the actor's
        thread, so that the shard's pool threads can call it)."""
        from distributed import get_worker

        worker, message = get_worker(), [self.token, self.pass_id]
        return lambda: worker.log_event(TOPIC, message)


def _dispatch(event) -> None:
    """The client's handler of :data:`TOPIC`: ``event`` is ``(time, [token, pass_id])``."""
    token, pass_id = event[1]
    listener = _listeners.get(token)
    if listener is not None:
        listener.chunk_done(pass_id)


class ChunkListener:
    """The driver's end for one engine: opens a bar per pass that shows progress and advances it with
    the chunk events of that pass (:meth:`close` ends the listener)."""

    def __init__(self, client):
        self.client = client
        self.token = uuid.uuid4().hex
        self._pass = 0
        self._bar = None
        self._bar_lock = threading.Lock()  # events arrive on the client's event loop thread
        with _lock:
            _listeners[self.token] = self
            if _subscribed.get(client.id, 0) == 0:
                client.subscribe_topic(TOPIC, _dispatch)
            _subscribed[client.id] = _subscribed.get(client.id, 0) + 1

    def open(self, name: str, total: int) -> ChunkEvents:
        """Show a bar ``name`` of ``total`` chunks for the next pass; the events to send with it."""
        with self._bar_lock:
            self._pass += 1
            self._bar = progress_bar(name, total)
            return ChunkEvents(self.token, self._pass)

    def chunk_done(self, pass_id: int) -> None:
        """A chunk of pass ``pass_id`` is done (ignored once that pass has ended)."""
        with self._bar_lock:
            if self._bar is not None and pass_id == self._pass:
                self._bar.update(1)

    def end_pass(self, complete: bool) -> None:
        """The pass ended: its bar is closed, shown complete first if the pass returned (``complete``)."""
        with self._bar_lock:
            bar, self._bar = self._bar, None
        if bar is not None:
            if complete:
                bar.update(bar.total - bar.n)
                bar.refresh()
            bar.close()

    def close(self) -> None:
        """Stop listening (unsubscribing the client when no other engine of it listens)."""
        self.end_pass(complete=False)
        with _lock:
            _listeners.pop(self.token, None)
            _subscribed[self.client.id] -= 1
            if _subscribed[self.client.id] == 0:
                del _subscribed[self.client.id]
                try:
                    self.client.unsubscribe_topic(TOPIC)
                except Exception:  # noqa: BLE001 - teardown: a closed client has no subscription left
                    pass

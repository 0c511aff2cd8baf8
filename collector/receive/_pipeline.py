"""The ingest pipeline: a bounded queue in front of the store's single span writer thread.

Requests wait until their own batch's spans are durable before they are answered; batches that
arrive while the writer is busy are written together. On a store with staging (the collector's),
durable means forced to the staging log; a mover thread stores the staged batches in DuckDB in one
INSERT about once a second, or at once when a query waits for them, while the writer goes on
staging (so no export waits for a DuckDB insert). When the queue is full a request is refused at
once (the receivers answer 503/UNAVAILABLE), never queued without bound. The mover also stores the
staged rows once their Arrow bytes reach ``move_bytes``: DuckDB holds the rows of one INSERT in its
memory while it commits them, so large spans are stored in INSERTs that fit in its memory limit. A
coalesced group stops at ``move_bytes`` too.

At shutdown the writer stages what is queued for requests still waiting (a request the receivers
gave up on is dropped: it was never acknowledged), then stores what is staged: one INSERT, bounded
by ``move_bytes`` or a row group. If that fails, the staging log keeps the rows for the next start.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from dataclasses import dataclass

import pyarrow as pa

from meritlens.collector.receive._report import NO_HEALTH, IngestHealth
from meritlens.collector.store._sink import SpanSink

log = logging.getLogger("meritlens.collector.pipeline")

_STOP = object()


class Overloaded(RuntimeError):
    """The write queue is full; the client should retry later."""


@dataclass
class _Pending:
    table: pa.Table
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


class IngestPipeline:
    """Serializes span writes to a span sink, coalescing batches that arrive while a write is
    running; a mover thread stores staged batches meanwhile. Each durable write's time is reported
    to ``health``."""

    def __init__(self, store: SpanSink, *, max_pending_batches: int = 64, max_coalesced_rows: int = 50_000,
                 move_bytes: int | None = None, health: IngestHealth = NO_HEALTH):
        self._store = store
        self._health = health
        self._move_bytes = move_bytes
        self._staged_bytes = 0
        """Arrow bytes this pipeline staged that no move has taken yet (writer and mover: ``_bytes_lock``)."""
        self._bytes_lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue(maxsize=max_pending_batches)
        self._max_coalesced_rows = max_coalesced_rows
        self._thread: threading.Thread | None = None
        self._mover: threading.Thread | None = None
        self._mover_wake = threading.Event()
        self._mover_stop = threading.Event()
        # a query waiting for staged rows wakes the mover; it takes no slot of the export queue
        store.on_move_demand = self._mover_wake.set

    def start(self) -> None:
        self._mover_stop.clear()
        self._mover = threading.Thread(target=self._run_mover, name="meritlens-mover", daemon=True)
        self._mover.start()
        self._thread = threading.Thread(target=self._run, name="meritlens-writer", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Stage what is queued for requests still waiting, store what is staged, then stop both threads."""
        if self._thread is None:
            return
        self._queue.put(_STOP)
        self._thread.join()  # the writer stops the mover, then moves what is left itself
        self._thread = None

    async def submit(self, table: pa.Table) -> None:
        """Queue a batch and wait until it is durable; raise Overloaded when the queue is full."""
        loop = asyncio.get_running_loop()
        pending = _Pending(table, loop.create_future(), loop)
        try:
            self._queue.put_nowait(pending)
        except queue.Full:
            raise Overloaded("the collector's write queue is full") from None
        return await pending.future

    def _run(self) -> None:
        stopping = False
        while not stopping:
            item = self._queue.get()
            group, rows, nbytes = [], 0, 0
            while True:
                if item is _STOP:
                    stopping = True
                else:
                    group.append(item)
                    rows += item.table.num_rows
                    nbytes += item.table.nbytes
                # the staging log serializes a group whole: a copy of its bytes
                if stopping or rows >= self._max_coalesced_rows or nbytes >= (self._move_bytes or nbytes + 1):
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if group:
                self._write(group)
                self._mover_wake.set()  # it times the next move from the staged rows
        self._mover_stop.set()
        self._mover_wake.set()
        if self._mover is not None:
            self._mover.join()
            self._mover = None
        self._move()

    def _run_mover(self) -> None:
        while True:
            self._mover_wake.wait(self._store.move_due())  # None: nothing staged, sleep until woken
            self._mover_wake.clear()
            if self._mover_stop.is_set():
                return
            if self._store.move_due() == 0.0 or (self._move_bytes is not None
                                                 and self._staged_bytes >= self._move_bytes):
                self._move()

    def _write(self, group: list[_Pending]) -> None:
        group = [p for p in group if not p.future.done()]  # done before its write: the request was cancelled
        if not group:
            return
        started = time.perf_counter()
        try:
            table = pa.concat_tables([p.table for p in group]) if len(group) > 1 else group[0].table
            self._store.stage(table)
            with self._bytes_lock:
                self._staged_bytes += table.nbytes
        except BaseException as exc:  # noqa: BLE001 - every waiter must hear about it
            log.exception("writing a batch of %d requests failed", len(group))
            for p in group:
                p.loop.call_soon_threadsafe(_set_exception, p.future, exc)
            return
        finally:
            self._health.wrote(time.perf_counter() - started)
        log.debug("%d rows from %d requests are durable", table.num_rows, len(group))
        for p in group:
            p.loop.call_soon_threadsafe(_set_result, p.future, None)

    def _move(self) -> None:
        taken = self._staged_bytes
        try:
            self._store.move_staged()
        except Exception:  # noqa: BLE001 - they stay staged (durable); the store retries a second later
            log.exception("storing the staged spans in DuckDB failed; they stay in the staging log")
            return
        with self._bytes_lock:
            self._staged_bytes -= taken


def _set_result(future: asyncio.Future, value) -> None:
    if not future.done():
        future.set_result(value)


def _set_exception(future: asyncio.Future, exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)

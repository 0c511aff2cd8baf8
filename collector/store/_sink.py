"""What a collector's span store offers: the DuckDB `SpanStore` and the lake's `LakeStore` both do.

`IngestPipeline` drives the write side (`SpanSink`); the HTTP routes, the dashboard and /metrics read
through the read side (`SpanQueries`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol, runtime_checkable

if TYPE_CHECKING:
    import pyarrow as pa

    from meritlens.collector.store._results import QueryResult
    from meritlens.collector.store._sqlguard import ArrowQuery


@runtime_checkable
class SpanSink(Protocol):
    """Acknowledged span rows in: staged durably at once, moved to their store by one mover."""

    on_move_demand: Callable[[], None] | None
    """Set by the pipeline: called when a reader waits for staged rows, so the mover moves them now."""

    def start(self) -> None: ...

    def close_queue(self) -> None:
        """Wake every waiter: a shutdown is under way."""

    def shutdown(self) -> None:
        """Move what is staged (the staging log keeps it when that fails), then close."""

    def stage(self, table: pa.Table) -> None:
        """Make normalized span rows durable; raises when they are not."""

    def move_due(self) -> float | None:
        """Seconds until the staged rows should be moved (0: now); None when none are staged."""

    def move_staged(self) -> int:
        """Move the staged rows; returns how many. On failure they stay staged."""

    def staged_rows(self) -> int: ...


@runtime_checkable
class SpanQueries(Protocol):
    """Read-only SQL over the stored spans and windows, and the writes a reader's checks record."""

    @property
    def db_name(self) -> str: ...

    def query(self, sql: str, *, max_rows: int | None = None, timeout_s: float | None = None,
              wait_s: float | None = None) -> QueryResult: ...

    def query_arrow(self, sql: str, *, batch_rows: int = 65_536) -> ArrowQuery: ...

    def record_coverage(self, report) -> None: ...

    def write_windows(self, windows: list) -> int: ...


@runtime_checkable
class CollectorStore(SpanSink, SpanQueries, Protocol):
    """What `meritlens serve` holds: `SpanStore` (a DuckDB file) or `LakeStore` (a span lake)."""

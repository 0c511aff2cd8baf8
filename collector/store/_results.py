"""A query's result as the store and the collector's SQL endpoint return it, and how its values
encode as JSON. Kept free of DuckDB, Arrow and the server, so that printing a result (the CLI
querying a running collector) imports none of them."""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import uuid
from dataclasses import dataclass


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    types: list[str]
    rows: list[tuple]
    truncated: bool = False
    """True when a row limit cut the result."""
    windows_behind: bool = False
    """True when the windows did not include every span committed before the query within the
    store's wait (the window processor is behind or failing): window rows may be stale."""
    staged_bytes: int = 0
    """Read on the file while its staging log holds this many bytes: spans a collector acknowledged
    before it stopped without a clean shutdown, which the result does not include yet."""


def json_default(value):
    """JSON encoding of the values DuckDB returns."""
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, uuid.UUID):
        return str(value)
    return str(value)

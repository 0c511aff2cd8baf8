"""A stored history for the benchmarks that time work on a DuckDB file: the first N spans of
bench/spangen.py's stream written into a `LocalStore` as the collector would store them.

Shared by bench/windows.py, bench/queries.py and bench/key_lookup.py.
"""

from __future__ import annotations

import pyarrow as pa

from _tally import Tally
from meritlens.collector.windows import LocalStore
from spangen import SpanStream, rows

WRITE_ROWS = 200_000


def load(local: LocalStore, stream: SpanStream, stored: int, batch: int = 10_000) -> Tally:
    """Write the stream's next requests of ``batch`` spans (normalized as the collector normalizes
    them) until ``stored`` spans, in groups of ~`WRITE_ROWS` rows without refreshing windows; then
    compute every window once and checkpoint (the timed writes that follow then pay only their own
    checkpoints, as in a collector that has been running). Returns the requests' tally. The stream
    goes on where the history stops: its next requests continue some of the stored tasks."""
    tally, tables, held, loaded = Tally(stream.targets), [], 0, 0
    while loaded < stored:
        request = stream.next_request(min(batch, stored - loaded))
        tally += request.tally
        tables.append(rows(request))
        held += request.spans
        loaded += request.spans
        if held >= WRITE_ROWS or loaded >= stored:
            local.windows.write(pa.concat_tables(tables), refresh_windows=False)
            tables, held = [], 0
    local.windows.refresh_all_windows()
    local.windows.con.execute("CHECKPOINT")
    return tally

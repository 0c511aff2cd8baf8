"""What a collector on a lake holds in place of its DuckDB store: the segment writer for the spans it
receives, and the lake reader for its SQL endpoint, dashboard and readiness checks."""

from __future__ import annotations

from meritlens.collector.lake._layout import Lake
from meritlens.collector.lake._reader import LakeReader
from meritlens.collector.lake._writer import SegmentWriter, default_collector_id


class LakeStore(LakeReader):
    """A `CollectorStore` (collector/store/_sink.py) over a lake: `IngestPipeline` stages into the
    writer, readers query the lake."""

    def __init__(self, root: str, collector_id: str | None = None, *, stage_move_s: float | None = None):
        super().__init__(Lake(root), must_exist=False)
        options = {} if stage_move_s is None else {"stage_move_s": max(0.0, stage_move_s)}  # 0: a segment per write
        self.writer = SegmentWriter(self.lake, collector_id or default_collector_id(), **options)

    def start(self) -> None:
        self.writer.start()

    def shutdown(self) -> None:
        self.writer.shutdown()

    def close_queue(self) -> None:
        self.writer.close_queue()

    def stage(self, table) -> None:
        self.writer.stage(table)

    def move_due(self) -> float | None:
        return self.writer.move_due()

    def move_staged(self) -> int:
        return self.writer.move_staged()

    def staged_rows(self) -> int:
        return self.writer.staged_rows()

    @property
    def on_move_demand(self):
        return self.writer.on_move_demand

    @on_move_demand.setter
    def on_move_demand(self, callback) -> None:
        self.writer.on_move_demand = callback

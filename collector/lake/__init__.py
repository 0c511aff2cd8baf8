"""The span lake: many collectors writing Parquet segments, windows computed by Spark, read by every tool."""

from meritlens.collector.lake._job import JobResult, run_windows_job
from meritlens.collector.lake._layout import Lake
from meritlens.collector.lake._reader import LakeNotFound, LakeReader
from meritlens.collector.lake._versions import current_windows_file, publish_windows
from meritlens.collector.lake._writer import LakeInUse, SegmentWriter

__all__ = ["JobResult", "Lake", "LakeInUse", "LakeNotFound", "LakeReader", "SegmentWriter", "current_windows_file",
           "publish_windows", "run_windows_job"]

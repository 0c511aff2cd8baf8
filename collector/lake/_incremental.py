"""What a windows run leaves for the next one: the window state (the `WindowBook` of every window, as
the single node saves it) and the segments it consumed, under ``PATH/state/<version>``.

The next run then reads only the segments published since: Spark computes the samples of the spans
those touch, before and after them (`SparkEngine.delta_samples`), and the book takes the difference.
The state is used only when it was made by the same window definitions (`window_definitions_digest`)
and every segment it consumed is still there; otherwise the run recomputes everything.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from meritlens.analytics.engine import BucketCutoffs, WindowBook, window_definitions_digest
from meritlens.collector.lake._layout import Lake

log = logging.getLogger("meritlens.collector.lake")

STATE_DIR = "state"
_STATE_SCHEMA = pa.schema([("target_id", pa.string()), ("scope", pa.string()), ("bucket_start_us", pa.int64()),
                           ("bucket_us", pa.int64()), ("state", pa.binary())])
"""A cumulative window's key has no bucket (NULL); a bucket's has its start and width."""


@dataclass
class SavedRun:
    book: WindowBook
    segments: set[str]
    """Base names of the segments the saved windows were computed from."""
    cutoffs: BucketCutoffs
    """Where the tiers of the book's time buckets begin."""


def run_state_schema() -> pa.Schema:
    return _STATE_SCHEMA


def _stem(version: str) -> str:
    return version.removesuffix(".parquet")


def save_run(lake: Lake, version: str, book: WindowBook, segments: list[str], cutoffs: BucketCutoffs) -> None:
    """Save the book and the consumed segments of ``version`` (before it becomes the current one)."""
    lake.fs.create_dir(lake.path(STATE_DIR), recursive=True)
    keys = sorted(book.keys, key=repr)
    bucket = [k[2:] if len(k) > 2 else (None, None) for k in keys]
    table = pa.table({"target_id": [k[0] for k in keys], "scope": [k[1] for k in keys],
                      "bucket_start_us": [b[0] for b in bucket], "bucket_us": [b[1] for b in bucket],
                      "state": [book.export_key(k) for k in keys]}, schema=_STATE_SCHEMA)
    lake.publish_parquet(STATE_DIR, _stem(version) + ".parquet", table)
    lake.write_text(STATE_DIR, _stem(version) + ".json",
                    json.dumps({"definitions": window_definitions_digest(lake.name, book.scale),
                                "segments": sorted(segments), "cutoffs": dataclasses.astuple(cutoffs)}))


def load_run(lake: Lake, version: str | None, scale: int) -> SavedRun | None:
    """The state ``version`` left, or None when there is none the current definitions (and the
    histograms' ``scale``) can use."""
    if version is None:
        return None
    text = lake.read_text(STATE_DIR, _stem(version) + ".json")
    if text is None:
        return None
    manifest = json.loads(text)
    if manifest.get("definitions") != window_definitions_digest(lake.name, scale) or "cutoffs" not in manifest:
        log.info("the saved window state was made by other window definitions: every window is recomputed")
        return None
    with lake.fs.open_input_file(lake.path(STATE_DIR, _stem(version) + ".parquet")) as fh:
        table = pq.read_table(fh)
    book = WindowBook(scale)
    try:
        for target, scope, start, width, state in zip(*(table.column(name).to_pylist()
                                                         for name in _STATE_SCHEMA.names)):
            book.import_key((target, scope) if start is None else (target, scope, start, width), state)
    except ValueError as exc:
        log.warning("the saved window state cannot be restored (%s): every window is recomputed", exc)
        return None
    return SavedRun(book, set(manifest["segments"]), BucketCutoffs(*manifest["cutoffs"]))


def state_file(lake: Lake, version: str | None) -> str | None:
    """The path of the state ``version`` left (its time buckets answer range queries), None when none."""
    if version is None:
        return None
    path = lake.path(STATE_DIR, _stem(version) + ".parquet")
    return path if lake.fs.get_file_info(path).type == pafs.FileType.File else None


def prune_states(lake: Lake, kept_versions: list[str]) -> None:
    """Remove the states of versions no longer kept."""
    keep = {_stem(v.rsplit("/", 1)[-1]) for v in kept_versions}
    for path in lake.files(STATE_DIR):
        if _stem(path.rsplit("/", 1)[-1]) not in keep:
            lake.delete(path)
            lake.delete(path.removesuffix(".parquet") + ".json")

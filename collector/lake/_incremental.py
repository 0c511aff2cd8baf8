"""What a windows run leaves for the next one: the window state (the `WindowBook` of every window, as
the single node saves it) and the segments it consumed, under ``PATH/state/<version>``.

The next run then reads only the segments published since: Spark computes the samples of the spans
those touch, before and after them (`SparkEngine.delta_samples`), and the book takes the difference.
The state is used only when it was made by the same window definitions (`window_definitions_digest`)
and every segment it consumed is still there; otherwise the run recomputes everything.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from meritlens.analytics.engine import WindowBook, window_definitions_digest
from meritlens.collector.lake._layout import Lake

log = logging.getLogger("meritlens.collector.lake")

STATE_DIR = "state"
_STATE_SCHEMA = pa.schema([("target_id", pa.string()), ("scope", pa.string()), ("state", pa.binary())])


@dataclass
class SavedRun:
    book: WindowBook
    segments: set[str]
    """Base names of the segments the saved windows were computed from."""


def _stem(version: str) -> str:
    return version.removesuffix(".parquet")


def save_run(lake: Lake, version: str, book: WindowBook, segments: list[str]) -> None:
    """Save the book and the consumed segments of ``version`` (before it becomes the current one)."""
    lake.fs.create_dir(lake.path(STATE_DIR), recursive=True)
    keys = sorted(book.keys)
    table = pa.table({"target_id": [k[0] for k in keys], "scope": [k[1] for k in keys],
                      "state": [book.export_key(k) for k in keys]}, schema=_STATE_SCHEMA)
    lake.publish_parquet(STATE_DIR, _stem(version) + ".parquet", table)
    lake.write_text(STATE_DIR, _stem(version) + ".json",
                    json.dumps({"definitions": window_definitions_digest(lake.name, book.scale),
                                "segments": sorted(segments)}))


def load_run(lake: Lake, version: str | None, scale: int) -> SavedRun | None:
    """The state ``version`` left, or None when there is none the current definitions (and the
    histograms' ``scale``) can use."""
    if version is None:
        return None
    text = lake.read_text(STATE_DIR, _stem(version) + ".json")
    if text is None:
        return None
    manifest = json.loads(text)
    if manifest.get("definitions") != window_definitions_digest(lake.name, scale):
        log.info("the saved window state was made by other window definitions: every window is recomputed")
        return None
    with lake.fs.open_input_file(lake.path(STATE_DIR, _stem(version) + ".parquet")) as fh:
        table = pq.read_table(fh)
    book = WindowBook(scale)
    try:
        for target, scope, state in zip(*(table.column(name).to_pylist() for name in _STATE_SCHEMA.names)):
            book.import_key((target, scope), state)
    except ValueError as exc:
        log.warning("the saved window state cannot be restored (%s): every window is recomputed", exc)
        return None
    return SavedRun(book, set(manifest["segments"]))


def prune_states(lake: Lake, kept_versions: list[str]) -> None:
    """Remove the states of versions no longer kept."""
    keep = {_stem(v.rsplit("/", 1)[-1]) for v in kept_versions}
    for path in lake.files(STATE_DIR):
        if _stem(path.rsplit("/", 1)[-1]) not in keep:
            lake.delete(path)
            lake.delete(path.removesuffix(".parquet") + ".json")

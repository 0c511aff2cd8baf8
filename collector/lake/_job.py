"""The windows job: every window of a lake's spans, computed by Spark, published as a new version.

A run reads only the segments published since the last run when that run's window state can
follow them (incremental, `_incremental`), else all of them (a full recomputation). Either way the
windows of a run are those a single collector holding the same spans would give, whatever the
collectors, retries and crashes the spans went through.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import shutil
import time
from dataclasses import dataclass
from urllib.parse import urlparse

from meritlens.analytics.engine import (
    BUCKET_KEY_COLUMNS,
    DEFAULT_RELATIVE_ERROR,
    BucketCutoffs,
    WindowBook,
    bucketed,
    compact,
    scale_for,
)
from meritlens.collector.lake._incremental import SavedRun, load_run, prune_states, save_run
from meritlens.collector.lake._layout import SPANS_DIR, WINDOWS_DIR, Lake, unique_stem
from meritlens.collector.lake._versions import current_version, publish_windows
from meritlens.collector.windows._engine import bucket_rows, fill_book

log = logging.getLogger("meritlens.collector.lake")

_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


@dataclass(frozen=True)
class JobResult:
    windows: int
    segments: int
    sample_rows: int
    version: str
    computed_at: _dt.datetime
    seconds: float
    mode: str = "full"
    """'full' (every segment read) or 'incremental' (the last run's state and the new segments)."""
    new_segments: int = 0


def driver_host_for(master: str | None) -> str | None:
    """The address the driver binds and announces: loopback for a local master or one on loopback
    (workers there reach it), else Spark's default (the host's address)."""
    if master is None:
        return None
    if master.startswith("local"):
        return "127.0.0.1"
    host = urlparse(master).hostname or ""
    return "127.0.0.1" if host in _LOOPBACK or host.startswith("127.") else None


def spark_session(master: str | None, *, driver_host: str | None = None, conf: dict[str, str] | None = None,
                  app_name: str = "meritlens-windows"):
    """A SparkSession on ``master`` (``local[*]``, ``spark://host:7077``; None: the one `spark-submit`
    gives). Raises RuntimeError with one line when pyspark or sqlglot is not installed."""
    try:
        import sqlglot  # noqa: F401 - the window SQL's translation to Spark SQL
        from pyspark.sql import SparkSession
    except ImportError:
        raise RuntimeError("the windows job needs pyspark and a Java runtime: pip install 'meritlens[spark]'"
                           " and a JRE 17 (Debian: apt-get install openjdk-17-jre-headless)") from None
    host = driver_host or driver_host_for(master)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    settings = {"spark.sql.session.timeZone": "UTC", "spark.ui.enabled": "false",
                "spark.sql.shuffle.partitions": "8", "spark.ui.showConsoleProgress": "false"}
    if host:
        settings.update({"spark.driver.host": host, "spark.driver.bindAddress": host})
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def compute_lake_windows(spark, lake: Lake, *, computed_at: _dt.datetime | None = None,
                         full: bool = False, quantile_error: float = DEFAULT_RELATIVE_ERROR) -> JobResult:
    """Compute every window of the lake's published segments on ``spark`` and publish them: from
    the segments published since the last run and that run's state (`_incremental`), or, with
    ``full`` or when that state cannot be used, from all segments. ``quantile_error``: as the
    collector's (`meritlens serve --quantile-error`)."""
    scale = scale_for(quantile_error)
    from meritlens.collector.windows._spark import SparkEngine

    started = time.monotonic()
    lake.make_dirs()
    files = lake.files(SPANS_DIR)
    names = [_base(f) for f in files]
    work = unique_stem("_work-")
    engine = SparkEngine(spark, [_file_uri(lake, f) for f in files], lake.uri(WINDOWS_DIR, work),
                         scratch_local=None if lake.remote else lake.path(WINDOWS_DIR, work))
    computed_at = computed_at or _dt.datetime.now(_dt.timezone.utc)
    saved = None if full else load_run(lake, current_version(lake), scale)
    if saved is not None and not saved.segments <= set(names):
        log.info("segments the last run consumed are gone: every window is recomputed")
        saved = None
    cutoffs = BucketCutoffs.at(int(computed_at.timestamp() * 1_000_000))
    try:
        book, new = _follow(engine, saved, names, cutoffs) if saved is not None else (None, len(files))
        if book is None:
            book, new = WindowBook(scale), len(files)
            fill_book(book, engine.samples(), cutoffs=cutoffs)
    finally:
        if not lake.remote:
            shutil.rmtree(lake.path(WINDOWS_DIR, work), ignore_errors=True)
    windows = [w for key in sorted(k for k in book.keys if len(k) == 2) for w in book.windows(key, lake.name, computed_at)]
    by_time = bucket_rows(book, [k for k in book.keys if len(k) > 2], lake.name, computed_at)
    version = publish_windows(lake, windows, computed_at, lambda name: save_run(lake, name, book, names, cutoffs),
                              by_time)
    prune_states(lake, lake.files(WINDOWS_DIR))
    mode = "full" if saved is None or book is not saved.book else "incremental"
    result = JobResult(len(windows), len(files), engine.sample_rows, version, computed_at,
                       time.monotonic() - started, mode, new)
    log.info("computed %d windows (%s, %d new segments of %d) in %.1fs: %s", result.windows, mode, new,
             result.segments, result.seconds, version)
    return result


def _follow(engine, saved: SavedRun, names: list[str], cutoffs: BucketCutoffs) -> tuple[WindowBook | None, int]:
    """The saved book brought up to the segments published since it was saved, and to ``cutoffs``
    (None when it cannot follow them), and how many those are. ``names``: the segments' base names,
    in the order of ``engine.files``."""
    book = saved.book
    recompute: set = set()
    if cutoffs != saved.cutoffs:  # time passed: hours merge into days, days into weeks
        recompute |= compact(book, [k for k in book.keys if len(k) > 2], cutoffs)[2]
    old = [uri for name, uri in zip(names, engine.files) if name in saved.segments]
    new = [uri for name, uri in zip(names, engine.files) if name not in saved.segments]
    if new:
        removed, added = engine.delta_samples(old, new)
        removed, added = (removed if removed.num_rows else None), (added if added.num_rows else None)
        recompute |= book.apply_delta(removed, added)[1]
        recompute |= book.apply_delta(bucketed(removed, cutoffs), bucketed(added, cutoffs), BUCKET_KEY_COLUMNS)[1]
    if recompute:
        log.info("%d saved windows cannot follow the new segments (e.g. %s): every window is recomputed",
                 len(recompute), sorted(recompute)[0])
        return None, len(names)
    return book, len(new)


def _base(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _file_uri(lake: Lake, path: str) -> str:
    return ("file://" + path) if not lake.remote else lake.root.split("://")[0] + "://" + path


def run_windows_job(lake_path: str, master: str | None = None, *, driver_host: str | None = None,
                    conf: dict[str, str] | None = None, full: bool = False,
                    quantile_error: float = DEFAULT_RELATIVE_ERROR) -> JobResult:
    """`meritlens lake windows`: start a Spark application on ``master`` (None under `spark-submit`,
    which gives it), compute, publish, stop."""
    scale_for(quantile_error)  # a bad value fails before Spark starts
    lake = Lake(lake_path)
    if not lake.exists():
        raise FileNotFoundError(f"no span lake at {lake_path} (no {SPANS_DIR}/ directory)")
    if not lake.files(SPANS_DIR):  # nothing to compute: no Spark application is started for it
        computed_at = _dt.datetime.now(_dt.timezone.utc)
        return JobResult(0, 0, 0, publish_windows(lake, [], computed_at), computed_at, 0.0)  # no state: none to follow
    os.environ.setdefault("PYSPARK_PYTHON", _python())
    spark = spark_session(master, driver_host=driver_host, conf=conf)
    try:
        return compute_lake_windows(spark, lake, full=full, quantile_error=quantile_error)
    finally:
        spark.stop()


def _python() -> str:
    import sys

    return sys.executable

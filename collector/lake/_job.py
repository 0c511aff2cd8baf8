"""The windows job: every window of a lake's spans, computed by Spark, published as a new version.

This computes every window from all the segments on each run (a full recomputation): the windows of
a run are those a single collector holding the same spans would give, whatever the collectors,
retries and crashes the spans went through.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import shutil
import time
from dataclasses import dataclass
from urllib.parse import urlparse

from meritlens.collector.lake._layout import SPANS_DIR, WINDOWS_DIR, Lake, unique_stem
from meritlens.collector.lake._versions import publish_windows
from meritlens.collector.windows._engine import compute_windows

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


def compute_lake_windows(spark, lake: Lake, *, computed_at: _dt.datetime | None = None) -> JobResult:
    """Compute every window of the lake's published segments on ``spark`` and publish them."""
    from meritlens.collector.windows._spark import SparkEngine

    started = time.monotonic()
    lake.make_dirs()
    files = lake.files(SPANS_DIR)
    work = unique_stem("_work-")
    scratch = lake.uri(WINDOWS_DIR, work)
    engine = SparkEngine(spark, [_file_uri(lake, f) for f in files], scratch,
                         scratch_local=None if lake.remote else lake.path(WINDOWS_DIR, work))
    computed_at = computed_at or _dt.datetime.now(_dt.timezone.utc)
    try:
        windows = compute_windows(engine, lake.name, computed_at)
    finally:
        if not lake.remote:
            shutil.rmtree(lake.path(WINDOWS_DIR, work), ignore_errors=True)
    version = publish_windows(lake, windows, computed_at)
    result = JobResult(len(windows), len(files), engine.sample_rows, version, computed_at,
                       time.monotonic() - started)
    log.info("computed %d windows from %d segments in %.1fs: %s", result.windows, result.segments,
             result.seconds, version)
    return result


def _file_uri(lake: Lake, path: str) -> str:
    return ("file://" + path) if not lake.remote else lake.root.split("://")[0] + "://" + path


def run_windows_job(lake_path: str, master: str | None = None, *, driver_host: str | None = None,
                    conf: dict[str, str] | None = None) -> JobResult:
    """`meritlens lake windows`: start a Spark application on ``master`` (None under `spark-submit`,
    which gives it), compute, publish, stop."""
    lake = Lake(lake_path)
    if not lake.exists():
        raise FileNotFoundError(f"no span lake at {lake_path} (no {SPANS_DIR}/ directory)")
    if not lake.files(SPANS_DIR):  # nothing to compute: no Spark application is started for it
        computed_at = _dt.datetime.now(_dt.timezone.utc)
        return JobResult(0, 0, 0, publish_windows(lake, [], computed_at), computed_at, 0.0)
    os.environ.setdefault("PYSPARK_PYTHON", _python())
    spark = spark_session(master, driver_host=driver_host, conf=conf)
    try:
        return compute_lake_windows(spark, lake)
    finally:
        spark.stop()


def _python() -> str:
    import sys

    return sys.executable

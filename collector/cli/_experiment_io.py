"""Storing experiment manifests from a command or a program: through the collector (POST
/api/experiments, collector/serve/_experiments_api.py) or in the DuckDB file.

A write is validated by the same code on both paths (``validate_manifest`` then the store's
``write_experiment``, which refuses updates that rewrite the past). When a collector holds the
file, writes go through it; otherwise the file is opened read-write (collector/cli/_resolve.py decides).
Reads go through ``reader``: one read-only connection (or the collector) for a whole command.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
from typing import Callable, Iterator, Sequence

from meritlens.analytics.engine import (
    ExperimentError,
    ExperimentManifest,
    finish_arm,
    load_experiment,
    start_arm,
    validate_manifest,
)
from meritlens.collector.cli._client import CollectorClient, CollectorRefused, QueryError
from meritlens.collector.cli._query import opened_store, query_store, query_url
from meritlens.collector.cli._resolve import ResolveError, Source, resolve
from meritlens.collector._paths import EXPERIMENTS_PATH
from meritlens.collector.store._results import QueryResult


class ExperimentConflict(ExperimentError):
    """The store refused the write: it would rewrite what the stored manifest already records."""


# --- from a command or a program --------------------------------------------------------------------
def _post(url: str, manifest: ExperimentManifest, create: bool, *, token: str | None,
          ca_file: str | None) -> ExperimentManifest:
    try:
        with CollectorClient(url, token=token, ca_file=ca_file) as client:
            reply = client.post_json(EXPERIMENTS_PATH, {"manifest": manifest.model_dump(mode="json"), "create": create})
    except CollectorRefused as exc:
        problems = exc.payload.get("problems") or [str(exc)]
        error = ExperimentConflict if exc.status == 409 else ExperimentError
        raise error(problems, manifest.experiment_id) from None
    return validate_manifest(reply["manifest"])


def _source(db: str | None, url: str | None, token: str | None, ca_file: str | None,
            source: Source | None) -> Source:
    if source is not None:
        return source
    try:
        return resolve(db, url, token=token, ca_file=ca_file)
    except ResolveError as exc:
        raise QueryError(str(exc)) from None


def save_experiment(manifest: ExperimentManifest, *, db: str | None = None, url: str | None = None,
                    create: bool = False, token: str | None = None, ca_file: str | None = None,
                    source: Source | None = None) -> ExperimentManifest:
    """Create or update ``manifest`` where ``source`` points (default: ``resolve(db, url, ...)``,
    collector/cli/_resolve.py): in the file, or through the collector. Returns the manifest as
    stored. Raises ExperimentError (ExperimentConflict for an update that rewrites the past, or with
    ``create`` when it exists) or QueryError."""
    source = _source(db, url, token, ca_file, source)
    if not source.is_file:
        return _post(source.url, manifest, create, token=source.token, ca_file=source.ca_file)
    with opened_store(source, read_only=False) as store:
        return store.write_experiment(manifest, create=create)


@contextlib.contextmanager
def reader(*, db: str | None = None, url: str | None = None, token: str | None = None,
           ca_file: str | None = None, source: Source | None = None) -> Iterator[Callable[[str], QueryResult]]:
    """One read-only query function for a whole command (SQL in, ``columns``/``rows`` out), where
    ``source`` points (default: ``resolve(db, url, ...)``): the file opened once, read-only, or the
    collector."""
    source = _source(db, url, token, ca_file, source)
    if not source.is_file:
        yield functools.partial(query_url, url=source.url, token=source.token, ca_file=source.ca_file)
        return
    with opened_store(source, read_only=True) as store:
        yield functools.partial(query_store, store)


def load(experiment_id: str, *, db: str | None = None, url: str | None = None, token: str | None = None,
         ca_file: str | None = None, source: Source | None = None) -> ExperimentManifest:
    """The stored manifest of ``experiment_id``."""
    with reader(db=db, url=url, token=token, ca_file=ca_file, source=source) as query:
        return load_experiment(query, experiment_id)


def start(experiment_id: str, arm: str, *, db: str | None = None, url: str | None = None,
          at: _dt.datetime | None = None, token: str | None = None, ca_file: str | None = None,
          source: Source | None = None) -> ExperimentManifest:
    """Open the arm's execution window (now, or ``at``) and store it."""
    source = _source(db, url, token, ca_file, source)
    manifest = load(experiment_id, source=source)
    return save_experiment(start_arm(manifest, arm, at=at), source=source)


def finish(experiment_id: str, arm: str, *, db: str | None = None, url: str | None = None,
           at: _dt.datetime | None = None, response_models: Sequence[str] = (), token: str | None = None,
           ca_file: str | None = None, source: Source | None = None) -> ExperimentManifest:
    """Close the arm's execution window (now, or ``at``), record its model identity (as its spans
    report it, unless given) and store it."""
    source = _source(db, url, token, ca_file, source)
    with reader(source=source) as query:
        manifest = load_experiment(query, experiment_id)
        finished = finish_arm(manifest, arm, query, at=at, response_models=response_models)
    return save_experiment(finished, source=source)

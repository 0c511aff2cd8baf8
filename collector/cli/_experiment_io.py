"""Storing experiment manifests: inside the collector (POST /api/experiments) or on a free DuckDB file.

A write is validated by the same code on both paths (``validate_manifest`` then the store's
``write_experiment``, which refuses updates that rewrite the past). When a collector holds the
file, writes go through it; otherwise the file is opened read-write.
Reads go through ``reader``: one read-only connection (or the collector) for a whole command.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import functools
import os
from typing import Callable, Iterator, Sequence

import duckdb
from aiohttp import web

from meritlens.analytics._experiments import (
    ExperimentError,
    ExperimentManifest,
    finish_arm,
    load_experiment,
    start_arm,
    validate_manifest,
)
from meritlens.collector.cli._query import (
    CollectorRefused,
    QueryError,
    _collector_url,
    _is_lock_conflict,
    _query_store,
    on_file_or_collector,
    post_json,
    query_url,
)
from meritlens.collector._settings import DEFAULT_URL, ENV_URL, EXPERIMENTS_PATH
from meritlens.collector.store._results import QueryResult
from meritlens.collector.store._store import SpanStore


class ExperimentConflict(ExperimentError):
    """The store refused the write: it would rewrite what the stored manifest already records."""


# --- inside the collector -------------------------------------------------------------------------
def experiments_handler(store: SpanStore):
    """The handler of POST /api/experiments {"manifest": {...}, "create": false} -> {"manifest":
    {...as stored}}; 400 invalid, 409 conflict (an update rewriting the past, or "create" of an
    existing experiment)."""

    async def experiments(request: web.Request) -> web.Response:
        if request.method != "POST":
            return web.json_response({"error": f'use POST with {{"manifest": {{...}}}} on {EXPERIMENTS_PATH}'},
                                     status=405)
        try:
            payload = await request.json()
            if not isinstance(payload, dict) or not isinstance(payload.get("manifest"), dict):
                raise TypeError
            create = payload.get("create", False)
            if not isinstance(create, bool):
                raise TypeError
        except (ValueError, TypeError):
            return web.json_response({"error": 'body must be a JSON object {"manifest": {...}, "create": false}'},
                                     status=400)
        try:
            manifest = validate_manifest(payload["manifest"])
        except ExperimentError as exc:
            return web.json_response({"error": str(exc), "problems": exc.problems}, status=400)
        try:
            stored = await asyncio.get_running_loop().run_in_executor(
                None, functools.partial(store.write_experiment, manifest, create=create)
            )
        except ExperimentError as exc:
            return web.json_response({"error": str(exc), "problems": exc.problems}, status=409)
        return web.json_response({"manifest": stored.to_json()})

    return experiments


# --- from a command or a program --------------------------------------------------------------------
def _post(url: str, manifest: ExperimentManifest, create: bool, *, token: str | None,
          ca_file: str | None) -> ExperimentManifest:
    try:
        reply = post_json(url, EXPERIMENTS_PATH, {"manifest": manifest.model_dump(mode="json"), "create": create},
                          token=token, ca_file=ca_file)
    except CollectorRefused as exc:
        problems = exc.payload.get("problems") or [str(exc)]
        error = ExperimentConflict if exc.status == 409 else ExperimentError
        raise error(problems, manifest.experiment_id) from None
    return validate_manifest(reply["manifest"])


def save_experiment(manifest: ExperimentManifest, *, db: str, url: str | None = None, create: bool = False,
                    token: str | None = None, ca_file: str | None = None) -> ExperimentManifest:
    """Create or update ``manifest`` where the queries of ``db``/``url`` go (``on_file_or_collector``):
    through the collector at ``url``; else in ``db`` when no process holds it; else through the
    collector holding it (sent ``token``, default $MERITLENS_TOKEN; https verified against
    ``ca_file``). Returns the manifest as stored. Raises ExperimentError (ExperimentConflict for an
    update that rewrites the past, or with ``create`` when it exists) or QueryError."""
    return on_file_or_collector(
        db, url, read_only=False,
        on_file=lambda store: store.write_experiment(manifest, create=create),
        through_collector=lambda collector_url: _post(collector_url, manifest, create, token=token, ca_file=ca_file),
    )


@contextlib.contextmanager
def reader(*, db: str, url: str | None = None, token: str | None = None,
           ca_file: str | None = None) -> Iterator[Callable[[str], QueryResult]]:
    """One read-only query function for a whole command (SQL in, ``columns``/``rows`` out), chosen
    as ``on_file_or_collector`` chooses, but kept open: the collector at ``url``; else ``db`` opened
    once, read-only, when no process holds it; else the collector holding it."""
    if url:
        yield functools.partial(_through, url=url, token=token, ca_file=ca_file)
        return
    if os.path.exists(db):
        store = SpanStore(db, read_only=True)
        try:
            store.start()
        except duckdb.Error as exc:
            if not _is_lock_conflict(exc):
                raise QueryError(f"cannot open {db}: {exc}") from None
        else:
            try:
                yield functools.partial(_query_store, store)
            finally:
                store.shutdown()
            return
    fallback = _collector_url(db) or os.environ.get(ENV_URL) or DEFAULT_URL
    yield functools.partial(_through, url=fallback, token=token, ca_file=ca_file,
                            missing=None if os.path.exists(db) else db)


def _through(sql: str, *, url: str, token: str | None, ca_file: str | None, missing: str | None = None) -> QueryResult:
    try:
        return query_url(sql, url, token=token, ca_file=ca_file)
    except QueryError as exc:
        if missing is not None and "no collector reachable" in str(exc):
            raise QueryError(f"no database at {missing} and {exc}") from None
        raise


def load(experiment_id: str, *, db: str, url: str | None = None, token: str | None = None,
         ca_file: str | None = None) -> ExperimentManifest:
    """The stored manifest of ``experiment_id``."""
    with reader(db=db, url=url, token=token, ca_file=ca_file) as query:
        return load_experiment(query, experiment_id)


def start(experiment_id: str, arm: str, *, db: str, url: str | None = None, at: _dt.datetime | None = None,
          token: str | None = None, ca_file: str | None = None) -> ExperimentManifest:
    """Open the arm's execution window (now, or ``at``) and store it."""
    manifest = load(experiment_id, db=db, url=url, token=token, ca_file=ca_file)
    return save_experiment(start_arm(manifest, arm, at=at), db=db, url=url, token=token, ca_file=ca_file)


def finish(experiment_id: str, arm: str, *, db: str, url: str | None = None, at: _dt.datetime | None = None,
           response_models: Sequence[str] = (), token: str | None = None,
           ca_file: str | None = None) -> ExperimentManifest:
    """Close the arm's execution window (now, or ``at``), record its model identity (as its spans
    report it, unless given) and store it."""
    with reader(db=db, url=url, token=token, ca_file=ca_file) as query:
        manifest = load_experiment(query, experiment_id)
        finished = finish_arm(manifest, arm, query, at=at, response_models=response_models)
    return save_experiment(finished, db=db, url=url, token=token, ca_file=ca_file)

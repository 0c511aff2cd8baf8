"""Where a command's data is: the DuckDB file it was given, a running collector, or a span lake.

Every command that reads or writes data resolves its connection options here, once:

- ``--url`` given (or $MERITLENS_URL without a ``--db``): that collector.
- ``--db`` given (or $MERITLENS_DB): that file when no process holds it; the collector holding
  it (the URL it wrote beside the file) when one does. A path that does not exist is an error
  (only `import` creates a file), never a reason to read some other database.
- neither given: ./meritlens.duckdb as above when it exists, else the running collector
  ($MERITLENS_URL, else http://127.0.0.1:4318), as the README's quickstart uses it.
- ``--lake`` given (or $MERITLENS_LAKE without a ``--db`` or ``--url``): that span lake's files (written
  by `serve --lake`, windows by `lake windows`), read in this process; never together with ``--db``/``--url``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable, TypeVar

from meritlens.collector._settings import (
    DEFAULT_DB,
    DEFAULT_URL,
    ENV_URL,
    SETTINGS,
    SettingsError,
    address_file,
    resolve_token,
)
from meritlens.collector._paths import HEALTH_PATH

__all__ = ["ResolveError", "Source", "collector_url_beside", "describe_lock_holder", "is_lock_conflict",
           "open_file_or_explain", "resolve"]


class ResolveError(RuntimeError):
    """No usable database or collector for the options given; the message says which and why."""


@dataclass(frozen=True)
class Source:
    """Where a command goes: ``via`` is "file" (open ``db`` itself), "collector" (``url``) or "lake"
    (the span lake whose path or URI is ``db``)."""

    via: str
    db: str
    url: str | None = None
    token: str | None = None
    ca_file: str | None = None

    @property
    def is_file(self) -> bool:
        return self.via == "file"

    @property
    def is_lake(self) -> bool:
        return self.via == "lake"

    @property
    def is_collector(self) -> bool:
        return self.via == "collector"

    @property
    def where(self) -> str:
        if self.is_lake:
            return f"the lake {self.db}"
        return self.db if self.is_file else f"the collector at {self.url}"


def is_lock_conflict(exc: BaseException) -> bool:
    """True when DuckDB refused to open a file because another process holds it."""
    text = str(exc).lower()
    return "lock" in text and ("conflicting" in text or "could not set" in text)


T = TypeVar("T")


def open_file_or_explain(path: str, open_file: Callable[[], T], error: type[Exception]) -> T:
    """``open_file()`` (which opens the DuckDB file ``path``); a file another process holds, or one
    DuckDB cannot open, raises ``error`` with one line saying which and what to do."""
    import duckdb  # a resolved collector source needs none of it

    try:
        return open_file()
    except duckdb.Error as exc:
        if is_lock_conflict(exc):
            raise error(f"{path} is held by {describe_lock_holder(exc)}; give --url of the collector that holds it") from None
        raise error(f"cannot open {path}: {str(exc).splitlines()[0]}") from None


_HOLDER = re.compile(r"held in (.+?) \(PID (\d+)\)")


def describe_lock_holder(exc: BaseException) -> str:
    """'process 123 (meritlens serve --db x.duckdb)' from DuckDB's lock error, else 'another process'."""
    found = _HOLDER.search(str(exc))
    if not found:
        return "another process"
    program, pid = found.groups()
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        argv = []
    # A console script runs as "python .../bin/meritlens serve ...": show it as "meritlens serve ...".
    if len(argv) > 1 and os.path.basename(argv[1]) == "meritlens":
        argv = argv[1:]
    command = " ".join([os.path.basename(argv[0]), *argv[1:]]) if argv else program
    return f"process {pid} ({command[:120]})"


def collector_url_beside(db: str) -> str | None:
    """The URL a running collector wrote beside ``db`` (see `meritlens serve`), if any."""
    try:
        with open(address_file(db), encoding="utf-8") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def _probe(url: str, token: str | None, ca_file: str | None) -> str | None:
    """None when a collector answers at ``url``; else why not (one line)."""
    from meritlens.collector.cli._client import CollectorClient  # only on this path

    with CollectorClient(url, token=token, ca_file=ca_file, timeout=5) as client:
        return client.probe(HEALTH_PATH)


def resolve(db: str | None, url: str | None, *, token: str | None = None, token_file: str | None = None,
            ca_file: str | None = None, create: bool = False, lake: str | None = None,
            lake_allowed: bool = False) -> Source:
    """The source for ``--db`` (None: not given), ``--url``, ``--token``/``--token-file``,
    ``--tls-ca`` and, where the command reads lakes (``lake_allowed``), ``--lake``. ``create``: a
    missing ``db`` is made (`import`). Raises ResolveError."""
    try:
        token = resolve_token(token, token_file)
    except SettingsError as exc:
        raise ResolveError(str(exc)) from None
    if lake_allowed:
        if lake and (db is not None or url):
            raise ResolveError("--lake reads the lake's files: give it without --db and --url")
        # Like $MERITLENS_URL, $MERITLENS_LAKE never redirects a command given --db or --url.
        lake = lake or (None if db is not None or url else os.environ.get(SETTINGS['lake'].env) or None)
        if lake:
            return _lake_source(lake, token, ca_file)
    path = db or DEFAULT_DB
    # An explicit --db wins over $MERITLENS_URL: a URL from the environment never redirects a named file.
    url = url or (None if db is not None else os.environ.get(ENV_URL) or None)
    if url:
        return Source("collector", path, url.rstrip("/"), token, ca_file)
    if not os.path.exists(path):
        if create:
            parent = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(parent):
                raise ResolveError(f"cannot create {path}: the directory {parent} does not exist")
            return Source("file", path, None, token, ca_file)
        if db is not None:
            raise ResolveError(f"no database at {path}: check --db (or ${SETTINGS['db'].env}), or give --url to use a "
                               "running collector")
        fallback = collector_url_beside(path) or os.environ.get(ENV_URL) or DEFAULT_URL
        problem = _probe(fallback, token, ca_file)
        if problem is not None:
            raise ResolveError(f"no database at {path} (no --db given) and no collector reachable at {fallback} "
                               f"({problem}): start `meritlens serve`, or give --db or --url")
        return Source("collector", path, fallback.rstrip("/"), token, ca_file)
    import duckdb

    from meritlens.collector.store._sqlguard import open_read_only

    try:
        open_read_only(path).close()
    except duckdb.Error as exc:
        if not is_lock_conflict(exc):
            raise ResolveError(f"cannot open {path}: {str(exc).splitlines()[0]}") from None
        holder = collector_url_beside(path)
        if holder is None:
            raise ResolveError(f"{path} is held by {describe_lock_holder(exc)} and no collector address is beside it "
                               f"({address_file(path)}): give --url of the collector that holds it") from None
        return Source("collector", path, holder.rstrip("/"), token, ca_file)
    return Source("file", path, None, token, ca_file)


def _lake_source(lake: str, token: str | None, ca_file: str | None) -> Source:
    """The lake at ``lake``; an error naming how to create it when there is none."""
    from meritlens.collector.lake._reader import LakeNotFound, LakeReader

    try:
        LakeReader(lake)
    except (LakeNotFound, ValueError, OSError) as exc:
        raise ResolveError(" ".join(str(exc).split())) from None
    return Source("lake", lake, None, token, ca_file)

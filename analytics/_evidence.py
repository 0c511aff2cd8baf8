"""A window's evidence: the digest of the spans that fed it, where they can be read, and the digest
of the code that computed it (rows stored under another are recomputed)."""

from __future__ import annotations

import functools
import hashlib
import os
import urllib.parse

_DIGEST_MOD = 1 << 64


def span_keys_digest(keys) -> str:
    """The evidence digest of a multiset of spans given as 'trace_id:span_id' keys.

    sha256 hex of ``"<count>:<H>:<L>"``, where H and L are the sums (mod 2**64, 16 hex digits) of
    the two 64-bit little-endian halves of each key's md5. The sums make it independent of order
    and let the processor add and remove spans without rereading the others."""
    high = low = count = 0
    for key in keys:
        digest = hashlib.md5(key.encode()).digest()
        high += int.from_bytes(digest[:8], "little")
        low += int.from_bytes(digest[8:], "little")
        count += 1
    return digest_from_sums(count, high, low)


def digest_from_sums(count: int, high: int, low: int) -> str:
    """``span_keys_digest`` from the key count and the (unreduced) sums of the md5 halves."""
    text = f"{count}:{high % _DIGEST_MOD:016x}:{low % _DIGEST_MOD:016x}"
    return hashlib.sha256(text.encode()).hexdigest()


@functools.lru_cache(maxsize=65_536)
def evidence_uri(db_name: str, target_id: str, scope: str, metric: str, *, sidecar=None,
                 judge_model: str | None = None) -> str:
    """Where a window's evidence can be read: the spans that fed it, plus the sidecar file and the
    judge model of an evaluated metric."""
    uri = (f"meritlens://{_quote(db_name)}/spans?target_id={_quote(target_id)}&scope={_quote(scope)}"
           f"&metric={_quote(metric)}")
    if sidecar is not None:
        uri += f"&sidecar={_quote(str(sidecar))}"
    if judge_model is not None:
        uri += f"&judge={_quote(judge_model)}"
    return uri


def _quote(text: str) -> str:
    return urllib.parse.quote(text, safe="")


_ROW_SOURCES = ("_tasks.py", "_definitions.py", "_samples.py", "_evidence.py", "_windows.py", "_sql.py",
                "_accumulate.py", "_sample_columns.py", "_time_buckets.py", "_distribution.py", "_scale.py",
                "_catalogue.py", "_schema.py")
"""The modules whose code computes a window row from the spans: the span predicates and task fields,
the definitions, the sample SQL, the digest, the window model and its states, the accumulator (of
the windows and of the windows by time) and the catalogue (tests/analytics/test_window_row_sources.py checks that every module they import is
here)."""


def window_definitions_digest(db_name: str, scale: int) -> str:
    """A digest of everything a stored window row of the processor depends on besides the spans:
    the code of the modules computing it (``_ROW_SOURCES``), the package version, the
    histograms' scale and the database name (evidence URIs hold it). Rows stored under another
    digest are recomputed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        package = version("meritlens")
    except PackageNotFoundError:
        package = "unknown"
    digest = hashlib.sha256(f"{package}\n{db_name}\n{scale}\n".encode())
    here = os.path.dirname(os.path.abspath(__file__))
    for name in _ROW_SOURCES:
        with open(os.path.join(here, name), "rb") as fh:
            digest.update(fh.read())
    return digest.hexdigest()

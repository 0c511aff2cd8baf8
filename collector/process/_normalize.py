"""Normalizing a decoded OTLP request into rows of the `spans` table: the native scanner
(`_scan`, over `collector/process/_spanscan.c`) when it is built and the body allows, else the
Python walk (`_walk`), which gives the same rows and refusals."""

from __future__ import annotations

from google.protobuf.message import DecodeError

from meritlens.collector.process import _otlp
from meritlens.collector.process._native import native as _spanscan  # None unbuilt: the Python walk is complete
from meritlens.collector.process._options import NormalizeOptions
from meritlens.collector.process._scan import scan_normalize
from meritlens.collector.process._walk import SpanBatch, walk_normalize

NATIVE_SCANNER = _spanscan is not None
"""Whether the receive path's per-span work runs in native code (`collector/process/_spanscan.c`)."""

_DEFAULT_OPTIONS = NormalizeOptions()


def normalize(request, refusals: dict[tuple[int, int, int], str] | None = None,
              options: NormalizeOptions = _DEFAULT_OPTIONS, *,
              checks: _otlp.SpanChecks | None = None, body: bytes | None = None) -> SpanBatch:
    """Normalize an ExportTraceServiceRequest, or its `_otlp.lean_view`, into a SpanBatch.

    ``refusals``: spans already refused, by (resource, scope, span) position, with the reason.
    ``checks``: limits to apply to every span not already refused.
    ``body``: the protobuf bytes ``request`` was parsed from; with it the native scanner does the
    per-span work (same rows, same refusals).
    Raises `_otlp.BadRequest` when a part of a lean view is not valid protobuf (`_otlp.decode_lean`).
    """
    lean = request if isinstance(request, _otlp.LeanRequest) else _otlp.lean_view(request, body)
    try:
        if body is not None and not refusals and _spanscan is not None:
            return scan_normalize(lean, body, options, checks)
        return walk_normalize(lean, refusals, options, checks)
    except DecodeError as exc:  # an attribute, event or link of the lean view
        raise _otlp.not_protobuf(exc) from None

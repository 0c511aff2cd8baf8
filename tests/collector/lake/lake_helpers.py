"""Shared by the lake tests: collectors on one lake, spans to send them, and the CLI over a lake."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.analytics.evidence_helpers import Span, export_body
from tests.collector.windows.test_incremental_windows import _random_spans
from tests.conftest import CollectorProcess, run_cli


def lake_collector(tmp: Path, lake: Path, collector_id: str, *args: str, **options) -> CollectorProcess:
    """A real `meritlens serve --lake` process (not started), logging to tmp/<id>.log."""
    return CollectorProcess(tmp / f"{collector_id}.duckdb", args=("--lake", str(lake), "--collector-id", collector_id,
                                                                 *args), **options)


def varied_spans(seeds: range) -> list[list[Span]]:
    """One export (a list of spans) per seed: tasks over several traces, wrappers, tools, errors,
    assessments, missing fields and several targets (the window property test's generator)."""
    return [_random_spans(seed, seed % 2 == 0) for seed in seeds]


def post(url: str, spans: list[Span]) -> httpx.Response:
    return httpx.post(url + "/v1/traces", content=export_body(spans),
                      headers={"Content-Type": "application/x-protobuf"}, timeout=30)


def lake_sql(lake: Path, query: str) -> list[dict]:
    return json.loads(run_cli("sql", query, "--lake", str(lake), "--format", "json").stdout)


def span_keys(spans: list[Span]) -> set[tuple[str, str]]:
    return {(s.trace_id, s.span_id) for s in spans}

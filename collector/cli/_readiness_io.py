"""Recording a readiness check from a command: inside the collector that holds the file (POST
/api/readiness, collector/serve/_evidence.py), else on the file or lake itself."""

from __future__ import annotations

from meritlens.analytics.engine import CoverageReport, TaskProfile
from meritlens.collector._paths import READINESS_PATH
from meritlens.collector.cli._client import CollectorClient
from meritlens.collector.cli._query import opened_store
from meritlens.collector.cli._resolve import Source
from meritlens.collector.serve._evidence import check_and_record


def readiness_through(source: Source, profile: TaskProfile, *, target: str | None, scope: str) -> CoverageReport:
    """Ask the collector ``source`` points to to check and record readiness."""
    with CollectorClient(source.url, token=source.token, ca_file=source.ca_file) as client:
        body = client.post_json(READINESS_PATH, {"profile": profile.to_dict(), "target": target, "scope": scope})
    return CoverageReport.model_validate(body)


def check_readiness_at(profile: TaskProfile, *, target: str | None, scope: str, source: Source) -> CoverageReport:
    """Check and record readiness where ``source`` points (collector/cli/_resolve.py): in the file
    it names, on the lake (the check is a file of the lake's), or inside the collector."""
    if source.is_collector:
        return readiness_through(source, profile, target=target, scope=scope)
    with opened_store(source, read_only=False) as store:
        return check_and_record(store, profile, target=target, scope=scope)

"""`RedactingSpanExporter`: a redaction policy applied in the application, before spans leave the process.

It wraps any span exporter and hands it copies of the finished spans with the policy applied to their
attributes, event and link attributes, resource, name and status description, whichever instrumentation
recorded them (the SDK's spans are immutable, so a changed span is rebuilt; an unchanged one is passed as is).
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import Link, Status

from meritlens.instrumentation._state import log
from meritlens.instrumentation.redaction import RedactionPolicy, Redactor, load_policy

_RESOURCES_MAX = 64


def _with_dropped(attributes: dict[str, Any], dropped: int) -> Any:
    """``attributes``, carrying the count of attributes the SDK had dropped (its limits)."""
    if not dropped:
        return attributes
    bounded = BoundedAttributes(attributes=attributes, immutable=True)
    bounded.dropped = dropped
    return bounded


def _list_with_dropped(items: list, dropped: int) -> Sequence:
    if not dropped:
        return items
    bounded = BoundedList.from_seq(None, items)
    bounded.dropped = dropped
    return bounded


class RedactingSpanExporter(SpanExporter):
    """Exports through ``exporter`` the spans it is given, with ``policy`` (a RedactionPolicy, or the path of its
    TOML file) applied first. `counts` says what each rule did so far.

    A span the policy cannot be applied to is never exported as it is: the batch is reported failed.
    """

    def __init__(self, exporter: SpanExporter, policy: RedactionPolicy | str | os.PathLike[str]) -> None:
        self._exporter = exporter
        self._redactor = Redactor(policy if isinstance(policy, RedactionPolicy) else load_policy(policy))
        self._counts: Counter = Counter()
        self._lock = threading.Lock()
        # id(resource) -> (resource, its redacted copy, what redacting it counted)
        self._resources: dict[int, tuple[Resource, Resource, Counter]] = {}

    @property
    def policy(self) -> RedactionPolicy:
        return self._redactor.policy

    def counts(self) -> dict[tuple[str, str], int]:
        """Values changed so far, by (rule, action): "masked" and "hashed" count matches replaced and values
        hashed whole, "dropped" attributes removed."""
        with self._lock:
            return dict(self._counts)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        tally: Counter = Counter()
        try:
            redacted = [self._span(span, tally) for span in spans]
        except Exception as exc:  # never a value in the log: the spans may hold what the policy hides
            log.error("redacting %d spans failed (%s); they were not exported", len(spans), type(exc).__name__)
            return SpanExportResult.FAILURE
        with self._lock:
            self._counts.update(tally)
        return self._exporter.export(redacted)

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._exporter.force_flush(timeout_millis)

    def _span(self, span: ReadableSpan, tally: Counter) -> ReadableSpan:
        r = self._redactor
        name = r.text(span.name, tally)
        attributes = r.attributes(span.attributes, tally)
        status = span.status
        description = r.text(status.description, tally) if status.description else status.description
        events = [self._event(event, tally) for event in span.events]
        links = [self._link(link, tally) for link in span.links]
        resource = self._resource(span.resource, tally)
        same_events = all(a is b for a, b in zip(events, span.events, strict=True))
        same_links = all(a is b for a, b in zip(links, span.links, strict=True))
        if (name is span.name and attributes is None and description is status.description
                and resource is span.resource and same_events and same_links):
            return span
        return ReadableSpan(
            name=name,
            context=span.context,
            parent=span.parent,
            resource=resource,
            attributes=_with_dropped(dict(span.attributes) if attributes is None else attributes,
                                     span.dropped_attributes),
            events=_list_with_dropped(events, span.dropped_events),
            links=_list_with_dropped(links, span.dropped_links),
            kind=span.kind,
            status=status if description is status.description else Status(status.status_code, description),
            start_time=span.start_time,
            end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope,
        )

    def _event(self, event: Event, tally: Counter) -> Event:
        attributes = self._redactor.attributes(event.attributes or {}, tally)
        if attributes is None:
            return event
        return Event(event.name, _with_dropped(attributes, event.dropped_attributes), event.timestamp)

    def _link(self, link: Link, tally: Counter) -> Link:
        attributes = self._redactor.attributes(link.attributes or {}, tally)
        return link if attributes is None else Link(link.context, _with_dropped(attributes, link.dropped_attributes))

    def _resource(self, resource: Resource, tally: Counter) -> Resource:
        """The redacted resource, worked out once per resource (spans share theirs), counted for every span."""
        cached = self._resources.get(id(resource))
        if cached is None or cached[0] is not resource:
            resource_tally: Counter = Counter()
            attributes = self._redactor.attributes(resource.attributes, resource_tally)
            redacted = resource if attributes is None else Resource(attributes, resource.schema_url)
            if len(self._resources) >= _RESOURCES_MAX:
                self._resources.clear()
            cached = self._resources[id(resource)] = (resource, redacted, resource_tally)
        tally.update(cached[2])
        return cached[1]

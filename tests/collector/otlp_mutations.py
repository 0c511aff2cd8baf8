"""A seed corpus of valid OTLP trace bodies and mutations of them, for fuzzing the receivers.

Used by the hypothesis test (tests/collector/receive/test_receiver_fuzz.py) and the long run
(tests/fuzz/fuzz_receiver.py). Each case is (body, headers) for POST /v1/traces.
"""

from __future__ import annotations

import base64
import copy
import gzip
import json
import random
import zlib

from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.collector.collector_proc import make_request

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


def _rich_request() -> ExportTraceServiceRequest:
    request = make_request(4242, 3)
    span = request.resource_spans[0].scope_spans[0].spans[0]
    span.parent_span_id = span.span_id[::-1]
    span.status.code, span.status.message = 2, "boom"
    event = span.events.add()
    event.name, event.time_unix_nano = "gen_ai.choice", span.start_time_unix_nano + 5
    kv = event.attributes.add()
    kv.key = "nested"
    inner = kv.value.kvlist_value.values.add()
    inner.key, inner.value.double_value = "x", 1.5
    link = span.links.add()
    link.trace_id, link.span_id = span.trace_id, span.span_id
    arr = span.attributes.add()
    arr.key = "list"
    arr.value.array_value.values.add().bool_value = True
    arr.value.array_value.values.add().bytes_value = b"\x00\x01"
    for key, value in (("meritlens.cost.usd", 0.25), ("meritlens.quality.score", float("nan"))):
        kv = span.attributes.add()
        kv.key, kv.value.double_value = key, value
    role = span.attributes.add()
    role.key, role.value.string_value = "meritlens.role", "orchestration"
    return request


def to_otlp_json(request: ExportTraceServiceRequest) -> dict:
    """OTLP/JSON: protobuf JSON mapping with hex (not base64) trace and span IDs."""
    doc = json_format.MessageToDict(request)

    def hexify(obj):
        if isinstance(obj, dict):
            for key in ("traceId", "spanId", "parentSpanId"):
                if isinstance(obj.get(key), str):
                    obj[key] = base64.b64decode(obj[key]).hex()
            for value in obj.values():
                hexify(value)
        elif isinstance(obj, list):
            for value in obj:
                hexify(value)

    hexify(doc)
    return doc


SEED_REQUESTS = [make_request(1, 1), make_request(2, 7, targets=2), _rich_request(), ExportTraceServiceRequest()]
SEED_PROTOBUF = [r.SerializeToString() for r in SEED_REQUESTS]
SEED_JSON = [to_otlp_json(r) for r in SEED_REQUESTS]

_INTERESTING_INTS = [0, 1, -1, 255, 256, 2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63)]
_INTERESTING_VALUES = [None, True, False, "", "zz", "0" * 32, "ff" * 8, [], {}, 1.5, float("1e308"), "NaN",
                       "\ud800", "é", *_INTERESTING_INTS, *[str(i) for i in _INTERESTING_INTS]]


def mutate_bytes(data: bytes, rng: random.Random, rounds: int = 3) -> bytes:
    buf = bytearray(data)
    for _ in range(rounds):
        choice = rng.randrange(7)
        if choice == 0 and buf:  # flip bits
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif choice == 1:  # insert random bytes
            i = rng.randrange(len(buf) + 1)
            buf[i:i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        elif choice == 2 and buf:  # delete a slice
            i = rng.randrange(len(buf))
            del buf[i:i + rng.randrange(1, 16)]
        elif choice == 3 and buf:  # truncate
            del buf[rng.randrange(len(buf)):]
        elif choice == 4 and buf:  # duplicate a slice
            i = rng.randrange(len(buf))
            j = min(len(buf), i + rng.randrange(1, 64))
            buf[j:j] = buf[i:j]
        elif choice == 5 and buf:  # an interesting byte (varint edges, wire types)
            buf[rng.randrange(len(buf))] = rng.choice([0x00, 0x7F, 0x80, 0xFF, 0x0A, 0x12, 0x1A, 0x08])
        else:  # splice with another seed
            other = rng.choice(SEED_PROTOBUF)
            if other:
                i, j = rng.randrange(len(buf) + 1), rng.randrange(len(other))
                buf[i:] = other[j:]
    return bytes(buf)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from _paths(value, prefix + (i,))


def mutate_json(doc: dict, rng: random.Random, rounds: int = 2, replacement=None) -> dict:
    doc = copy.deepcopy(doc)
    for _ in range(rounds):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = rng.choice(paths)
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        key = path[-1]
        choice = rng.randrange(4)
        if choice == 0 or replacement is not None:
            parent[key] = replacement if replacement is not None else rng.choice(_INTERESTING_VALUES)
            replacement = None
        elif choice == 1 and isinstance(parent, dict):
            del parent[key]
        elif choice == 2 and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))
        else:
            parent[key] = [parent[key]] if rng.random() < 0.5 else {"x": parent[key]}
    return doc


def encode_json(doc, rng: random.Random) -> bytes:
    text = json.dumps(doc, allow_nan=True, ensure_ascii=rng.random() < 0.5)
    return text.encode("utf-8", "surrogatepass")


def case(rng: random.Random, json_replacement=None) -> tuple[bytes, dict[str, str]]:
    """One fuzz case: a mutated protobuf or JSON body, maybe gzip-compressed, maybe mislabelled."""
    kind = rng.randrange(6)
    if kind <= 1:
        body, media = mutate_bytes(rng.choice(SEED_PROTOBUF), rng, rng.randrange(1, 6)), PROTOBUF
    elif kind <= 3:
        body = encode_json(mutate_json(rng.choice(SEED_JSON), rng, rng.randrange(1, 4), json_replacement), rng)
        media = JSON
        if rng.random() < 0.2:
            body = mutate_bytes(body, rng, 1)
    elif kind == 4:  # a valid body whose compression is mutated
        media = rng.choice([PROTOBUF, JSON])
        plain = rng.choice(SEED_PROTOBUF) if media == PROTOBUF else encode_json(rng.choice(SEED_JSON), rng)
        body = mutate_bytes(gzip.compress(plain), rng, rng.randrange(1, 4))
        return body, {"Content-Type": media, "Content-Encoding": "gzip"}
    else:  # a mutated body, compressed intact, or sent with the other media type
        media = rng.choice([PROTOBUF, JSON])
        seed = rng.choice(SEED_PROTOBUF) if rng.random() < 0.5 else encode_json(rng.choice(SEED_JSON), rng)
        body = mutate_bytes(seed, rng, rng.randrange(0, 3))
        if rng.random() < 0.5:
            encoding = rng.choice(["gzip", "deflate"])
            body = gzip.compress(body) if encoding == "gzip" else zlib.compress(body)
            return body, {"Content-Type": media, "Content-Encoding": encoding}
    return body, {"Content-Type": media}


def check_response(status: int, headers, content: bytes) -> str:
    """Raise AssertionError unless the answer is a non-5xx, parseable OTLP answer; return a label."""
    assert status < 500, f"HTTP {status}: {content[:300]!r}"
    media = headers.get("Content-Type", "").split(";")[0].strip()
    assert media in (PROTOBUF, JSON), f"HTTP {status} with Content-Type {media!r}"
    if status == 200:
        if media == PROTOBUF:
            ExportTraceServiceResponse.FromString(content)
        else:
            json_format.Parse(content, ExportTraceServiceResponse())
        return "200"
    if media == PROTOBUF:
        parsed = status_pb2.Status.FromString(content)
    else:
        parsed = json_format.Parse(content, status_pb2.Status())
    assert parsed.message, f"HTTP {status} with an empty Status message"
    assert parsed.code != 0, f"HTTP {status} with Status code OK"
    return str(status)

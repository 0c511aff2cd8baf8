"""The OTLP/gRPC receiver: `TraceService/Export` on grpc.aio, in the same event loop as aiohttp.

The method is registered with raw-bytes deserialization so that the body goes through the same
`Ingest.export` path as OTLP/HTTP protobuf: a body that does not parse is INVALID_ARGUMENT with
our message (gRPC's own deserializer would answer UNKNOWN), and its size is charged to the same
in-flight budget. Compression (gzip) and the message size limit (checked after decompression)
are gRPC's own.

It is registered as a client-streaming method (the wire format of a unary call is the same), so
that the handler runs before gRPC reads the message: a call without the bearer token, beyond
`--grpc-max-concurrent-rpcs`, or while the process is above its soft memory limit, is answered
without its message being buffered. A call takes the largest message size from the in-flight share
before its message is read, and gives back what the message did not need once it is. The concurrency
limit is ours rather than grpc.aio's `maximum_concurrent_rpcs`, which answers RESOURCE_EXHAUSTED
without retry information (an exporter in Go or Java then drops the batch): ours answers
UNAVAILABLE with a RetryInfo, like every other overload.
"""

from __future__ import annotations

import logging

import grpc
from google.rpc import code_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from meritlens.collector.process import _otlp
from meritlens.collector.receive._auth import AUTHORIZATION, BearerToken
from meritlens.collector.receive._ingest import Ingest, IngestError, bad_request, overloaded
from meritlens.collector.receive._refusals import RefusalLog

log = logging.getLogger("meritlens.collector.grpc")

SERVICE_NAME = trace_service_pb2.DESCRIPTOR.services_by_name["TraceService"].full_name
STATUS_DETAILS_KEY = "grpc-status-details-bin"
"""Trailing metadata holding the full `google.rpc.Status` (with its RetryInfo detail)."""
RETRY_INFO_KEY = "google.rpc.retryinfo-bin"
"""Trailing metadata the OpenTelemetry Python exporter reads a `google.rpc.RetryInfo` from."""

_GRPC_CODES = {code.value[0]: code for code in grpc.StatusCode}


class TraceServiceReceiver(trace_service_pb2_grpc.TraceServiceServicer):
    """OTLP `TraceService` whose `Export` receives the serialized request, at most
    ``max_concurrent_rpcs`` calls at a time."""

    def __init__(self, ingest: Ingest, token: BearerToken, *, max_concurrent_rpcs: int, max_message_bytes: int):
        self._ingest = ingest
        self._token = token
        self._max_concurrent_rpcs = max_concurrent_rpcs
        self._max_message_bytes = max_message_bytes
        self._active = 0  # calls in Export; the event loop is the only thread that changes it
        self._refusals = RefusalLog(withheld=(grpc.StatusCode.INVALID_ARGUMENT.name,) if ingest.redacting else ())

    async def Export(self, requests, context: grpc.aio.ServicerContext):  # gRPC method name
        """One OTLP export: ``requests`` yields the call's single serialized message."""
        metadata = dict(context.invocation_metadata() or ())
        if not self._token.accepts(metadata.get(AUTHORIZATION)):
            await self._abort(context, IngestError(
                401, code_pb2.UNAUTHENTICATED,
                "missing or wrong bearer token: send metadata 'authorization: Bearer <token>'",
            ))
        if self._active >= self._max_concurrent_rpcs:
            await self._abort(context, overloaded(
                f"the collector is handling {self._active} gRPC calls already (--grpc-max-concurrent-rpcs)",
                "grpc_calls"))
        self._active += 1
        try:
            return await self._export(requests, context)
        finally:
            self._active -= 1

    async def _export(self, requests, context: grpc.aio.ServicerContext):
        failure = None
        with self._ingest.reservation() as reservation:
            try:
                # the message's size is known once gRPC holds all of it; until then the call holds the largest
                self._ingest.admit()
                reservation.ensure(self._max_message_bytes)
                messages = aiter(requests)
                request = await anext(messages, None)
                if request is None or await anext(messages, None) is not None:
                    raise bad_request("an Export call carries exactly one ExportTraceServiceRequest")
                reservation.shrink(len(request))
                outcome = await self._ingest.export(request, _otlp.PROTOBUF, reservation)
            except IngestError as err:
                failure = err
        if failure is not None:
            await self._abort(context, failure)
        return _otlp.export_response(outcome.rejected, outcome.message)

    async def _abort(self, context: grpc.aio.ServicerContext, err: IngestError) -> None:
        err = self._ingest.refused(err)
        code = _GRPC_CODES.get(err.rpc_code, grpc.StatusCode.UNKNOWN)
        self._refusals.note(code.name, "gRPC TraceService/Export", err.message, context.peer())
        status = _otlp.rpc_status(err.rpc_code, err.message, err.retry_after_s)
        trailing = [(STATUS_DETAILS_KEY, status.SerializeToString())]
        if err.retry_after_s is not None:
            trailing.append((RETRY_INFO_KEY, _otlp.retry_info(err.retry_after_s).SerializeToString()))
        await context.abort(code, err.message, tuple(trailing))


def add_receiver(server: grpc.aio.Server, receiver: TraceServiceReceiver) -> None:
    handler = grpc.stream_unary_rpc_method_handler(
        receiver.Export,
        request_deserializer=None,  # bytes: decoded by Ingest, like an HTTP body
        response_serializer=trace_service_pb2.ExportTraceServiceResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, {"Export": handler}),))


def create_server(receiver: TraceServiceReceiver, *, max_message_bytes: int) -> grpc.aio.Server:
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", 4 * 1024 * 1024),
            # A second collector on the same port must fail to start, not share the port silently.
            ("grpc.so_reuseport", 0),
        ],
    )
    add_receiver(server, receiver)
    return server


def bind(server: grpc.aio.Server, host: str, port: int, *, cert: bytes | None = None, key: bytes | None = None) -> int:
    """Listen on host:port (TLS when cert and key are given); returns the bound port."""
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        if cert is not None:
            bound = server.add_secure_port(address, grpc.ssl_server_credentials([(key, cert)]))
        else:
            bound = server.add_insecure_port(address)
    except RuntimeError:
        bound = 0
    if not bound:
        raise OSError(f"cannot listen for OTLP/gRPC on {address}")
    return bound

"""Receiving: OTLP over HTTP and gRPC, bearer-token auth and request limits (transports only)."""

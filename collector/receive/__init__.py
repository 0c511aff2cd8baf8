"""Receiving: OTLP over HTTP and gRPC (bearer-token auth, request limits) and the one ingest path
behind both, up to durable staging."""

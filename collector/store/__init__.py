"""Storing: the DuckDB span store (open, idempotent append, staging, read-only queries)."""

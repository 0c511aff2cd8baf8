"""Storing: the DuckDB span store (open, idempotent append, read-only queries), the staging every
span store shares, and what a span store offers."""

"""Processing: OTLP decoding, validation and normalization into span rows (the native scanner and its Python twin)."""

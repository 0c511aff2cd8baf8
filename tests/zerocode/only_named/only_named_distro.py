"""The standard OpenTelemetry distro, loading only the GenAI instrumentors named in ONLY_INSTRUMENTORS
(comma-separated module prefixes; meritlens' own is always loaded). All three third-party openai
instrumentors register under the entry-point name `openai`, so OTEL_PYTHON_DISABLED_INSTRUMENTATIONS cannot
pick one of them: this stands for a venv in which only those are installed.

Found by the agent through only_named_distro-0.dist-info when this folder is on PYTHONPATH; chosen with
OTEL_PYTHON_DISTRO=only_named.
"""

from __future__ import annotations

import os

from opentelemetry.distro import OpenTelemetryDistro


class OnlyNamedInstrumentors(OpenTelemetryDistro):
    def load_instrumentor(self, entry_point, **kwargs):
        named = [m for m in os.environ.get("ONLY_INSTRUMENTORS", "").split(",") if m]
        if entry_point.value.startswith("meritlens.") or any(entry_point.value.startswith(m) for m in named):
            super().load_instrumentor(entry_point, **kwargs)

"""The collector's HTTP API: the path of each route, and the headers and media types its clients rely on."""

TRACES_PATH = "/v1/traces"
SQL_PATH = "/api/sql"
READINESS_PATH = "/api/readiness"
EXPERIMENTS_PATH = "/api/experiments"
"""POST an experiment manifest {"manifest": {...}} to create or update it."""
HEALTH_PATH = "/healthz"
WINDOWS_PATH = "/api/windows"
"""POST evaluated windows {"windows": [...]} (written by `meritlens evaluate` when a collector holds the file)."""
WINDOWS_RANGE_PATH = "/api/windows/range"
"""POST {"since_us", "until_us", "target", "scope"}: the windows of a time range (from the windows by time)."""

# The dashboard page, the read-only JSON endpoints it reads, and the Arrow export endpoint
# (collector/serve/_dashboard.py).
DASHBOARD_PATH = "/"
STATIC_PATH_PREFIX = "/static/"
"""The page and its static files carry no data: they are served without the bearer token."""
API_TARGETS_PATH = "/api/dashboard/targets"
API_WINDOWS_PATH = "/api/dashboard/windows"
API_TASKS_PATH = "/api/dashboard/tasks"
API_PROFILES_PATH = "/api/dashboard/profiles"
API_ARROW_PATH = "/api/arrow"
ARROW_STREAM_MEDIA_TYPE = "application/vnd.apache.arrow.stream"
ARROW_ROW_COUNT_HEADER = "X-Meritlens-Row-Count"
FORGET_PATH = "/api/forget"
"""POST {"where": "<SQL condition over spans>", "yes": false}: the spans it matches, removed with "yes" (the
windows then equal those of a collector that never received them)."""

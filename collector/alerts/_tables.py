"""Where alert state lives in the collector's DuckDB file, so that a restart neither fires again nor
loses a resolution, and deliveries not yet acknowledged go on after it:

- ``alert_states``: one row per (rule, target): firing or not, since when, the last event's id, the
  end of a silence, and the last evaluation (JSON);
- ``alert_deliveries``: one row per event (a transition), with its JSON body, attempts, when it is
  tried next and when the webhook acknowledged it.

Times are µs since the epoch. Users read both tables with SQL like any other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import duckdb

STATES_TABLE = "alert_states"
DELIVERIES_TABLE = "alert_deliveries"
DDL = (
    f"CREATE TABLE IF NOT EXISTS {STATES_TABLE} (rule VARCHAR NOT NULL, target_id VARCHAR NOT NULL, profile VARCHAR,"
    " metric VARCHAR, kind VARCHAR, firing BOOLEAN NOT NULL, since_us BIGINT, last_event_id VARCHAR,"
    " silenced_until_us BIGINT, evaluated_us BIGINT, evaluation VARCHAR, PRIMARY KEY (rule, target_id))",
    f"CREATE TABLE IF NOT EXISTS {DELIVERIES_TABLE} (event_id VARCHAR PRIMARY KEY, rule VARCHAR NOT NULL,"
    " target_id VARCHAR NOT NULL, state VARCHAR NOT NULL, body VARCHAR NOT NULL, created_us BIGINT NOT NULL,"
    " attempts INTEGER NOT NULL, next_attempt_us BIGINT NOT NULL, delivered_us BIGINT, last_error VARCHAR)",
)
STATE_COLUMNS = ("rule", "target_id", "profile", "metric", "kind", "firing", "since_us", "last_event_id",
                 "silenced_until_us", "evaluated_us", "evaluation")


@dataclass
class AlertState:
    """One rule's state for one target (a row of ``alert_states``)."""

    rule: str
    target_id: str
    profile: str
    metric: str
    kind: str
    firing: bool = False
    since_us: int | None = None
    last_event_id: str | None = None
    silenced_until_us: int | None = None
    evaluated_us: int | None = None
    evaluation: dict | None = None

    def silenced(self, now_us: int) -> bool:
        return self.silenced_until_us is not None and self.silenced_until_us > now_us

    def row(self) -> list:
        return [self.rule, self.target_id, self.profile, self.metric, self.kind, self.firing, self.since_us,
                self.last_event_id, self.silenced_until_us, self.evaluated_us,
                None if self.evaluation is None else json.dumps(self.evaluation)]

    @classmethod
    def of_row(cls, row) -> AlertState:
        values = dict(zip(STATE_COLUMNS, row, strict=True))
        values["evaluation"] = None if values["evaluation"] is None else json.loads(values["evaluation"])
        return cls(**values)


def create_tables(con: duckdb.DuckDBPyConnection) -> None:
    for statement in DDL:
        con.execute(statement)


def has_tables(con: duckdb.DuckDBPyConnection) -> bool:
    found = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [STATES_TABLE]).fetchall()
    return bool(found[0][0])


def load_states(con: duckdb.DuckDBPyConnection) -> list[AlertState]:
    rows = con.execute(f"SELECT {', '.join(STATE_COLUMNS)} FROM {STATES_TABLE} ORDER BY rule, target_id").fetchall()
    return [AlertState.of_row(row) for row in rows]


def save_state(con: duckdb.DuckDBPyConnection, state: AlertState) -> None:
    con.execute(f"INSERT OR REPLACE INTO {STATES_TABLE} ({', '.join(STATE_COLUMNS)}) VALUES"
                f" ({', '.join('?' for _ in STATE_COLUMNS)})", state.row())


def add_delivery(con: duckdb.DuckDBPyConnection, event_id: str, state: AlertState, body: bytes, created_us: int,
                 first_attempt_us: int) -> None:
    con.execute(f"INSERT OR IGNORE INTO {DELIVERIES_TABLE} (event_id, rule, target_id, state, body, created_us,"
                " attempts, next_attempt_us) VALUES (?, ?, ?, ?, ?, ?, 0, ?)",
                [event_id, state.rule, state.target_id, "fired" if state.firing else "resolved", body.decode(),
                 created_us, first_attempt_us])


def drop_undelivered(con: duckdb.DuckDBPyConnection, event_id: str) -> int:
    """Forget an event not delivered yet (a silenced alert that resolved): how many were forgotten."""
    return len(con.execute(f"DELETE FROM {DELIVERIES_TABLE} WHERE event_id = ? AND delivered_us IS NULL RETURNING 1",
                           [event_id]).fetchall())


def silence(con: duckdb.DuckDBPyConnection, rule: str, target: str | None, until_us: int) -> list[AlertState]:
    """Silence ``rule`` (for ``target``, else every target) until ``until_us``: its events wait until then.
    Returns the states silenced (none: no such rule)."""
    rows = con.execute(f"UPDATE {STATES_TABLE} SET silenced_until_us = ? WHERE rule = ? AND (? IS NULL OR"
                       f" target_id = ?) RETURNING {', '.join(STATE_COLUMNS)}",
                       [until_us, rule, target, target]).fetchall()
    hold_until(con, rule, target, until_us)
    return [AlertState.of_row(row) for row in rows]


def hold_until(con: duckdb.DuckDBPyConnection, rule: str, target: str | None, until_us: int) -> None:
    """Undelivered events of a silenced rule wait until the silence ends."""
    con.execute(f"UPDATE {DELIVERIES_TABLE} SET next_attempt_us = greatest(next_attempt_us, ?) WHERE rule = ?"
                " AND (? IS NULL OR target_id = ?) AND delivered_us IS NULL", [until_us, rule, target, target])


def pending(con: duckdb.DuckDBPyConnection) -> list[tuple[str, tuple[str, str], bytes, int, int]]:
    """(event id, (rule, target), body, attempts, next attempt) of every undelivered event, oldest first."""
    rows = con.execute(f"SELECT event_id, rule, target_id, body, attempts, next_attempt_us FROM {DELIVERIES_TABLE}"
                       " WHERE delivered_us IS NULL ORDER BY created_us, event_id").fetchall()
    return [(event_id, (rule, target), body.encode(), attempts, next_us)
            for event_id, rule, target, body, attempts, next_us in rows]


def delivered(con: duckdb.DuckDBPyConnection, event_id: str, attempts: int, at_us: int) -> None:
    con.execute(f"UPDATE {DELIVERIES_TABLE} SET delivered_us = ?, attempts = ?, last_error = NULL WHERE event_id = ?",
                [at_us, attempts, event_id])


def failed(con: duckdb.DuckDBPyConnection, event_id: str, attempts: int, next_us: int, error: str) -> None:
    con.execute(f"UPDATE {DELIVERIES_TABLE} SET attempts = ?, next_attempt_us = ?, last_error = ? WHERE event_id = ?",
                [attempts, next_us, error[:500], event_id])


def delivery_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Events delivered and waiting."""
    row = con.execute(f"SELECT count(delivered_us), count(*) - count(delivered_us) FROM {DELIVERIES_TABLE}").fetchall()
    return {"delivered": int(row[0][0]), "pending": int(row[0][1])}


__all__ = ["AlertState", "DELIVERIES_TABLE", "STATES_TABLE", "add_delivery", "create_tables", "delivered",
           "delivery_counts", "drop_undelivered", "failed", "has_tables", "hold_until", "load_states", "pending",
           "save_state", "silence"]

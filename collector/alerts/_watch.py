"""The collector's alert component: the `[[alerts]]` rules of the loaded profiles, evaluated after every
window pass that changes a watched target (`WindowProcessor.on_windows`) and every ``interval_s``
(no-data rules, a new range), on the windows of each rule's range (`WindowProcessor.range_windows`).

A rule is evaluated by `meritlens.analytics._alerts` on the merged state of its current range (a
regression: against the merged state of its baseline range, taken once per range); a no-data rule
fires while the target's last sample of its metric ended a range or more ago. A transition (fired,
resolved) is saved with its event in one transaction (`_tables`); the webhook sender delivers it.
A silenced rule keeps being evaluated; its events wait until the silence ends, and an event not
delivered yet is dropped with the resolution that follows it while silenced.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

from meritlens.analytics.engine import (
    DEFINITIONS_BY_METRIC,
    METRICS,
    NO_DATA,
    SCOPE_ALL,
    WINDOWS_BY_TIME_TABLE,
    ProfileAlert,
    RuleKind,
    TaskProfile,
    WindowAccumulator,
    evaluate_rule,
    no_data,
    sequence_start,
    sql_string,
)
from meritlens.collector.alerts import _tables
from meritlens.collector.alerts._config import AlertConfig
from meritlens.collector.alerts._tables import AlertState
from meritlens.collector.alerts._webhook import WebhookSender
from meritlens.collector.store._database import now_us, transaction, utc_now

log = logging.getLogger("meritlens.collector.alerts")

MIN_GAP_S = 1.0
"""Evaluations after window passes are at least this far apart: a busy collector passes every second."""
_EVENTS = uuid.UUID("5b0f0a53-2a43-4d4a-9a55-6d3c8e0f4e11")
"""The namespace of event ids: uuid5 of (rule, target, state, time of the transition)."""


@dataclass(frozen=True)
class WatchedRule:
    """One `[[alerts]]` rule of a loaded profile, for the profile's target."""

    profile: str
    target: str
    alert: ProfileAlert

    @property
    def key(self) -> tuple[str, str]:
        return self.alert.name, self.target


def watched_rules(profiles: list[tuple[str, TaskProfile]]) -> list[WatchedRule]:
    """Every rule of the loaded (name, profile) pairs; ValueError when two name the same (rule, target)."""
    rules: dict[tuple[str, str], WatchedRule] = {}
    for name, profile in profiles:
        for alert in profile.alerts:
            rule = WatchedRule(name, profile.target, alert)
            if rule.key in rules:
                raise ValueError(f"alert rule {alert.name!r} for {profile.target} is in profiles"
                                 f" {rules[rule.key].profile} and {name}: rename one of them")
            rules[rule.key] = rule
    return list(rules.values())


@dataclass(frozen=True)
class _Judgement:
    firing: bool
    evaluation: dict
    evidence: dict


def _plain(value):
    """``value`` with numpy numbers as Python's (JSON-ready)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value.item() if hasattr(value, "item") else value


def _iso(us: int) -> str:
    return (_dt.datetime(1970, 1, 1, tzinfo=_dt.UTC) + _dt.timedelta(microseconds=us)).isoformat()


class AlertWatcher:
    """Evaluates ``rules`` on ``windows`` (a `WindowProcessor`) and keeps their state in ``store``'s
    database; `start()`, then `shutdown()`. ``base_url()``: the collector's URL, for the links of events."""

    def __init__(self, store, windows, rules: list[WatchedRule], config: AlertConfig,
                 base_url: Callable[[], str | None] = lambda: None, clock: Callable[[], int] = now_us):
        self._store = store
        self._windows = windows
        self.rules = rules
        self.config = config
        self._base_url = base_url
        self._clock = clock
        self._targets = {rule.target for rule in rules}
        self._lock = threading.RLock()
        """Guards the states and the connection."""
        self._states: dict[tuple[str, str], AlertState] = {}
        self._baselines: dict[tuple, object] = {}
        """A regression's baseline windows by (target, start, end): merged once per range."""
        self._passes = 0
        """Window passes that changed a watched target (a baseline merged before one may miss its spans)."""
        self._con = None
        self.sender: WebhookSender | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.evaluations = 0

    # --- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        self._con = self._store.connection()
        with self._lock, self._store.write_lock, transaction(self._con):
            _tables.create_tables(self._con)
            saved = {(s.rule, s.target_id): s for s in _tables.load_states(self._con)}
            for rule in self.rules:
                state = saved.get(rule.key) or AlertState(rule.alert.name, rule.target, rule.profile, rule.alert.metric,
                                                          rule.alert.kind)
                state.profile, state.metric, state.kind = rule.profile, rule.alert.metric, rule.alert.kind
                self._states[rule.key] = state
                _tables.save_state(self._con, state)
        if self.config.webhook_url:
            self.sender = WebhookSender(self._store.connection(), self._store.write_lock, self.config, self._clock)
            self.sender.start()
        self._windows.on_windows = self.windows_changed
        self._thread = threading.Thread(target=self._run, name="meritlens-alerts", daemon=True)
        self._thread.start()
        log.info("evaluating %d alert rules%s", len(self.rules),
                 f"; events go to {self.config.webhook_url}" if self.sender else " (no webhook)")

    def shutdown(self) -> None:
        self._windows.on_windows = None
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.sender is not None:
            self.sender.shutdown()
        with self._lock:
            if self._con is not None:
                self._con.close()
                self._con = None

    def windows_changed(self, keys: set[tuple]) -> None:
        """After a window pass: evaluate again when a watched target changed, and forget the baselines a
        changed time bucket (a late span) overlaps."""
        if self._targets.isdisjoint(k[0] for k in keys):
            return
        late = [k for k in keys if len(k) == 4]
        with self._lock:
            self._baselines = {b: v for b, v in self._baselines.items()
                               if not any(k[0] == b[0] and k[2] < b[2] and k[2] + k[3] > b[1] for k in late)}
            self._passes += 1
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.evaluate()
            except Exception:  # noqa: BLE001 - the next round evaluates again
                log.exception("evaluating the alert rules failed")
            self._wake.wait(self.config.interval_s)
            self._wake.clear()
            self._stop.wait(MIN_GAP_S)

    # --- reading ----------------------------------------------------------------------------------
    def states(self) -> list[dict]:
        """Every rule's state for its target, as `meritlens alerts` shows it."""
        now = self._clock()
        with self._lock:
            return [state_view(state, now) for state in self._states.values()]

    def silence(self, rule: str, target: str | None, until_us: int) -> list[dict]:
        """Silence a rule (for one target, else all of its targets) until ``until_us``; ValueError names an
        unknown rule or target."""
        keys = [k for k in self._states if k[0] == rule and (target is None or k[1] == target)]
        if not keys:
            known = sorted({k[0] for k in self._states})
            raise ValueError(f"no alert rule {rule!r}{f' for target {target!r}' if target else ''};"
                             f" rules: {', '.join(known) or 'none (no loaded profile has [[alerts]])'}")
        with self._lock, self._store.write_lock, transaction(self._con):
            silenced = _tables.silence(self._con, rule, target, until_us)
            for state in silenced:
                self._states[(state.rule, state.target_id)].silenced_until_us = until_us
        if self.sender is not None:
            self.sender.wake()
        now = self._clock()
        return [state_view(self._states[(s.rule, s.target_id)], now) for s in silenced]

    # --- evaluating -------------------------------------------------------------------------------
    def evaluate(self) -> int:
        """Evaluate every rule once; returns the number of transitions."""
        if self._windows.replay_until_us is not None:  # the windows are catching up with the stored spans
            return 0
        now = self._clock()
        ranges: dict[tuple, object] = {}
        transitions = 0
        for rule in self.rules:
            try:
                judged = self._judge(rule, now, ranges)
            except Exception:  # noqa: BLE001 - one rule's failure leaves the others
                log.exception("evaluating alert rule %s for %s failed", *rule.key)
                continue
            transitions += self._record(rule, judged, now)
        self.evaluations += 1
        return transitions

    def _ranged(self, ranges: dict, target: str, since: int, until: int | None):
        key = (target, since, until)
        if key not in ranges:
            ranges[key] = self._windows.range_windows(since, until, target, SCOPE_ALL)
        return ranges[key]

    def _state(self, ranged, target: str, metric: str) -> WindowAccumulator:
        found = ranged.book.state((target, SCOPE_ALL), metric)
        return found if found is not None else WindowAccumulator.empty(DEFINITIONS_BY_METRIC[metric],
                                                                       self._windows.book.scale)

    def _judge(self, rule: WatchedRule, now: int, ranges: dict) -> _Judgement:
        alert, target = rule.alert, rule.target
        firing = self._states[rule.key].firing
        if alert.kind == NO_DATA:
            since = now - alert.range_us
            ranged = self._ranged(ranges, target, since, None)
            silent = no_data(ranged.book.state((target, SCOPE_ALL), alert.metric), now, alert.range_us)
            evaluation = {"metric": alert.metric, "kind": NO_DATA, "firing": silent.silent,
                          "transition": None if silent.silent == firing else "fired" if silent.silent else "resolved",
                          "evidence": "no_data" if silent.silent else "data", "last_sample_us": silent.last_sample_us,
                          "silent_for_us": silent.silent_for_us, "range_us": alert.range_us}
            return _Judgement(silent.silent, evaluation, self._evidence(target, alert.metric, [("current", since, now)],
                                                                        ranged=[ranged]))
        start = sequence_start(alert.rule, now)
        current = self._ranged(ranges, target, start, None)
        spans = [("current", start, now)]
        baseline = None
        if alert.rule.kind is RuleKind.REGRESSION:
            key = (target, start - alert.baseline_us, start)
            with self._lock:  # kept while no late span changes its buckets (`windows_changed`)
                baseline, passes = self._baselines.get(key), self._passes
            if baseline is None:
                baseline = self._windows.range_windows(key[1], key[2], target, SCOPE_ALL)
                with self._lock:
                    self._baselines = {k: v for k, v in self._baselines.items() if k[2] == start}
                    if passes == self._passes:  # else a pass may have changed it meanwhile: read it again next time
                        self._baselines[key] = baseline
            spans.append(("baseline", key[1], key[2]))
        result = evaluate_rule(alert.rule, self._state(current, target, alert.metric),
                               baseline=None if baseline is None else self._state(baseline, target, alert.metric),
                               firing=firing)
        evaluation = {**_plain(result.to_dict()), "confidence": alert.rule.confidence,
                      "min_samples": alert.rule.min_samples, "range_us": alert.range_us, "range_start_us": start}
        ranged = [current] + ([baseline] if baseline is not None else [])
        return _Judgement(result.firing, evaluation, self._evidence(target, alert.metric, spans, ranged=ranged))

    def _evidence(self, target: str, metric: str, spans: list[tuple[str, int, int]], ranged: list) -> dict:
        """Links to the windows of each range (their evidence URI, digest and the `windows_by_time` rows
        they merge) and to the spans behind them (the dashboard's traces and evidence views)."""
        base = (self._base_url() or "").rstrip("/")
        db_name, now = self._store.db_name, utc_now()
        windows = []
        for (name, since, until), merged in zip(spans, ranged, strict=True):
            row = next((w for w in merged.windows(db_name, now) if w.metric == metric and w.scope == SCOPE_ALL), None)
            covered = (merged.start_us, merged.end_us) if merged.start_us is not None else (since, until)
            windows.append({
                "range": name, "from": _iso(since), "to": _iso(until),
                "samples": row.sample_count if row is not None else 0,
                "uri": row.evidence_uri if row is not None else None,
                "digest": row.evidence_digest if row is not None else None,
                "sql": (f"SELECT * FROM {WINDOWS_BY_TIME_TABLE} WHERE target_id = {sql_string(target)} AND metric ="
                        f" {sql_string(metric)} AND scope = '{SCOPE_ALL}' AND bucket_start >="
                        f" '{_iso(covered[0])}'::TIMESTAMPTZ AND bucket_start < '{_iso(covered[1])}'::TIMESTAMPTZ"
                        " ORDER BY bucket_start"),
                "spans": f"{base}/?" + urlencode({"view": "traces", "target": target, "range": "custom",
                                                  "from": _iso(since), "to": _iso(until)}),
            })
        window_page = f"{base}/?" + urlencode({"view": "evidence", "target": target, "scope": SCOPE_ALL,
                                               "metric": metric})
        return {"windows": windows, "window": window_page}

    def _record(self, rule: WatchedRule, judged: _Judgement, now: int) -> int:
        """Save the evaluation; on a transition, the new state and its event together. Returns 1 on a transition."""
        with self._lock:
            if self._con is None:
                return 0
            state = self._states[rule.key]
            transition = judged.firing != state.firing
            state.evaluation = {**judged.evaluation, "links": judged.evidence}
            state.evaluated_us = now
            previous_event = state.last_event_id
            if transition:
                state.firing, state.since_us = judged.firing, now
                state.last_event_id = str(uuid.uuid5(_EVENTS, f"{rule.alert.name}\n{rule.target}\n"
                                                              f"{'fired' if judged.firing else 'resolved'}\n{now}"))
            with self._store.write_lock, transaction(self._con):
                _tables.save_state(self._con, state)
                if transition and self.sender is not None:
                    silenced = state.silenced(now)
                    if silenced and not judged.firing and _tables.drop_undelivered(self._con, previous_event or ""):
                        log.info("alert %s for %s resolved while silenced before its event went out: neither is sent",
                                 *rule.key)
                    else:
                        body = json.dumps(event_body(rule, state, judged, now), sort_keys=True).encode()
                        _tables.add_delivery(self._con, state.last_event_id, state, body, now,
                                             max(now, state.silenced_until_us or 0))
        if transition:
            log.warning("alert %s for %s %s (%s)", rule.alert.name, rule.target,
                        "fired" if judged.firing else "resolved", judged.evaluation.get("evidence"))
            if self.sender is not None:
                self.sender.wake()
        return int(transition)


def event_body(rule: WatchedRule, state: AlertState, judged: _Judgement, now: int) -> dict:
    """The webhook's JSON (docs/alerts.md, "The webhook")."""
    e = judged.evaluation
    return {
        "event_id": state.last_event_id, "rule": rule.alert.name, "profile": rule.profile, "target": rule.target,
        "metric": rule.alert.metric, "kind": rule.alert.kind, "state": "fired" if judged.firing else "resolved",
        "time": _iso(now), "value": e.get("value"), "bound": e.get("bound"), "threshold": e.get("threshold"),
        "samples": e.get("samples"), "baseline_samples": e.get("baseline_samples"),
        "confidence": e.get("confidence"), "method": e.get("method", NO_DATA), "statistic": e.get("statistic"),
        "evaluation": e, "evidence": judged.evidence,
    }


def state_view(state: AlertState, now: int) -> dict:
    """A rule's state as the API, the CLI and the dashboard show it."""
    evaluation = state.evaluation or {}
    status = ("silenced" if state.silenced(now) else "firing") if state.firing else "ok"
    return {"rule": state.rule, "target": state.target_id, "profile": state.profile, "metric": state.metric,
            "kind": state.kind, "status": status, "firing": state.firing,
            "since": _iso(state.since_us) if state.since_us is not None else None,
            "silenced_until": _iso(state.silenced_until_us) if state.silenced(now) else None,
            "last_event_id": state.last_event_id,
            "evaluated": _iso(state.evaluated_us) if state.evaluated_us is not None else None,
            "evidence": evaluation.get("evidence"), "value": evaluation.get("value"),
            "bound": evaluation.get("bound"), "threshold": evaluation.get("threshold"),
            "samples": evaluation.get("samples"),
            "unit": METRICS[state.metric].unit if state.metric in METRICS else None,
            "links": evaluation.get("links")}


__all__ = ["AlertWatcher", "WatchedRule", "event_body", "state_view", "watched_rules"]

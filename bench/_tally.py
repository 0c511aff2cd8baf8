"""What the windows must count of the generated spans (bench/spangen.py), per target.

A request's `Tally` is the change its spans make: summed over the requests a store acknowledged, it is
what the store's `spans` and `windows` (scope all) hold, exactly, wherever the requests stop (a task
continuing in a later request changes its samples part by part).
"""

from __future__ import annotations

import numpy as np

TALLY_FIELDS = ("spans", "tasks", "llm_calls", "tool_spans", "error_spans", "continued_spans", "continued_tasks",
                "token_tasks", "input_tokens", "output_tokens", "cost_usd", "span_input_tokens", "max_tokens")
"""What a request adds, per target: its spans; tasks first seen in it; LLM-call and tool spans; spans with an
error status; spans, and tasks, continuing a task first seen in an earlier request; the change it makes to
the tasks whose every LLM call so far reported usage (the samples of the token and cost windows), to those
tasks' input and output tokens and cost; the sums of input tokens and of ``gen_ai.request.max_tokens``
over its LLM spans."""
_F = {name: i for i, name in enumerate(TALLY_FIELDS)}


def target_names(targets: int) -> list[str]:
    return [f"bot-{t}" for t in range(targets)]


class Tally:
    """Per target and field (`TALLY_FIELDS`), what a set of requests adds to the windows' evidence."""

    def __init__(self, targets: int, matrix: np.ndarray | None = None):
        self.names = target_names(targets)
        self.matrix = np.zeros((targets, len(TALLY_FIELDS))) if matrix is None else matrix

    def __iadd__(self, other: Tally) -> Tally:
        self.matrix = self.matrix + other.matrix
        return self

    def total(self, field: str) -> float:
        return float(self.matrix[:, _F[field]].sum())

    def by_target(self, field: str) -> dict[str, float]:
        """Targets with anything in this tally, to the field's value (integers as int)."""
        column, seen = self.matrix[:, _F[field]], self.matrix[:, _F["spans"]] > 0
        as_int = field != "cost_usd"
        rows = zip(self.names, column.tolist(), seen, strict=True)
        return {n: (int(v) if as_int else float(v)) for n, v, s in rows if s}

    def to_json(self) -> dict:
        return {"targets": len(self.names), "matrix": self.matrix.tolist()}

    @classmethod
    def from_json(cls, doc: dict) -> Tally:
        return cls(doc["targets"], np.array(doc["matrix"], dtype=float).reshape(doc["targets"], len(TALLY_FIELDS)))


def tally_rows(d: dict, tasks: int, max_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per task of a chunk drawn by `SpanStream.draw` (``tasks`` tasks; ``max_tokens``: each task's
    ``gen_ai.request.max_tokens``), the tally row of its first part, of its later part (zeros when it
    is not drawn to continue) and of the task sent whole."""
    offset, n_children = d["t_offset"], d["t_children"]
    task = np.repeat(np.arange(tasks), n_children)
    j = np.arange(task.size) - offset[task]
    calls = ~d["s_tool"]
    first = j < d["t_split"][task]

    def per_task(values, where):
        return np.add.reduceat(np.where(where, values, 0), offset)

    rows = []
    for part in (first, np.ones_like(first)):
        r = np.zeros((tasks, len(TALLY_FIELDS)))
        r[:, _F["llm_calls"]] = per_task(1, calls & part)
        r[:, _F["tool_spans"]] = per_task(1, d["s_tool"] & part)
        r[:, _F["error_spans"]] = per_task(1, d["s_failed"] & part)
        usable = (r[:, _F["llm_calls"]] > 0) & (per_task(1, calls & d["s_failed"] & part) == 0)
        r[:, _F["token_tasks"]] = usable
        for field, values in (("input_tokens", d["s_input"]), ("output_tokens", d["s_output"]),
                              ("cost_usd", d["s_cost"])):
            r[:, _F[field]] = np.where(usable, per_task(values, calls & part), 0)
        r[:, _F["span_input_tokens"]] = per_task(d["s_input"], calls & ~d["s_failed"] & part)
        r[:, _F["max_tokens"]] = per_task(max_tokens[task], calls & part)
        rows.append(r)
    whole = rows[1]
    whole[:, _F["spans"]], whole[:, _F["tasks"]] = d["t_spans"], 1
    head = rows[0]
    head[:, _F["spans"]] = np.minimum(d["t_split"], d["t_spans"])
    head[:, _F["tasks"]] = 1
    tail = whole - head
    tail[:, _F["continued_spans"]] = tail[:, _F["spans"]]
    tail[:, _F["continued_tasks"]] = tail[:, _F["spans"]] > 0
    return head, tail, whole

"""A metric in its own package: the mean number of LLM calls per task of a target's scope."""

from __future__ import annotations

from meritlens.analytics import Aggregation, Measurement, Metric

LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})


class CallsPerTask(Metric):
    """Mean LLM calls per task; not applicable to a scope with no LLM call."""

    name = "calls_per_task"
    unit = "calls/task"
    aggregation = Aggregation.MEAN

    def compute(self, evidence, *, run_dir, options, judge):
        calls = [[s for s in task.spans if s.operation in LLM_OPERATIONS] for task in evidence.tasks]
        counts = [len(c) for c in calls if c]
        if not counts:
            return self.not_applicable(evidence, "no task made an LLM call")
        mean = sum(counts) / len(counts)
        keys = frozenset(span.key for task_calls in calls for span in task_calls)
        return [Measurement(
            metric_name=self.name, value=mean, unit=self.unit,
            summary=f"{mean:.2f} LLM calls per task over {len(counts)} tasks",
            sample_count=len(counts), evidence=keys, aggregation=self.aggregation,
            sample_values=tuple(float(c) for c in counts),
        )]

"""The spans every benchmark sends or stores: an LLM application's agent tasks, drawn from a seed.

Shape (all draws per call or per task, continuous where the real quantity is):

* ``targets`` targets (default 20, traffic ∝ (rank+1)^-0.7), each on one of six models of three
  providers (OpenAI, Anthropic, Gemini; one a reasoning model);
* tasks of 3–10 spans: a root span (``task {target}``, ``meritlens.span.type=task``, the agent-step
  count, for 60% an outcome, for 30% a quality score), LLM calls (``chat {model}``, kind CLIENT) and
  tool executions (``execute_tool {tool}``, kind INTERNAL) in turn, all children of the root, one trace
  and one ``meritlens.task.id`` per task; 25% of tasks carry an assessment id and a case id;
* an LLM call: input tokens log-normal (median 1,500) plus a log-normal share per earlier step (the
  growing context), output tokens log-normal (median 220, 60 on turns that call a tool), a cached share
  uniform in 20–95% on 30% of first calls and 75% of later ones, reasoning tokens on the reasoning
  model, latency log-normal around the model's median (σ 0.6, correlated 0.7 with the output tokens),
  half of the calls streamed (with a time to first chunk), cost = tokens × the model's prices from
  the package's price table (cached input at its own price), a unique ``gen_ai.response.id``, 4% with
  1–3 retries (their back-off added to the latency), 1.5% failing (``error.type``, no usage, an
  ``exception`` event); ~18 attributes and an event (the output message) per call;
* tool spans: eight tools with log-normal latencies of their own, 3% failing;
* a third of the tasks continue in a later export request: their spans after a random point (always
  the root, which ends last) arrive 1–3 requests later, as a batching exporter sends a long task.

Requests hold ``batch`` spans (a little more: whole task parts), one ResourceSpans per target. Every
request carries a `Tally`: per target, what it adds to what the windows must count once it is stored.
Deterministic: the tasks depend only on (seed, stream) and the task's position; how they are cut into
requests on the requested sizes; times are offsets from ``start_ns``.

usage: python bench/spangen.py [--spans 20000] [--batch 1000] [--seed 0] [--targets 20]
       (prints the data's shape and its tally per target)
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

import _wire as w
from _tally import TALLY_FIELDS, Tally, tally_rows, target_names

from meritlens.collector.process import _otlp
from meritlens.collector.process._normalize import normalize
from meritlens.instrumentation import conventions as c
from meritlens.instrumentation.pricing import price_call

BASE_NS = 1_780_000_000_000_000_000
"""The default start of the span times (2026-05-28), fixed so that runs are reproducible."""
CHUNK_TASKS = 2048
_TASK_ID_BYTES = 40  # random bytes per task: trace id 16, root span id 8, task id 16
_CHILD_ID_BYTES = 20  # per child span: span id 8, response or tool-call id 12
CONTINUE_SHARE = 1 / 3
DELAYS = (1, 1, 1, 2, 2, 3)
"""Requests after its first part in which a continuing task's later part arrives (drawn from these)."""
MAX_DELAY = max(DELAYS)
ASSESSMENT_SHARE = 0.25


@dataclass(frozen=True)
class Model:
    provider: str
    name: str
    response_model: str
    server: str
    median_latency_s: float
    response_id_prefix: str
    reasoning: bool = False


MODELS = (
    Model("openai", "gpt-4o-mini", "gpt-4o-mini-2024-07-18", "api.openai.com", 1.6, "chatcmpl-"),
    Model("anthropic", "claude-3-5-haiku-20241022", "claude-3-5-haiku-20241022", "api.anthropic.com", 2.4, "msg_"),
    Model("gcp.gemini", "gemini-2.0-flash", "gemini-2.0-flash-001", "generativelanguage.googleapis.com", 1.2, ""),
    Model("openai", "gpt-4.1-mini", "gpt-4.1-mini-2025-04-14", "api.openai.com", 2.0, "chatcmpl-"),
    Model("anthropic", "claude-sonnet-4-20250514", "claude-sonnet-4-20250514", "api.anthropic.com", 4.5, "msg_"),
    Model("openai", "o3-mini", "o3-mini-2025-01-31", "api.openai.com", 6.0, "chatcmpl-", reasoning=True),
)
TOOLS = (("web_search", 0.9, 0.7), ("read_file", 0.02, 0.8), ("run_sql", 0.15, 1.0), ("http_get", 0.35, 0.9),
         ("calculator", 0.003, 0.5), ("send_email", 0.45, 0.6), ("vector_search", 0.08, 0.6),
         ("code_interpreter", 1.5, 0.8))
"""(name, median seconds, σ of the log) of each tool's latency."""
SPANS_PER_TASK = np.arange(3, 11)
SPANS_PER_TASK_P = np.array([20, 20, 15, 12, 10, 9, 7, 7]) / 100
MEAN_SPANS_PER_TASK = float((SPANS_PER_TASK * SPANS_PER_TASK_P).sum())
_LLM_ERRORS = ("RateLimitError", "APITimeoutError", "InternalServerError")
_TOOL_ERRORS = ("TimeoutError", "ToolError", "PermissionError")
_LOREM = ("the report lists three options and the second one fits the stated budget best while the first "
          "needs approval from the data owner before any export can start so the plan moves in two steps ") * 4
_PRICED_AT = _dt.datetime.fromtimestamp(BASE_NS / 1e9, _dt.timezone.utc)
_MAX_TOKENS = (1024, 2048, 4096, 8192)
"""``gen_ai.request.max_tokens`` of target t: the (t % 4)th."""
_OUTPUT_LATENCY_CORRELATION = 0.7


@dataclass
class Request:
    body: bytes
    spans: int
    tally: Tally


def _rates(model: Model) -> tuple[float, float, float]:
    """USD per token: input, cached input, output (the package's price table, one day fixed)."""
    per = [price_call(model.provider, model.name, i, o, cache_read_tokens=r, at=_PRICED_AT) / 1e6
           for i, o, r in ((10**6, 0, 0), (10**6, 0, 10**6), (0, 10**6, 0))]
    return per[0], per[1], per[2]


def _lognormal(rng, median, sigma, size):
    return np.exp(np.log(median) + sigma * rng.standard_normal(size))


class SpanStream:
    """An endless, deterministic stream of tasks cut into OTLP/HTTP protobuf export requests."""

    def __init__(self, seed: int = 0, *, targets: int = 20, stream: int = 0, start_ns: int = BASE_NS,
                 tasks_per_s: float = 1000.0):
        if targets < 1:
            raise ValueError(f"targets must be at least 1, got {targets}")
        self.seed, self.stream, self.targets, self.start_ns = seed, stream, targets, start_ns
        self.task_interval_ns = 1e9 / tasks_per_s
        weights = (np.arange(targets) + 1.0) ** -0.7
        self._target_p = weights / weights.sum()
        self._target_model = np.arange(targets) % len(MODELS)
        self._rates = np.array([_rates(m) for m in MODELS])
        self._median_latency = np.array([m.median_latency_s for m in MODELS])
        self._reasoning = np.array([m.reasoning for m in MODELS])
        self._constants()
        self._chunk_no, self._tasks, self._next = 0, [], 0
        self._pending: dict[int, list] = {}
        self._request_no = 0

    # --- constant fragments ------------------------------------------------------------------------
    def _constants(self) -> None:
        k = {name: w.key(name) for name in (
            c.TARGET_ID, c.ROLE, c.TASK_ID, c.ASSESSMENT_ID, c.CASE_ID, c.AGENT_STEP, c.SPAN_TYPE,
            c.GEN_AI_OPERATION_NAME, c.GEN_AI_PROVIDER_NAME, c.GEN_AI_REQUEST_MODEL, c.GEN_AI_RESPONSE_MODEL,
            c.GEN_AI_RESPONSE_ID, c.GEN_AI_USAGE_INPUT_TOKENS, c.GEN_AI_USAGE_OUTPUT_TOKENS,
            c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
            c.GEN_AI_RESPONSE_FINISH_REASONS, c.GEN_AI_REQUEST_STREAM, c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK,
            c.COST_USD, c.RETRIES, c.TOOL_CALLS, c.SERVER_ADDRESS, c.GEN_AI_REQUEST_MAX_TOKENS, c.ERROR_TYPE,
            c.GEN_AI_TOOL_NAME, c.GEN_AI_TOOL_CALL_ID, c.OUTCOME_SUCCESS, c.QUALITY_SCORE, c.HUMAN_INTERVENTION,
            c.GEN_AI_OUTPUT_MESSAGES, c.EXCEPTION_TYPE, c.EXCEPTION_MESSAGE, c.SERVICE_NAME)}
        self._k = k
        names = target_names(self.targets)
        self._target_kv = [w.kv(k[c.TARGET_ID], w.string(n)) + w.kv(k[c.ROLE], w.string(c.ROLE_APPLICATION))
                           for n in names]
        self._resource = [w.kv(k[c.SERVICE_NAME], w.string(f"{n}-app"), w.RESOURCE_ATTRIBUTE) for n in names]
        self._root_name = [w.name(f"task {n}") for n in names]
        self._max_tokens_kv = [w.kv(k[c.GEN_AI_REQUEST_MAX_TOKENS], w.integer(v)) for v in _MAX_TOKENS]
        self._model_kv = [w.kv(k[c.GEN_AI_OPERATION_NAME], w.string(c.OP_CHAT))
                          + w.kv(k[c.GEN_AI_PROVIDER_NAME], w.string(m.provider))
                          + w.kv(k[c.GEN_AI_REQUEST_MODEL], w.string(m.name))
                          + w.kv(k[c.SERVER_ADDRESS], w.string(m.server)) for m in MODELS]
        self._response_model_kv = [w.kv(k[c.GEN_AI_RESPONSE_MODEL], w.string(m.response_model)) for m in MODELS]
        self._call_name = [w.name(f"{c.OP_CHAT} {m.name}") for m in MODELS]
        self._tool_kv = [w.kv(k[c.GEN_AI_OPERATION_NAME], w.string(c.OP_EXECUTE_TOOL))
                         + w.kv(k[c.GEN_AI_TOOL_NAME], w.string(t)) for t, _, _ in TOOLS]
        self._tool_name = [w.name(f"{c.OP_EXECUTE_TOOL} {t}") for t, _, _ in TOOLS]
        self._step_kv = [w.kv(k[c.AGENT_STEP], w.integer(s)) for s in range(12)]
        self._root_kv = w.kv(k[c.SPAN_TYPE], w.string(c.SPAN_TYPE_TASK))
        self._stream_kv = [w.kv(k[c.GEN_AI_REQUEST_STREAM], w.boolean(b)) for b in (False, True)]
        self._tool_calls_kv = [w.kv(k[c.TOOL_CALLS], w.integer(n)) for n in (0, 1)]
        self._retries_kv = [w.kv(k[c.RETRIES], w.integer(n)) for n in range(4)]
        self._finish_kv = {r: w.kv(k[c.GEN_AI_RESPONSE_FINISH_REASONS], w.strings([r]))
                           for r in ("stop", "tool_calls", "length")}
        self._bool_kv = {(key, b): w.kv(k[key], w.boolean(b)) for key in (c.OUTCOME_SUCCESS, c.HUMAN_INTERVENTION)
                         for b in (False, True)}

    # --- drawing ------------------------------------------------------------------------------------
    def draw(self, chunk: int) -> dict[str, np.ndarray]:
        """Every value of the tasks of one chunk (`CHUNK_TASKS` tasks) as arrays: per task (``t_*``)
        and per child span (``s_*``, tasks' children in order)."""
        rng = np.random.default_rng([self.seed, self.stream, chunk])
        n = CHUNK_TASKS
        d: dict[str, np.ndarray] = {}
        d["t_target"] = target = rng.choice(self.targets, n, p=self._target_p)
        d["t_spans"] = spans = rng.choice(SPANS_PER_TASK, n, p=SPANS_PER_TASK_P)
        children = spans - 1
        tools = (children - 1) // 2  # children alternate call, tool, ..., ending on one or two calls
        d["t_children"], d["t_tools"] = children, tools
        d["t_start"] = self.start_ns + ((chunk * n + np.arange(n)) * self.task_interval_ns
                                        + rng.uniform(0, self.task_interval_ns, n)).astype(np.int64)
        d["t_offset"] = offset = np.cumsum(children) - children
        m = int(children.sum())
        task = np.repeat(np.arange(n), children)
        j = np.arange(m) - offset[task]
        alternating = j < 2 * tools[task]
        d["s_tool"] = is_tool = alternating & (j % 2 == 1)
        d["s_step"] = np.where(alternating, j // 2 + 1, tools[task] + 1 + (j - 2 * tools[task]))
        d["s_calls_tool"] = alternating & (j % 2 == 0)
        model = self._target_model[target][task]
        d["s_model"] = model
        # LLM calls
        z = rng.standard_normal(m)
        out = np.exp(np.log(np.where(d["s_calls_tool"], 60, 220)) + 0.9 * z)
        d["s_output"] = output = np.clip(np.rint(out), 1, 16384).astype(np.int64)
        step = d["s_step"]
        context = _lognormal(rng, 1500, 0.9, m) + (step - 1) * _lognormal(rng, 700, 0.6, m)
        d["s_input"] = inputs = np.clip(np.rint(context), 1, 200_000).astype(np.int64)
        cached = rng.random(m) < np.where(step == 1, 0.3, 0.75)
        d["s_cached"] = cache = np.where(cached, np.floor(inputs * rng.uniform(0.2, 0.95, m)), 0).astype(np.int64)
        d["s_reasoning"] = np.where(self._reasoning[model], np.floor(output * rng.uniform(0.4, 0.9, m)), 0
                                    ).astype(np.int64)
        rho = _OUTPUT_LATENCY_CORRELATION
        latency = np.exp(np.log(self._median_latency[model])
                         + 0.6 * (rho * z + math.sqrt(1 - rho**2) * rng.standard_normal(m)))
        retried = rng.random(m) < 0.04
        retries = np.where(retried, 1 + (rng.random(m) < 0.3) + (rng.random(m) < 0.1), 0)
        latency = latency + retries * _lognormal(rng, 1.0, 0.5, m)
        d["s_failed"] = failed = ~is_tool & (rng.random(m) < 0.015)
        d["s_retries"] = np.where(failed, 2, retries)
        d["s_stream"] = rng.random(m) < 0.5
        d["s_ttft_s"] = latency * rng.uniform(0.05, 0.4, m)
        rates = self._rates[model]
        d["s_cost"] = ((inputs - cache) * rates[:, 0] + cache * rates[:, 1] + output * rates[:, 2])
        d["s_finish"] = np.where(d["s_calls_tool"], 1, np.where(rng.random(m) < 0.02, 2, 0))
        d["s_error_kind"] = rng.integers(0, 3, m)
        # tools
        d["s_tool_kind"] = kind = rng.integers(0, len(TOOLS), m)
        tool_median = np.array([t[1] for t in TOOLS])[kind]
        tool_sigma = np.array([t[2] for t in TOOLS])[kind]
        tool_latency = np.exp(np.log(tool_median) + tool_sigma * rng.standard_normal(m))
        d["s_failed"] = failed | (is_tool & (rng.random(m) < 0.03))
        # times: children one after another, a few ms apart, inside the root
        duration = (np.where(is_tool, tool_latency, latency) * 1e9).astype(np.int64)
        gap = (_lognormal(rng, 0.004, 0.6, m) * 1e9).astype(np.int64)
        step_ns = gap + duration
        before = np.cumsum(step_ns) - step_ns
        d["s_start"] = d["t_start"][task] + before - before[offset][task] + gap
        d["s_end"] = d["s_start"] + duration
        last = offset + children - 1
        d["t_end"] = d["s_end"][last] + (_lognormal(rng, 0.003, 0.5, n) * 1e9).astype(np.int64)
        # the task
        d["t_assessment"] = np.where(rng.random(n) < ASSESSMENT_SHARE, rng.integers(0, 2, n), -1)
        d["t_case"] = rng.integers(0, 40, n)
        errors = np.add.reduceat(d["s_failed"].astype(np.int64), offset)
        d["t_outcome"] = np.where(rng.random(n) < 0.6, rng.random(n) < np.where(errors > 0, 0.5, 0.9), -1)
        d["t_quality"] = np.where(rng.random(n) < 0.3, rng.beta(5, 2, n), np.nan)
        d["t_intervened"] = rng.random(n) < 0.02
        d["t_split"] = np.where(rng.random(n) < CONTINUE_SHARE, rng.integers(1, spans), spans)
        d["t_delay"] = rng.choice(DELAYS, n)
        d["ids"] = np.frombuffer(rng.bytes(n * _TASK_ID_BYTES + m * _CHILD_ID_BYTES), dtype=np.uint8)
        return d

    def task_samples(self, tasks: int) -> dict[str, np.ndarray]:
        """The first ``tasks`` tasks' window samples: end-to-end latency (s), input tokens and cost
        (NaN when a call reported no usage)."""
        out: dict[str, list] = {"end_to_end_latency": [], "input_tokens": [], "total_task_cost": []}
        for chunk in range((tasks + CHUNK_TASKS - 1) // CHUNK_TASKS):
            d = self.draw(chunk)
            offset, calls = d["t_offset"], ~d["s_tool"]
            usable = np.add.reduceat((calls & d["s_failed"]).astype(np.int64), offset) == 0
            out["end_to_end_latency"].append((d["t_end"] - d["t_start"]) / 1e9)
            for name, values in (("input_tokens", d["s_input"]), ("total_task_cost", d["s_cost"])):
                out[name].append(np.where(usable, np.add.reduceat(np.where(calls, values, 0), offset), np.nan))
        return {name: np.concatenate(parts)[:tasks] for name, parts in out.items()}

    def call_latencies(self, calls: int) -> np.ndarray:
        """The latencies (s) of the first ``calls`` LLM calls that did not fail."""
        parts, held, chunk = [], 0, 0
        while held < calls:
            d = self.draw(chunk)
            ok = ~d["s_tool"] & ~d["s_failed"]
            parts.append((d["s_end"][ok] - d["s_start"][ok]) / 1e9)
            held, chunk = held + parts[-1].size, chunk + 1
        return np.concatenate(parts)[:calls]

    # --- tasks as spans ---------------------------------------------------------------------------
    def _encode_chunk(self, chunk: int) -> list[tuple]:
        """Each task of a chunk as (target, spans in the order they end, split point, delay, and the tally
        rows of its first part, its later part and the whole task)."""
        d = self.draw(chunk)
        head, tail, whole = tally_rows(d, CHUNK_TASKS, np.array(_MAX_TOKENS)[d["t_target"] % len(_MAX_TOKENS)])
        k, ids = self._k, d["ids"].tobytes()
        n_tasks = CHUNK_TASKS
        s = {name: d[name].tolist() for name in d if name.startswith("s_")}
        t = {name: d[name].tolist() for name in d if name.startswith("t_")}
        tasks = []
        cursor = n_tasks * _TASK_ID_BYTES
        for i in range(n_tasks):
            target = t["t_target"][i]
            at = i * _TASK_ID_BYTES
            trace_id, root_id, task_id = ids[at:at + 16], ids[at + 16:at + 24], ids[at + 24:at + 40]
            common = (self._target_kv[target] + w.kv(k[c.TASK_ID], w.string(task_id.hex())))
            assessment = t["t_assessment"][i]
            if assessment >= 0:
                common += (w.kv(k[c.ASSESSMENT_ID], w.string(f"bot-{target}-eval-{assessment}"))
                           + w.kv(k[c.CASE_ID], w.string(f"case-{t['t_case'][i]}")))
            model = self._target_model[target]
            call_kv = self._model_kv[model] + self._max_tokens_kv[target % len(_MAX_TOKENS)]
            spans = []
            first_child = t["t_offset"][i]
            for x in range(first_child, first_child + t["t_children"][i]):
                span_id, extra = ids[cursor:cursor + 8], ids[cursor + 8:cursor + 20].hex()
                cursor += _CHILD_ID_BYTES
                step_kv = self._step_kv[s["s_step"][x]]
                start, end = s["s_start"][x], s["s_end"][x]
                failed = s["s_failed"][x]
                if s["s_tool"][x]:
                    tool = s["s_tool_kind"][x]
                    attributes = (common + step_kv + self._tool_kv[tool]
                                  + w.kv(k[c.GEN_AI_TOOL_CALL_ID], w.string("call_" + extra)))
                    status = b""
                    if failed:
                        error = _TOOL_ERRORS[s["s_error_kind"][x]]
                        attributes += w.kv(k[c.ERROR_TYPE], w.string(error))
                        status = w.error_status(f"{error}: the tool did not complete")
                    spans.append(w.span(trace_id, span_id, root_id, self._tool_name[tool], w.KIND_INTERNAL, start,
                                        end, attributes, status=status))
                    continue
                attributes = common + step_kv + call_kv + self._stream_kv[s["s_stream"][x]] + \
                    self._retries_kv[s["s_retries"][x]]
                if failed:
                    error = _LLM_ERRORS[s["s_error_kind"][x]]
                    attributes += w.kv(k[c.ERROR_TYPE], w.string(error))
                    message = f"{error}: the provider did not answer"
                    events = w.event(end, c.EXCEPTION_EVENT,
                                     w.kv(k[c.EXCEPTION_TYPE], w.string(error), w.EVENT_ATTRIBUTE)
                                     + w.kv(k[c.EXCEPTION_MESSAGE], w.string(message), w.EVENT_ATTRIBUTE))
                    spans.append(w.span(trace_id, span_id, root_id, self._call_name[model], w.KIND_CLIENT, start, end,
                                        attributes, events, w.error_status(message)))
                    continue
                output, finish = s["s_output"][x], ("stop", "tool_calls", "length")[s["s_finish"][x]]
                m = MODELS[model]
                attributes += (self._response_model_kv[model]
                               + w.kv(k[c.GEN_AI_RESPONSE_ID], w.string(m.response_id_prefix + extra))
                               + w.kv(k[c.GEN_AI_USAGE_INPUT_TOKENS], w.integer(s["s_input"][x]))
                               + w.kv(k[c.GEN_AI_USAGE_OUTPUT_TOKENS], w.integer(output))
                               + w.kv(k[c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS], w.integer(s["s_cached"][x]))
                               + self._finish_kv[finish] + self._tool_calls_kv[finish == "tool_calls"]
                               + w.kv(k[c.COST_USD], w.double(s["s_cost"][x])))
                if m.reasoning:
                    attributes += w.kv(k[c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS], w.integer(s["s_reasoning"][x]))
                if s["s_stream"][x]:
                    attributes += w.kv(k[c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK], w.double(s["s_ttft_s"][x]))
                text_at = (x * 7919) % 400
                text = _LOREM[text_at:text_at + min(output * 4, 280)]
                message = ('[{"role":"assistant","parts":[{"type":"text","content":"' + text
                           + f'"}}],"finish_reason":"{finish}"}}]')
                events = w.event(end, c.GEN_AI_OPERATION_DETAILS_EVENT,
                                 w.kv(k[c.GEN_AI_OUTPUT_MESSAGES], w.string(message), w.EVENT_ATTRIBUTE))
                spans.append(w.span(trace_id, span_id, root_id, self._call_name[model], w.KIND_CLIENT, start, end,
                                    attributes, events))
            root = common + self._root_kv + self._step_kv[t["t_children"][i] - t["t_tools"][i]]
            outcome = t["t_outcome"][i]
            if outcome >= 0:
                root += self._bool_kv[(c.OUTCOME_SUCCESS, bool(outcome))] + \
                    self._bool_kv[(c.HUMAN_INTERVENTION, t["t_intervened"][i])]
            if not math.isnan(t["t_quality"][i]):
                root += w.kv(k[c.QUALITY_SCORE], w.double(t["t_quality"][i]))
            spans.append(w.span(trace_id, root_id, None, self._root_name[target], w.KIND_INTERNAL,
                                t["t_start"][i], t["t_end"][i], root))
            tasks.append((target, spans, t["t_split"][i], t["t_delay"][i], head[i], tail[i], whole[i]))
        return tasks

    def _next_task(self) -> tuple:
        if self._next == len(self._tasks):
            self._tasks, self._next = self._encode_chunk(self._chunk_no), 0
            self._chunk_no += 1
        self._next += 1
        return self._tasks[self._next - 1]

    # --- requests ---------------------------------------------------------------------------------
    def next_request(self, spans: int, *, split: bool = True, final: bool = False) -> Request:
        """The next export request: the task parts due now, then new tasks until it holds at least
        ``spans`` spans. ``split``: tasks drawn to continue may leave their later spans for a later
        request; ``final``: every part still due is in this one."""
        no = self._request_no
        self._request_no += 1
        parts = self._pending.pop(no, [])
        if final:
            for later in sorted(self._pending):
                parts += self._pending.pop(later)
        count = sum(len(p[1]) for p in parts)
        while count < spans:
            target, task_spans, cut, delay, head, tail, whole = self._next_task()
            if cut < len(task_spans) and split and not final:
                parts.append((target, task_spans[:cut], head))
                self._pending.setdefault(no + delay, []).append((target, task_spans[cut:], tail))
            else:
                parts.append((target, task_spans, whole))
            count += len(parts[-1][1])
        by_target: dict[int, list[bytes]] = {}
        tally = Tally(self.targets)
        if parts:
            np.add.at(tally.matrix, [p[0] for p in parts], np.stack([p[2] for p in parts]))
        for target, part, _ in parts:
            by_target.setdefault(target, []).extend(part)
        body = b"".join(w.resource_spans(self._resource[t], c.TRACER_NAME, by_target[t]) for t in sorted(by_target))
        return Request(body, count, tally)

    def requests(self, total_spans: int, batch: int):
        """Requests of ``batch`` spans until ``total_spans`` (a few more: whole task parts), leaving no
        task unfinished: no task is split in the last requests (`MAX_DELAY` batches)."""
        sent = 0
        while sent < total_spans:
            remaining = total_spans - sent
            request = self.next_request(min(batch, remaining), split=remaining > MAX_DELAY * batch,
                                        final=remaining <= batch)
            sent += request.spans
            yield request


def rows(request: Request) -> pa.Table:
    """A request's spans as the collector normalizes them: an Arrow table in the `spans` row schema
    (every column but received_at)."""
    decoded = _otlp.decode_lean(request.body, _otlp.PROTOBUF)
    batch = normalize(decoded.lean, body=request.body)
    if batch.refused:
        raise SystemExit(f"the generator made spans the collector refuses: {batch.refused[:3]}")
    return batch.to_arrow()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--targets", type=int, default=20)
    args = parser.parse_args()
    stream = SpanStream(args.seed, targets=args.targets)
    tally, size, count = Tally(args.targets), 0, 0
    for request in stream.requests(args.spans, args.batch):
        tally += request.tally
        size += len(request.body)
        count += 1
    print(f"{int(tally.total('spans')):,} spans in {count} requests, {size / tally.total('spans'):.0f} bytes a span")
    print(json.dumps({f: tally.by_target(f) for f in TALLY_FIELDS}, indent=1))


if __name__ == "__main__":
    main()

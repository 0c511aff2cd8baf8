"""Judges: the LLMs (or stand-ins) that score a task's output for judge-driven metrics.

A judge is pinned to one exact model for a whole evaluation, is asked several times per task
(replicas) and the parsed scores are averaged. Every call is recorded as a `JudgeCall` so that
the evaluation can store it as an `orchestration` span: the judge's own tokens and latency are
kept for audit and never counted as the application's.

Prompts are Jinja templates in ``meritlens/analytics/templates/<name>.j2``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("meritlens.analytics.judge")

DEFAULT_REPLICAS = 3


class JudgeError(RuntimeError):
    """The judge could not be called, or is not usable as configured; the message says why."""


@dataclass(frozen=True)
class JudgeReply:
    """What one judge call returned."""

    text: str
    input_tokens: int | None = None
    output_tokens: int | None = None


class Judge(ABC):
    """An LLM that answers a rendered prompt. Implementations set ``model`` (an exact, pinned
    model id) and ``provider``, and implement ``complete``."""

    model: str
    provider: str

    @abstractmethod
    def complete(self, prompt: str) -> JudgeReply:
        """Send ``prompt`` and return the reply; raise JudgeError when the call failed."""


FAKE_MODEL_PREFIX = "fake-"


def is_fake_model(model: str | None) -> bool:
    """Whether ``model`` names the fake judge (every name it records starts with FAKE_MODEL_PREFIX)."""
    return bool(model) and model.startswith(FAKE_MODEL_PREFIX)


class FakeJudge(Judge):
    """A deterministic judge for tests and dry runs: no network, same prompt -> same reply.

    By default the score is derived from a hash of the prompt. ``scorer`` may return a score
    (rendered as the JSON reply a real judge is asked for) or a raw reply text, which lets a test
    exercise malformed replies.
    """

    provider = "meritlens-fake"

    def __init__(self, model: str = "fake-judge-2025-01-01", scorer: Callable[[str], float | str] | None = None):
        if not is_fake_model(model):
            # Its scores are stored under this name (spans, windows, evaluation.json): a real model's name
            # would pass them off as that model's judgement.
            raise JudgeError(f"the fake judge's model {model!r} must start with {FAKE_MODEL_PREFIX!r}, so that its "
                             f"hash-derived scores are never taken for a real model's (e.g. "
                             f"fake:{FAKE_MODEL_PREFIX}{model.strip() or 'judge'})")
        self.model = model
        self._scorer = scorer
        self.prompts: list[str] = []

    def complete(self, prompt: str) -> JudgeReply:
        self.prompts.append(prompt)
        if self._scorer is None:
            digest = hashlib.sha256(prompt.encode()).digest()
            result: float | str = round(int.from_bytes(digest[:4], "big") / 0xFFFFFFFF, 3)
        else:
            result = self._scorer(prompt)
        text = result if isinstance(result, str) else json.dumps({"score": result, "reason": "fake judge"})
        return JudgeReply(text=text, input_tokens=len(prompt.split()), output_tokens=len(text.split()))


@dataclass(frozen=True)
class JudgeCall:
    """One recorded judge call (stored as an orchestration span)."""

    metric: str
    target_id: str
    scope: str
    task_key: str
    replica: int
    model: str
    provider: str
    start_unix_nano: int
    end_unix_nano: int
    score: float | None
    error: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None


@dataclass(frozen=True)
class JudgedTask:
    """The replicas' scores for one task, and their mean (None when no replica gave a score)."""

    task_key: str
    replica_scores: tuple[float | None, ...]

    @property
    def valid_scores(self) -> tuple[float, ...]:
        return tuple(s for s in self.replica_scores if s is not None)

    @property
    def mean(self) -> float | None:
        valid = self.valid_scores
        return sum(valid) / len(valid) if valid else None


_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def parse_score(text: str) -> float:
    """The score in a judge reply: a JSON object with a number ``score`` in [0, 1].

    Raises ValueError naming what was wrong; a bad reply is never turned into a score.
    """
    candidate = text.strip()
    try:
        payload = json.loads(candidate)
    except ValueError:
        match = _OBJECT.search(candidate)
        if match is None:
            raise ValueError("reply holds no JSON object") from None
        try:
            payload = json.loads(match.group(0))
        except ValueError as exc:
            raise ValueError(f"reply's JSON object does not parse: {exc}") from None
    if not isinstance(payload, dict) or "score" not in payload:
        raise ValueError('reply has no "score" field')
    score = payload["score"]
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        raise ValueError(f"score {score!r} is not a finite number")
    if not 0.0 <= score <= 1.0:
        raise ValueError(f"score {score!r} is outside [0, 1]")
    return float(score)


def check_pinned(model: str) -> None:
    """Refuse a judge model that is not an exact id: results from a moving alias are not comparable."""
    if not model or not model.strip():
        raise JudgeError("the judge model is empty; give an exact model id")
    if model.lower().endswith("latest"):
        raise JudgeError(f"judge model {model!r} is a moving alias; pin an exact, dated model id")


def _template_environment():
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader("meritlens.analytics", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
    )


@dataclass
class JudgeSession:
    """One evaluation's use of a judge: renders prompts, asks ``replicas`` times per task, parses
    and averages, and records every call in ``calls``."""

    judge: Judge
    target_id: str
    scope: str
    replicas: int = DEFAULT_REPLICAS
    calls: list[JudgeCall] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_pinned(self.judge.model)
        if self.replicas < 1:
            raise JudgeError(f"judge replicas must be at least 1, got {self.replicas}")
        self._env = _template_environment()

    @property
    def model(self) -> str:
        return self.judge.model

    def render(self, template: str, context: dict[str, Any]) -> str:
        return self._env.get_template(template).render(**context)

    def score_task(self, metric: str, task_key: str, template: str, context: dict[str, Any]) -> JudgedTask:
        """Ask the judge ``replicas`` times about one task; a failed or malformed replica is
        logged and left out of the mean."""
        prompt = self.render(template, context)
        scores: list[float | None] = []
        for replica in range(self.replicas):
            start = time.time_ns()
            reply: JudgeReply | None = None
            score: float | None = None
            error: str | None = None
            try:
                reply = self.judge.complete(prompt)
                score = parse_score(reply.text)
            except JudgeError as exc:
                error = f"judge call failed: {exc}"
            except ValueError as exc:
                error = f"malformed judge reply: {exc}"
            end = max(time.time_ns(), start + 1)
            if error is not None:
                log.warning("%s: task %s replica %d: %s", metric, task_key, replica, error)
            scores.append(score)
            self.calls.append(JudgeCall(
                metric=metric, target_id=self.target_id, scope=self.scope, task_key=task_key,
                replica=replica, model=self.judge.model, provider=self.judge.provider,
                start_unix_nano=start, end_unix_nano=end, score=score, error=error,
                input_tokens=reply.input_tokens if reply else None,
                output_tokens=reply.output_tokens if reply else None,
            ))
        return JudgedTask(task_key=task_key, replica_scores=tuple(scores))


# --- judges backed by a provider's official SDK (installed separately: `pip install openai` / `anthropic`) ---
def _import_sdk(name: str):
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        raise JudgeError(f"the {name} judge needs the {name!r} package: pip install {name}") from None


class OpenAIJudge(Judge):
    """A judge through the OpenAI Chat Completions API (or any compatible server via ``base_url``).

    The API key comes from ``api_key`` or the SDK's usual ``OPENAI_API_KEY``.
    """

    provider = "openai"

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 max_tokens: int = 400, timeout_s: float = 60.0):
        openai = _import_sdk("openai")
        self.model = model
        self._max_tokens = max_tokens
        self._errors = (openai.OpenAIError,)
        try:
            self._client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=2)
        except openai.OpenAIError as exc:
            raise JudgeError(f"cannot create the OpenAI client: {exc}") from None

    def complete(self, prompt: str) -> JudgeReply:
        try:
            response = self._client.chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": prompt}], max_tokens=self._max_tokens,
            )
        except self._errors as exc:
            raise JudgeError(f"{type(exc).__name__}: {exc}") from None
        if not response.choices:
            raise JudgeError("the reply has no choices")
        usage = response.usage
        return JudgeReply(
            text=response.choices[0].message.content or "",
            input_tokens=usage.prompt_tokens if usage else None,
            output_tokens=usage.completion_tokens if usage else None,
        )


class AnthropicJudge(Judge):
    """A judge through the Anthropic Messages API. The API key comes from ``api_key`` or ``ANTHROPIC_API_KEY``."""

    provider = "anthropic"

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 max_tokens: int = 400, timeout_s: float = 60.0):
        anthropic = _import_sdk("anthropic")
        self.model = model
        self._max_tokens = max_tokens
        self._errors = (anthropic.AnthropicError,)
        try:
            self._client = anthropic.Anthropic(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=2)
        except anthropic.AnthropicError as exc:
            raise JudgeError(f"cannot create the Anthropic client: {exc}") from None

    def complete(self, prompt: str) -> JudgeReply:
        try:
            response = self._client.messages.create(
                model=self.model, max_tokens=self._max_tokens, messages=[{"role": "user", "content": prompt}],
            )
        except self._errors as exc:
            raise JudgeError(f"{type(exc).__name__}: {exc}") from None
        text = "".join(block.text for block in response.content if getattr(block, "type", None) == "text")
        return JudgeReply(text=text, input_tokens=response.usage.input_tokens,
                          output_tokens=response.usage.output_tokens)


JUDGE_KINDS = ("fake", "openai", "anthropic")


def judge_from_spec(spec: str, *, base_url: str | None = None) -> Judge:
    """A judge from ``fake[:MODEL]``, ``openai:MODEL`` or ``anthropic:MODEL``; JudgeError says what was wrong."""
    kind, _, model = spec.partition(":")
    if kind == "fake":
        return FakeJudge(model=model) if model else FakeJudge()
    if kind not in JUDGE_KINDS:
        raise JudgeError(f"unknown judge {spec!r}; use one of fake[:MODEL], openai:MODEL, anthropic:MODEL")
    if not model:
        raise JudgeError(f"give the exact model: {kind}:MODEL")
    check_pinned(model)
    judge_class = OpenAIJudge if kind == "openai" else AnthropicJudge
    return judge_class(model, base_url=base_url)

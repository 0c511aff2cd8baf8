"""Per-call overhead of meritlens' instrument(client) on the real openai SDK, against peers.

Every variant drives the official ``openai`` client through the same ``httpx2.MockTransport`` (canned response,
no network), non-streaming and streaming (the stream is read to its end), and exports to the same
``TracerProvider`` with a ``BatchSpanProcessor`` whose exporter drops spans. Each variant lives in a process of
its own (the peers patch openai's classes process-wide, and some leave patches behind on uninstrument); the
processes are measured interleaved: each round runs a small batch of every variant in turn, one process at a
time, so machine drift hits all of them alike. A second bare process ("bare-control") shows how much two
processes running the very same code differ: read every figure with that margin in mind. Reported: p10 and
median time per call (wall clock, or the worker's CPU time with --clock cpu), the time added over the bare client,
and meritlens' ratios to the hand-written floor and to the official instrumentation.

Variants:
  bare          the client alone
  handwritten   a wrapper opening one span with ~12 attributes (the floor any span-per-call costs)
  meritlens     meritlens.instrumentation.instrument(client)
  official-v2   opentelemetry-instrumentation-openai-v2 (if installed; needs opentelemetry-util-genai==1.1b0)
  openinference openinference-instrumentation-openai (if installed)
  openllmetry   opentelemetry-instrumentation-openai (if installed)

The peers are not dependencies of meritlens; install them into a scratch venv to compare:
  pip install openinference-instrumentation-openai opentelemetry-instrumentation-openai \
      opentelemetry-instrumentation-openai-v2 opentelemetry-util-genai==1.1b0

Run:  .venv/bin/python bench/instrumentation_overhead.py [--rounds 200] [--batch 20]

``--same-process`` runs bare, handwritten and meritlens (which patch nothing process-wide) in ONE process instead,
each on its own client, interleaved batch by batch: it removes the offsets between processes (the bare-control
spread, up to tens of µs on a busy machine) from the meritlens / handwritten comparison. The peers cannot run
this way (they patch the openai classes for every client in the process).
"""

from __future__ import annotations

import httpx2

httpx2.alias_httpx()  # the OpenTelemetry peers import `httpx`; they must see httpx2's classes (before any import)

import argparse  # noqa: E402 - imported once httpx2 stands in for httpx
import json  # noqa: E402 - imported once httpx2 stands in for httpx
import multiprocessing  # noqa: E402 - imported once httpx2 stands in for httpx
import os  # noqa: E402 - imported once httpx2 stands in for httpx
import platform  # noqa: E402 - imported once httpx2 stands in for httpx
import sys  # noqa: E402 - imported once httpx2 stands in for httpx
import time  # noqa: E402 - imported once httpx2 stands in for httpx
from collections.abc import Callable  # noqa: E402 - imported once httpx2 stands in for httpx
from typing import Any  # noqa: E402 - imported once httpx2 stands in for httpx

import openai  # noqa: E402 - imported once httpx2 stands in for httpx
from opentelemetry import trace  # noqa: E402 - imported once httpx2 stands in for httpx
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402 - imported once httpx2 stands in for httpx
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402 - imported once httpx2 stands in for httpx

import meritlens.instrumentation as ml  # noqa: E402 - imported once httpx2 stands in for httpx
from meritlens.instrumentation import conventions as c  # noqa: E402 - imported once httpx2 stands in for httpx

MODEL = "gpt-4o-mini"
MESSAGES = [{"role": "user", "content": "Say hello"}]
STREAM_TEXTS = ("Hel", "lo", ",", " wor", "ld", "!")

COMPLETION = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Hello, world!"}, "finish_reason": "stop"}
        ],
        "usage": {
            "prompt_tokens": 12,
            "completion_tokens": 4,
            "total_tokens": 16,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
    }
).encode()


def _chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}],
        **({"usage": usage} if usage else {}),
    }


STREAM = (
    "".join(
        f"data: {json.dumps(chunk)}\n\n"
        for chunk in [
            _chunk({"role": "assistant", "content": ""}),
            *(_chunk({"content": text}) for text in STREAM_TEXTS),
            _chunk({}, "stop"),
            _chunk({}, usage={"prompt_tokens": 12, "completion_tokens": 6, "total_tokens": 18}),
        ]
    )
    + "data: [DONE]\n\n"
).encode()


def handler(request: httpx2.Request) -> httpx2.Response:
    if b'"stream":true' in request.content or b'"stream": true' in request.content:
        return httpx2.Response(200, content=STREAM, headers={"content-type": "text/event-stream"})
    return httpx2.Response(200, content=COMPLETION, headers={"content-type": "application/json"})


def new_client() -> openai.OpenAI:
    return openai.OpenAI(
        api_key="sk-bench",
        base_url="http://bench.invalid/v1",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )


class DropExporter(SpanExporter):
    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS


# --- variants ------------------------------------------------------------------------------------------------


def plain_call(client: openai.OpenAI) -> Callable[[bool], Any]:
    def call(stream: bool) -> Any:
        if stream:
            for _chunk in client.chat.completions.create(
                model=MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
            ):
                pass
            return None
        return client.chat.completions.create(model=MODEL, messages=MESSAGES)

    return call


def handwritten_call(client: openai.OpenAI, tracer: trace.Tracer) -> Callable[[bool], Any]:
    """What a careful developer writes by hand: one span, request attributes at start, usage at the end."""
    start_attributes = {
        c.GEN_AI_OPERATION_NAME: "chat",
        c.GEN_AI_PROVIDER_NAME: "openai",
        c.TARGET_ID: "bench/target",
        c.ROLE: "application",
    }

    def call(stream: bool) -> Any:
        with tracer.start_as_current_span(
            f"chat {MODEL}",
            kind=trace.SpanKind.CLIENT,
            attributes={**start_attributes, c.GEN_AI_REQUEST_MODEL: MODEL, c.GEN_AI_REQUEST_STREAM: stream},
        ) as span:
            if stream:
                usage = model = finish = None
                for chunk in client.chat.completions.create(
                    model=MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
                ):
                    model = chunk.model
                    if chunk.usage is not None:
                        usage = chunk.usage
                    if chunk.choices and chunk.choices[0].finish_reason:
                        finish = chunk.choices[0].finish_reason
                span.set_attributes(
                    {
                        c.GEN_AI_RESPONSE_MODEL: model,
                        c.GEN_AI_USAGE_INPUT_TOKENS: usage.prompt_tokens,
                        c.GEN_AI_USAGE_OUTPUT_TOKENS: usage.completion_tokens,
                        c.GEN_AI_RESPONSE_FINISH_REASONS: [finish],
                        c.GEN_AI_RESPONSE_ID: "chatcmpl-bench",
                        c.RETRIES: 0,
                    }
                )
                return None
            response = client.chat.completions.create(model=MODEL, messages=MESSAGES)
            usage = response.usage
            span.set_attributes(
                {
                    c.GEN_AI_RESPONSE_MODEL: response.model,
                    c.GEN_AI_RESPONSE_ID: response.id,
                    c.GEN_AI_USAGE_INPUT_TOKENS: usage.prompt_tokens,
                    c.GEN_AI_USAGE_OUTPUT_TOKENS: usage.completion_tokens,
                    c.GEN_AI_RESPONSE_FINISH_REASONS: [response.choices[0].finish_reason],
                    c.RETRIES: 0,
                }
            )
            return response

    return call


PEERS = {
    "official-v2": "opentelemetry.instrumentation.openai_v2",
    "openinference": "openinference.instrumentation.openai",
    "openllmetry": "opentelemetry.instrumentation.openai",
}
VARIANTS = ("bare", "bare-control", "handwritten", "meritlens", *PEERS)


def build_variant(name: str, provider: TracerProvider) -> Callable[[bool], Any]:
    """The call of one variant, in a process of its own (peers patch the openai classes process-wide)."""
    if name in ("bare", "bare-control"):
        return plain_call(new_client())
    if name == "handwritten":
        return handwritten_call(new_client(), provider.get_tracer("bench.handwritten"))
    if name == "meritlens":
        ml.configure(tracer_provider=provider)
        return plain_call(ml.instrument(new_client(), target="bench/target"))
    instrumentor = __import__(PEERS[name], fromlist=["OpenAIInstrumentor"]).OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    return plain_call(new_client())


def worker(name: str, connection: Any, clock_name: str = "wall") -> None:
    """Serve batches of one variant: receive (stream, count), answer the per-call times in ns."""
    try:
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(DropExporter(), max_queue_size=65536, schedule_delay_millis=500))
        call = build_variant(name, provider)
        assert call(False).choices[0].message.content == "Hello, world!"
        call(True)
    except Exception as error:  # a peer that is not installed or does not work with this openai
        connection.send(f"unavailable ({type(error).__name__}: {error})")
        return
    connection.send("ready")
    clock = time.thread_time_ns if clock_name == "cpu" else time.perf_counter_ns
    while True:
        request = connection.recv()
        if request is None:
            break
        stream, count = request
        samples = []
        for _ in range(count):
            started = clock()
            call(stream)
            samples.append(clock() - started)
        connection.send(samples)
    provider.shutdown()


# --- measurement ---------------------------------------------------------------------------------------------


def same_process(args: argparse.Namespace) -> dict[tuple[str, bool], list[int]]:
    """bare, handwritten and meritlens interleaved in this one process; per-call times in ns."""
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DropExporter(), max_queue_size=65536, schedule_delay_millis=500))
    calls = {name: build_variant(name, provider) for name in ("bare", "handwritten", "meritlens")}
    clock = time.thread_time_ns if args.clock == "cpu" else time.perf_counter_ns
    for call in calls.values():
        for stream in (False, True):
            for _ in range(args.warmup):
                call(stream)
    samples: dict[tuple[str, bool], list[int]] = {(name, stream): [] for name in calls for stream in (False, True)}
    names = list(calls)
    for round_number in range(args.rounds):
        shift = round_number % len(names)
        order = names[shift:] + names[:shift]
        for stream in (False, True):
            for name in order:
                call = calls[name]
                out = samples[(name, stream)]
                for _ in range(args.batch):
                    started = clock()
                    call(stream)
                    out.append(clock() - started)
    provider.shutdown()
    return samples


def percentile(values: list[int], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] / 1000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--only", help="comma-separated variants to run (default: all)")
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall: perf_counter; cpu: the worker thread's CPU time (robust when other processes load the machine)",
    )
    parser.add_argument(
        "--same-process",
        action="store_true",
        help="bare, handwritten and meritlens interleaved in one process (no peers, no per-process offsets)",
    )
    args = parser.parse_args()
    if args.same_process:
        samples = same_process(args)
        report(args, samples, ["bare", "handwritten", "meritlens"], ["one process for all variants"])
        return
    chosen = [name for name in VARIANTS if not args.only or name in args.only.split(",") or name == "bare"]

    context = multiprocessing.get_context("spawn")
    workers: dict[str, Any] = {}
    notes = []
    for name in chosen:
        parent, child = context.Pipe()
        process = context.Process(target=worker, args=(name, child, args.clock), daemon=True)
        process.start()
        status = parent.recv()
        if status == "ready":
            workers[name] = (process, parent)
        else:
            notes.append(f"{name}: {status}")
            process.join()
    samples: dict[tuple[str, bool], list[int]] = {(name, stream): [] for name in workers for stream in (False, True)}
    for _, connection in workers.values():
        for stream in (False, True):
            connection.send((stream, args.warmup))
            connection.recv()
    names = list(workers)
    for round_number in range(args.rounds):
        order = names if round_number % 2 == 0 else names[::-1]
        for stream in (False, True):
            for name in order:  # one worker runs at a time: no contention between variants
                connection = workers[name][1]
                connection.send((stream, args.batch))
                samples[(name, stream)].extend(connection.recv())
    for process, connection in workers.values():
        connection.send(None)
        process.join()
    report(args, samples, names, ["one process per variant", *notes])


def report(
    args: argparse.Namespace, samples: dict[tuple[str, bool], list[int]], names: list[str], notes: list[str]
) -> None:
    print(
        f"python {platform.python_version()} on {platform.machine()} ({os.cpu_count()} cpus), "
        f"openai {openai.__version__}; "
        f"{args.rounds} rounds x {args.batch} calls per variant and mode, interleaved, {notes[0]}, "
        f"{args.clock} clock"
    )
    for note in notes[1:]:
        print("  " + note)
    for stream in (False, True):
        mode = "streaming (read to the end)" if stream else "non-streaming"
        bare = samples[("bare", stream)]
        bare_p10, bare_median = percentile(bare, 0.10), percentile(bare, 0.50)
        added: dict[str, tuple[float, float]] = {}
        print(f"\n{mode}: per-call {args.clock} time and time added over the bare client, in µs")
        print(f"  {'variant':<14}{'p10':>9}{'median':>9}{'+p10':>9}{'+median':>9}")
        for name in names:
            values = samples[(name, stream)]
            p10, median = percentile(values, 0.10), percentile(values, 0.50)
            added[name] = (p10 - bare_p10, median - bare_median)
            extra = "" if name == "bare" else f"{p10 - bare_p10:>+9.0f}{median - bare_median:>+9.0f}"
            print(f"  {name:<14}{p10:>9.0f}{median:>9.0f}{extra}")
        ours = added.get("meritlens", (float("nan"), float("nan")))
        for reference in ("handwritten", "official-v2"):
            if reference in added:
                theirs = added[reference]
                print(f"  meritlens / {reference}: p10 {ours[0] / theirs[0]:.2f}x, median {ours[1] / theirs[1]:.2f}x")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

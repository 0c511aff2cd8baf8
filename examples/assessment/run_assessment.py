"""An assessment: run a frozen case set against the target, record outcomes, then check readiness.

    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 .venv/bin/python examples/assessment/run_assessment.py [CASES]
    .venv/bin/meritlens readiness --profile examples/assessment/profile.toml --scope baseline-2026-11 --baseline

`--scope baseline-2026-11` counts only this assessment's tasks; without it (scope `all`) every task
of the target counts, the quickstart's too.

With fewer cases than the profile's min_samples the readiness check lists the shortfall
("task_success: 5 of 12 samples") and exits 1; with all 12 it exits 0.
"""

from __future__ import annotations

import random
import sys
import time

from meritlens.instrumentation import configure, observe, record_outcome, shutdown, task

TARGET = "support-bot/answer"
ASSESSMENT = "baseline-2026-11"


@observe(target=TARGET)
def answer(ticket: int) -> dict:
    time.sleep(random.uniform(0.01, 0.05))
    return {"id": f"chatcmpl-{ticket}", "object": "chat.completion", "model": "gpt-4o-mini-2024-07-18",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": f"resolution for ticket {ticket}"}}],
            "usage": {"prompt_tokens": 300 + ticket, "completion_tokens": 40, "total_tokens": 340 + ticket}}


def main() -> None:
    cases = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    configure(service_name="support-bot")
    for ticket in range(cases):
        with task(task_id=f"{ASSESSMENT}/ticket-{ticket}", case_id=f"ticket-{ticket}", assessment_id=ASSESSMENT,
                  target=TARGET):
            reply = answer(ticket)
            # A known outcome from the frozen set: ticket 3 is answered wrongly on purpose.
            record_outcome(success=ticket != 3 and "resolution" in reply["choices"][0]["message"]["content"])
    shutdown()
    print(f"ran {cases} cases of assessment {ASSESSMENT!r} for {TARGET!r}")


if __name__ == "__main__":
    main()

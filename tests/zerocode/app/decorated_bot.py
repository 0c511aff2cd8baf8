"""The same support bot decorated by hand: `configure()`, `@observe(target=…)` on each function and
`instrument(client, target=…)` on each client, as docs/instrumentation.md shows. The zero-code tests
compare its windows with those of support_bot.py run under `opentelemetry-instrument`.

usage: python decorated_bot.py TARGET
"""

from __future__ import annotations

import sys

import support_bot
from meritlens.instrumentation import configure, instrument, observe, shutdown

if __name__ == "__main__":
    target = sys.argv[1]
    configure()
    support_bot.main(wrap=observe(target=target), prepare=lambda client: instrument(client, target=target))
    shutdown()

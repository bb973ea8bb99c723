# icegroup: set-up, demo, tests. Every target installs what it needs, so a fresh clone works.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export DAGSTER_HOME ?= $(CURDIR)/.dagster
export ICEGROUP_HOME ?= $(CURDIR)
PYTEST_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help system venv jvm instance demo test lint unit chaos bench ui clean

help: ## list the targets (this text)
	@echo "icegroup: make TARGET"
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z]+):.*## (.*)/  \1\t\2/' | expand -t 12

system: ## Java 17 and the JDBC driver jars (apt-get as root when missing)
	@bash infra/install_system.sh

$(STAMP): pyproject.toml
	@bash infra/install_venv.sh "$(PYTHON)" "$(VENV)"
	@touch $(STAMP)

venv: $(STAMP) ## the virtualenv with the pinned dependencies and the dev tools

jvm: system venv ## the jars: the fenced sink commit (spark_jobs/jvm) and the SQLite JDBC shim (infra/sqlite_jdbc)
	@bash infra/build_jar.sh spark_jobs/jvm/src spark_jobs/jvm/icegroup-commit.jar $(PY)
	@bash infra/build_jar.sh infra/sqlite_jdbc/src infra/sqlite_jdbc/icegroup-sqlite-jdbc.jar $(PY)

instance: ## the local Dagster instance the demo, the CLI and the UI share
	@mkdir -p $(DAGSTER_HOME)
	@[ -f $(DAGSTER_HOME)/dagster.yaml ] || cp infra/dagster.yaml $(DAGSTER_HOME)/dagster.yaml

demo: jvm instance ## the demo: source table, group, consume, append, consume, describe, verify
	$(PY) -m infra.demo

lint: venv ## ruff, mypy and the import-direction contracts
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

unit: venv ## the fast tier only
	$(PY) -m pytest tests/unit -q $(PYTEST_ARGS)

test: jvm lint ## every tier this machine can run
	$(PY) -m pytest -q $(PYTEST_ARGS)

chaos: jvm ## kill -9 fault injection, full size: consume workers, then a Leader with warm Borrowers; records tests/chaos/results/
	$(PY) -m tests.chaos.run --full
	$(PY) -m tests.chaos.run --full --borrowers

bench: jvm ## side by side against plain Spark and Structured Streaming (throughput W1/W2, latency L), Leader planning, heartbeats, processes, replay, idle consume, what a shard costs beyond a plain write, a tick after 10,000 ticks and commits; records tests/benchmarks/results/
	$(PY) -m tests.benchmarks.bench_throughput
	$(PY) -m tests.benchmarks.bench_latency
	$(PY) -m tests.benchmarks.bench_leader
	$(PY) -m tests.benchmarks.bench_heartbeat
	$(PY) -m tests.benchmarks.bench_processes
	$(PY) -m tests.benchmarks.bench_replay
	$(PY) -m tests.benchmarks.bench_idle_consume
	$(PY) -m tests.benchmarks.bench_lineage_cost
	$(PY) -m tests.benchmarks.bench_long_history

ui: jvm instance ## the Dagster UI on 127.0.0.1:3000 over the demo's instance
	$(VENV)/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

clean: ## remove the lake, the Dagster instance and the venv
	rm -rf .lake .dagster $(VENV)

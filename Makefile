# icegroup: set-up, demo, tests. Every target installs what it needs, so a fresh clone works.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export DAGSTER_HOME ?= $(CURDIR)/.dagster
export ICEGROUP_HOME ?= $(CURDIR)
export ICEGROUP_GROUPS ?= $(CURDIR)/dagster_project/groups.yaml
PYTEST_ARGS ?=
# The suites run on 2 pytest-xdist workers, a test file to each (its fixtures set up once per file): most of a test's
# time is spent waiting on a JVM, a subprocess or a poll, so two workers share 2 cores well (docs/contributing.md).
# WORKERS=0 runs them in one process.
WORKERS ?= 2
XDIST = $(if $(filter 0,$(WORKERS)),,-n $(WORKERS) --dist loadfile)
# The default pair (docs/reference/matrix.md): what the lock's pyspark runs and icegroup-spark.jar is built against.
ICEBERG_VERSION ?= 1.10.1
SPARK_RUNTIME ?= 3.5_2.12
# The other supported pairs, each as pyspark release:Iceberg release (an empty pyspark: the lock's, in .venv).
MATRIX ?= :1.9.2 4.0.5:1.10.1
# What runs on them (docs/reference/matrix.md): the core of the integration tier on each; the CI-sized chaos run with
# consume workers too on a pair whose Spark is not the lock's (`make test` runs both chaos runs on the lock's Spark).
MATRIX_TESTS ?= tests/integration/test_exactly_once.py tests/integration/test_zombie.py \
	tests/integration/test_replay.py tests/integration/test_reset.py tests/integration/test_lineage_exact.py \
	tests/integration/test_isolation.py tests/integration/test_expired_history.py tests/integration/test_row_lineage.py \
	tests/integration/test_appended_files.py tests/integration/test_rehearsal.py
MATRIX_CHAOS ?= tests/chaos/test_chaos.py::test_kill_9_chaos_keeps_exactly_once[consume-workers]
# `.ci/run` sets CI_SPLIT=1, so that CI runs once what these targets would each run. The chaos run with consume
# workers runs in `make test` only (not on Spark 4.0, nor on the fixture stack, where it takes 8 minutes); the daemon
# end-to-end tests run on the fixture stack only (Iceberg's REST server, PostgreSQL, S3, a Spark cluster); the REST
# fences and restarts on the fixture's REST tier only; the tutorial from the wheel with the newest releases only;
# Nessie's refusal in the REST tier only (no Nessie stack).
CI_SPLIT ?=
TEST_DESELECT = $(if $(CI_SPLIT),--deselect tests/e2e/test_daemon.py \
	--deselect tests/rest/test_rest_fences.py --deselect tests/rest/test_rest_restart.py \
	--deselect "tests/package/test_wheel.py::test_the_tutorial_works_from_the_wheel_outside_the_checkout[pinned]")

.DEFAULT_GOAL := help
.PHONY: help system venv lock jvm jars dist docs instance demo test test-matrix lint unit chaos bench ui screenshots clean stack-up stack-down stack-status test-stack test-catalogs bench-stack bench-scaling

help: ## list the targets (this text)
	@echo "icegroup: make TARGET"
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## (.*)/\1\t\2/' | awk -F'\t' '{printf "  %-13s %s\n", $$1, $$2}'

system: ## Java 17, Maven, PostgreSQL and Chromium (apt-get as root when missing)
	@bash infra/install_system.sh

PACKAGE := build/python/icegroup/__init__.py

$(PACKAGE): infra/package_links.sh
	@bash infra/package_links.sh

$(STAMP): pyproject.toml requirements.lock $(PACKAGE) infra/install_venv.sh
	@bash infra/install_venv.sh "$(PYTHON)" "$(VENV)"
	@touch $(STAMP)

venv: $(STAMP) ## the virtualenv with exactly the tested versions (requirements.lock) and the dev tools
	@$(PY) -m compileall -q -j0 iceberg spark_jobs dagster_project infra  # icegroup's own bytecode, as new as its sources

lock: venv ## re-resolve requirements.lock within pyproject.toml's ranges (then run make test: the lock is what was tested)
	$(VENV)/bin/uv pip compile pyproject.toml --extra dev --python-version 3.11.7 --no-annotate --custom-compile-command "make lock" -q -o requirements.lock

jvm: system venv ## icegroup's Java, built with Maven against the Iceberg in use: the fenced sink commit, lineage's file reference and the SQLite shim (icegroup-spark.jar), the stack's REST catalog server, and the class archive new Spark drivers start from
	@bash infra/build_jvm.sh $(ICEBERG_VERSION) $(SPARK_RUNTIME)
	@$(PY) -m icegroup.infra.class_archive  # the classes a new Spark driver starts from, recorded once per jar set

jars: jvm ## one folder, build/jars, with every jar Spark needs, resolved from Maven Central: what a cluster's `jars:` setting points at
	@$(PY) -m icegroup.infra.jars build/jars

dist: jvm ## the wheel, with the compiled jars inside, in dist/: `pip install dist/icegroup-*.whl` needs Java 17, no compiler
	@rm -rf dist build/lib build/bdist.*
	$(PY) -m pip wheel -q --no-deps -w dist .
	@ls dist/*.whl

docs: venv ## the documentation site, built strictly (a broken link fails) into build/site
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d build/site

instance: ## the local Dagster instance the demo, the CLI and the UI share
	@mkdir -p $(DAGSTER_HOME)
	@[ -f $(DAGSTER_HOME)/dagster.yaml ] || cp infra/dagster.yaml $(DAGSTER_HOME)/dagster.yaml

demo: jvm instance ## the demo: source table, group, consume, append, consume, describe, verify
	$(PY) -m icegroup.infra.demo

lint: venv ## ruff, mypy and the import-direction contracts
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

unit: venv ## the fast tier only
	$(PY) -m pytest tests/unit -q $(PYTEST_ARGS)

test: jvm lint ## every tier this machine can run
	$(PY) -m pytest -q $(XDIST) $(TEST_DESELECT) $(PYTEST_ARGS)

test-matrix: jvm ## the core integration tests on every other supported Spark and Iceberg pair, the CI-sized chaos run with consume workers on the other Spark
	@set -e; for pair in $(MATRIX); do \
	  pyspark=$${pair%%:*}; iceberg=$${pair##*:}; py=$(PY); \
	  tests="$(MATRIX_TESTS)"; \
	  if [ -n "$$pyspark" ]; then bash infra/install_venv.sh "$(PYTHON)" .venv-spark$$pyspark $$pyspark; \
	    py=.venv-spark$$pyspark/bin/python; tests="$$tests $(if $(CI_SPLIT),,$(MATRIX_CHAOS))"; fi; \
	  echo "== Spark $$($$py -c 'import pyspark; print(pyspark.__version__)') with Iceberg $$iceberg"; \
	  ICEGROUP_ICEBERG_VERSION=$$iceberg $$py -m pytest -q -p no:cacheprovider $(XDIST) $$tests $(PYTEST_ARGS); \
	done

chaos: jvm ## kill -9 fault injection, full size: consume workers, then a Leader with warm Borrowers; records tests/chaos/results/
	$(PY) -m tests.chaos.run --full
	$(PY) -m tests.chaos.run --full --borrowers

bench: jvm ## side by side against plain Spark and Structured Streaming (throughput W1/W2, latency L), the default Dagster path from the daemon's start, Leader planning, heartbeats, what a source branch costs the producer, processes, replay, poison-row isolation, idle consume, what a shard and a backlog's one job cost beyond a plain write and which code spends it, one lease against a lease per slot, leases publishing at once, where a consume's time goes and who spends its CPU, forward lineage precision and recall, what a source row id costs, a tick after 10,000 ticks and commits, a consume on the REST catalog beside the SQL catalog, sources of other shapes; records tests/benchmarks/results/
	$(PY) -m tests.benchmarks.bench_throughput
	$(PY) -m tests.benchmarks.bench_daemon_start
	$(PY) -m tests.benchmarks.bench_latency
	$(PY) -m tests.benchmarks.bench_leader
	$(PY) -m tests.benchmarks.bench_heartbeat
	$(PY) -m tests.benchmarks.bench_branch_contention
	$(PY) -m tests.benchmarks.bench_processes
	$(PY) -m tests.benchmarks.bench_replay
	$(PY) -m tests.benchmarks.bench_isolation
	$(PY) -m tests.benchmarks.bench_idle_consume
	$(PY) -m tests.benchmarks.bench_lineage_cost
	$(PY) -m tests.benchmarks.bench_batch_cost
	$(PY) -m tests.benchmarks.bench_lease_packing
	$(PY) -m tests.benchmarks.bench_group_commit --label $$(git rev-parse --short HEAD)
	$(PY) -m tests.benchmarks.bench_task_profile
	$(PY) -m tests.benchmarks.bench_breakdown
	$(PY) -m tests.benchmarks.bench_cpu
	$(PY) -m tests.benchmarks.bench_lineage_precision
	$(PY) -m tests.benchmarks.bench_row_lineage
	$(PY) -m tests.benchmarks.bench_long_history
	$(PY) -m tests.benchmarks.bench_rest
	$(PY) -m tests.benchmarks.bench_scaling
	$(PY) -m tests.benchmarks.bench_shapes

bench-scaling: jvm ## how the ratio to a plain Spark job grows with the work: W1 at 1x/4x/10x, W2 at 300 and 3,000 snapshots; records tests/benchmarks/results/scaling.*
	$(PY) -m tests.benchmarks.bench_scaling $(BENCH_ARGS)

screenshots: jvm ## the docs' screenshots of the Dagster UI over the demo, taken in Chromium by tests/e2e/test_ui.py
	ICEGROUP_SCREENSHOTS=$(CURDIR)/docs/images $(PY) -m pytest -q tests/e2e/test_ui.py

ui: jvm instance ## the Dagster UI on 127.0.0.1:3000 over the demo's instance
	$(VENV)/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

stack-up: jvm ## the scale-out stack: PostgreSQL, a REST catalog (CATALOG=icegroup|fixture|nessie), a Spark master and 2 workers, dagster-webserver and -daemon, S3 (moto)
	@$(PY) -m icegroup.infra.stack up $(STACK_CATALOG)

stack-status: venv ## each stack part: up or down, where it listens, where it logs
	@$(PY) -m icegroup.infra.stack status

stack-down: venv ## stop every stack process (data kept in .stack/)
	@$(PY) -m icegroup.infra.stack down

# The REST catalog server the stack runs: empty for icegroup's own (docs/how-to/rest-catalog.md).
CATALOG ?=
STACK_CATALOG = $(if $(CATALOG),--catalog $(CATALOG))

# What runs again on the stack: the stack tier, and the tests whose outcome the stack's parts can change most (the
# REST catalog's commits and fences, a Spark cluster's executors, PostgreSQL under Dagster). The rest of the
# integration tier and the chaos suite run on the embedded default in `make test`, a zombie's fence and lost commit
# answers on a REST catalog in the REST tier (tests/rest), and the daemon end-to-end tests and chaos on the fixture
# stack in `make test-catalogs`; CI has no time for them twice.
# `make test-stack STACK_TESTS="tests/chaos tests/integration" PYTEST_ARGS="-m 'not postgres'"` runs them here.
STACK_TESTS ?= tests/stack \
	$(addprefix tests/integration/test_,$(addsuffix .py,exactly_once fencing_and_resume replay dagster))

test-stack: jvm ## the stack tier, and the exactly-once, fencing, lineage, replay and Dagster tests again, on the stack; stack-down even on failure
	@status=0; \
	$(PY) -m icegroup.infra.stack up $(STACK_CATALOG) && { set -a; source .stack/env; set +a; ICEGROUP_TEST_STACK=$(CURDIR)/.stack \
	  $(PY) -m pytest -q $(STACK_TESTS) $(PYTEST_ARGS); } \
	  || status=$$?; \
	$(PY) -m icegroup.infra.stack down || status=1; exit $$status

# What runs on the REST servers icegroup did not write (docs/how-to/rest-catalog.md): on Iceberg's REST fixture the
# REST tier (its lost answers as dropped connections; `make test` answers 503 on icegroup's server), then the
# Dagster end-to-end tests and the chaos suite's consume-workers run on the fixture stack, its warehouse in S3; on
# Nessie, which keeps no snapshot history, the stack comes up and icegroup refuses it before reading or writing.
FIXTURE_STACK_TESTS ?= tests/e2e/test_daemon.py "tests/chaos/test_chaos.py::test_kill_9_chaos_keeps_exactly_once[consume-workers]"

test-catalogs: jvm ## the REST tier, the Dagster end-to-end tests and chaos on Iceberg's REST fixture; Nessie's stack and its refusal
	ICEGROUP_TEST_REST_SERVER=fixture $(PY) -m pytest -q $(XDIST) tests/rest/test_rest_fences.py tests/rest/test_rest_restart.py \
	  tests/rest/test_lost_answers.py $(PYTEST_ARGS)
	$(MAKE) test-stack CATALOG=fixture STACK_TESTS='$(if $(CI_SPLIT),tests/e2e/test_daemon.py,$(FIXTURE_STACK_TESTS))'
	$(if $(CI_SPLIT),,$(MAKE) test-stack CATALOG=nessie STACK_TESTS=tests/stack/test_nessie.py)

bench-stack: jvm ## throughput on the stack beside the embedded stack, 1 and 2 workers; records tests/benchmarks/results/stack_throughput.*
	@status=0; $(PY) -m icegroup.infra.stack up && $(PY) -m tests.benchmarks.bench_stack || status=$$?; \
	$(PY) -m icegroup.infra.stack down || status=1; exit $$status

clean: ## remove the lake, the Dagster instance, the stack's data, the built jars, the wheel and the venv
	-@[ ! -d .stack ] || [ ! -x $(PY) ] || $(PY) -m icegroup.infra.stack down
	rm -rf .lake .dagster .stack build dist $(VENV) .venv-spark*

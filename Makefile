# lakewarden developer commands. Everything runs from the project's own virtualenv (.venv).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup kafka-jars spark-jars delta-jars spark-udf peers-deps deps up down demo test test-fast fuzz campaign lint docs typecheck bench perf-page wheel clean

# Idempotent and fast: reinstalls only when pyproject.toml changed since the last install.
setup: $(STAMP) kafka-jars spark-jars delta-jars spark-udf

# `.[dev]`: every extra (lakewarden[all]) plus the test, lint and dev-stack tools.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# compat mode puts the project root on sys.path, so Spark's lookup of installed
	# `pyspark_*` modules finds pyspark_lakewarden (format "lakewarden" without register()).
	# setuptools announces the mode as transitional on every install; we chose it on purpose,
	# so that one notice is filtered (the only one: `make demo` prints no build warnings).
	PYTHONWARNINGS="ignore:Compat editable installs" \
	  $(BIN)/python -m pip install --quiet -e '.[dev]' --config-settings editable_mode=compat
	touch $(STAMP)

# Apache Kafka's own jars (plus an slf4j binding), fetched by Maven into infra/kafka/lib.
kafka-jars: infra/kafka/lib/.fetched

# A changed pom starts from an empty lib/, so jars of an older Kafka never share the classpath.
infra/kafka/lib/.fetched: infra/kafka/pom.xml
	rm -rf infra/kafka/lib
	mvn -B -q -Dstyle.color=never -f infra/kafka/pom.xml dependency:copy-dependencies -DoutputDirectory=lib
	touch $@

# Spark's Kafka source (spark-sql-kafka-0-10 and what pyspark lacks), fetched by Maven into
# infra/spark/jars; `lakewarden ingest` passes them as local files in spark.jars (no Ivy).
spark-jars: infra/spark/jars/.fetched

infra/spark/jars/.fetched: infra/spark/pom.xml
	rm -rf infra/spark/jars
	mvn -B -q -Dstyle.color=never -f infra/spark/pom.xml dependency:copy-dependencies -DoutputDirectory=jars
	touch $@

# Delta Lake's Spark reader, for the tests that read a published table with Spark's own reader.
delta-jars: infra/spark/delta-jars/.fetched

infra/spark/delta-jars/.fetched: infra/spark/delta/pom.xml
	rm -rf infra/spark/delta-jars
	mvn -B -q -Dstyle.color=never -f infra/spark/delta/pom.xml dependency:copy-dependencies -DoutputDirectory=../delta-jars
	touch $@

# lakewarden's Java UDFs (record key bucket, partition value escaping; lakewarden/spark/java),
# compiled with the JDK against pyspark's own jar into ~/.cache/lakewarden (LAKEWARDEN_UDF_CACHE),
# keyed by the sources' digest: a no-op when built. Spark writes build it on first use too.
spark-udf: $(STAMP)
	$(BIN)/python -m lakewarden.spark._jvm_udf

# The peers benchmark's Delta Lake and Hudi jars (Maven, infra/peers/*/pom.xml) and the
# pyspark 3.5 virtualenv Hudi runs in (infra/peers/hudi/venv); `python -m benchmarks peers`
# fetches them itself on first use. Not needed by anything else.
peers-deps: setup
	$(BIN)/python -m benchmarks._peers_setup

deps: setup

up: setup
	$(BIN)/lakewarden dev up $(UP_ARGS)

down:
	$(BIN)/lakewarden dev down

demo: setup
	$(BIN)/python -m lakewarden.demo

# The documentation site is built strictly: a broken link, a missing page or a page outside the
# navigation fails lint (and so `make test`). Built into site/ (gitignored).
lint: setup
	$(BIN)/ruff check lakewarden services tests benchmarks tools
	$(BIN)/ruff format --check lakewarden services tests benchmarks tools
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir site

# Serve the documentation site at http://127.0.0.1:8000, rebuilt on every change.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve -a 127.0.0.1:8000

typecheck: setup
	$(BIN)/mypy

# Two pytest-xdist workers: most of the suite waits on brokers, services and heartbeats, so two
# workers keep both cores busy. `--dist loadfile` keeps a module's tests on one worker, so a
# module-scoped service process starts once; each worker has its own session stack (Kafka,
# SeaweedFS, Spark) on free ports. `make test PYTEST_WORKERS=0` runs in one process.
PYTEST_WORKERS ?= 2

# The whole suite: unit, integration (real Kafka + SeaweedFS) and system tests.
test: setup lint typecheck
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadfile

# Everything but the slow suites, for the edit-test loop.
test-fast: setup
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadfile -m 'not slow'

# Random exploration, not part of `make test`: only the hypothesis tests, with the "fuzz" profile
# (random draws, 20x the examples; tests/_hypothesis_profiles.py). Keep what it finds as @example.
fuzz: setup
	HYPOTHESIS_PROFILE=fuzz $(BIN)/pytest -q -m hypothesis tests/unit

# The randomized fault campaign (tests/campaign/campaign.py): RUNS seeded runs from SEED, each a
# random workload of Python writers and a random fault schedule against the real stack, checked
# by independent checkers. A failing run prints the command that replays its seed.
# SPARK and TABLE_SERVICES: the shares of runs with a Spark writer / table-service executors.
RUNS ?= 200
SEED ?= 1
DURATION ?= 20
SPARK ?= 0.15
TABLE_SERVICES ?= 0.5
# MODE=embedded: no Kafka; writers, executors, cleaners, cancels and a reader in processes.
MODE ?= kafka
campaign: setup
	PYTHONPATH=. $(BIN)/python tests/campaign/campaign.py --runs $(RUNS) --seed $(SEED) \
	  --duration $(DURATION) --spark $(SPARK) --table-services $(TABLE_SERVICES) \
	  --mode $(MODE) $(CAMPAIGN_ARGS)

bench: setup
	$(BIN)/python -m benchmarks

# The wheel users install (`pip install 'dist/lakewarden-<version>-py3-none-any.whl[s3]'`);
# tests/packaging builds and installs it into fresh virtualenvs.
wheel: setup
	$(BIN)/python -m pip wheel --no-deps --quiet --wheel-dir dist .

# docs/performance.md from the JSON results in benchmarks/results/ (the latest figure of each
# benchmark and metric): run after `make bench` (or a subset: python -m benchmarks NAME ...).
perf-page: setup
	$(BIN)/python -m benchmarks.perf_page

clean:
	rm -rf $(VENV) dist build site infra/kafka/lib infra/spark/jars infra/spark/delta-jars infra/peers/*/jars infra/peers/hudi/venv .lakewarden-state .pytest_cache .mypy_cache .ruff_cache

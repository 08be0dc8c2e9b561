# pylmq: `make run` starts a node, `make test` installs what the tests need and runs them.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
EXTRAS ?= test,spark
STAMP  := $(VENV)/.installed-$(EXTRAS)
PYTEST_ARGS ?=

.PHONY: run rel test lint check pytest pytest-postgres deps tools erlang java interop statsd bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[$(EXTRAS)]'
	touch $@

deps: $(STAMP)

# Debian packages the tests and the quick bench need, as binary:package pairs. Every one that is
# missing is installed with one apt-get run before any test starts, so a machine that has never
# run anything passes `make test` (a package installed later, e.g. by the bench, is too late).
#   erl, erlc: the interop and mixed-cluster tests (real Erlang/OTP; Debian 12's is OTP 25, which
#              the LMQ reference kit in ../shared/lmq-reference needs)
#   java:      the Spark tests run a local Spark (pyspark 4 needs Java 17+)
#   wrk, nginx: the bench's generator and its no-op ceiling (tests/bench and `make bench QUICK=1`)
#   npm:       the StatsD daemon of tests/ops/test_statsd_daemon.py
#   chromium, chromedriver: the web console's browser tests (tests/console)
#   redis-server: the bench's Redis driver tests (tests/bench/test_bench_redis.py)
APT_TOOLS := erl:erlang-nox erlc:erlang-dev java:openjdk-17-jre-headless wrk:wrk nginx:nginx-light npm:npm \
	chromium:chromium chromedriver:chromium-driver redis-server:redis-server
# postgresql: the throwaway PostgreSQL of the postgres store's tests (tests/pg_helpers.py). Debian
# keeps its binaries off PATH, in /usr/lib/postgresql/<version>/bin: probed there (or $PG_BIN).
# The package creates the `postgres` system user the tests run the server as when run as root.
PG_PROBE := { [ -n "$$PG_BIN" ] && [ -x "$$PG_BIN/initdb" ]; } || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
	|| command -v initdb >/dev/null 2>&1

tools:
	@missing=""; for pair in $(APT_TOOLS); do bin=$${pair%%:*}; pkg=$${pair#*:}; \
	  command -v $$bin >/dev/null 2>&1 || [ -x /usr/sbin/$$bin ] || missing="$$missing $$pkg"; done; \
	$(PG_PROBE) || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
	  echo "installing missing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing \
	    || { echo "apt-get could not install:$$missing (run make test as root, or install them)"; exit 1; }; \
	fi; \
	if [ "$$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then \
	  echo "no postgres system user to run the tests' PostgreSQL as (Debian's postgresql package creates it)"; exit 1; \
	fi

erlang java: tools

# The Erlang test peer of the interop tests (interop/README.md).
INTEROP_BEAMS := $(patsubst interop/src/%.erl,interop/ebin/%.beam,$(wildcard interop/src/*.erl))

interop: $(INTEROP_BEAMS)

interop/ebin/%.beam: interop/src/%.erl $(wildcard interop/include/*.hrl) | erlang
	@mkdir -p interop/ebin
	erlc -Wall +warnings_as_errors -I interop/include -o interop/ebin $<

run: $(STAMP)
	$(BIN)/python -m pylmq

# A release in $(REL_DIR): bin/lmq, bin/lmq-admin, etc/ (kept on rebuild), log/, data/.
REL_DIR ?= rel/lmq
rel: $(STAMP)
	sh rel/build.sh "$(abspath $(BIN)/python)" "$(REL_DIR)"

lint: $(STAMP)
	$(BIN)/ruff check pylmq tests bench examples scripts
	$(BIN)/ruff format --check pylmq tests bench examples scripts
	$(BIN)/mypy pylmq tests
	$(BIN)/lint-imports --no-cache

# The StatsD daemon (npm) for tests/ops/test_statsd_daemon.py; installed only when missing.
STATSD_JS := .cache/statsd/node_modules/statsd/stats.js
statsd: $(STATSD_JS)
$(STATSD_JS): | tools
	npm install --prefix .cache/statsd --no-audit --no-fund statsd@0.9.0

# pytest exits 5 when it collected no test at all: that is a failure here, never a pass.
run_pytest = @$(BIN)/python -m pytest $(1); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

pytest: $(STAMP) tools interop statsd
	$(call run_pytest,$(PYTEST_ARGS))

# The HTTP and RPC API suites once more, on the postgres store (tests/suite_store.py): each test on
# a fresh database of one throwaway PostgreSQL. About 5 minutes on 2 busy cores, where the same
# suites take under a minute on the memory store. PG_PYTEST_ARGS passes more options.
PG_PYTEST_ARGS ?=
pytest-postgres: $(STAMP) tools
	$(call run_pytest,--store postgres tests/api tests/rpc $(PG_PYTEST_ARGS))

# The benchmark (bench/README.md): `make bench` (< 15 min) or `make bench QUICK=1` (< 3 min,
# also run by `make test` as a smoke test: no thresholds). BENCH_ARGS passes more options.
# An external LMQ measured in the same run (e.g. the original Erlang LMQ):
#   make bench LMQ_URL=http://127.0.0.1:9980 LMQ_RPC=127.0.0.1:18800 LMQ_PID=<its beam.smp pid>
# The mixed-cluster targets (two real LMQ nodes from ../shared/lmq-reference and a pylmq node
# joined; skipped with the reason without the kit): make bench MIXED=1 (about 2 minutes).
BENCH_STAMP := $(VENV)/.installed-bench
BENCH_ARGS ?=
LMQ_URL ?=
LMQ_RPC ?=
LMQ_PID ?=
MIXED ?=
# The Spark data source's rows/s (bench/spark.py; needs the spark extra): make bench SPARK=1.
SPARK ?=
$(BENCH_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e '.[bench]'
	touch $@

bench: $(BENCH_STAMP)
	$(BIN)/python -m bench $(if $(QUICK),--quick) $(if $(MIXED),--mixed) $(if $(SPARK),--spark) $(if $(LMQ_URL),--lmq-url $(LMQ_URL)) \
	  $(if $(LMQ_RPC),--lmq-rpc $(LMQ_RPC)) $(if $(LMQ_PID),--lmq-pid $(LMQ_PID)) $(BENCH_ARGS)

test: lint pytest pytest-postgres
	$(MAKE) bench QUICK=1

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

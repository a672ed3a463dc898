# Two commands on a fresh machine: `make demo` and `make test`. Everything else is optional.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := $(CURDIR)/.venv
BIN := $(VENV)/bin
DEMO_DATE ?= $(shell date -u -d yesterday +%F)
# pytest-xdist workers for `make test`: one runs the live Airflow deployments, one at a time, while
# the other takes every other test (tests/conftest.py says how the work is split).
TEST_WORKERS ?= 2
# `airflow standalone` starts its components as `airflow …` subprocesses: the venv must be on PATH.
export PATH := $(BIN):$(PATH)

# A project-local Airflow: SQLite, LocalExecutor, no examples, this repo's dags/ and plugins/.
export AIRFLOW_HOME := $(CURDIR)/.airflow
export AIRFLOW__CORE__DAGS_FOLDER := $(CURDIR)/dags
export AIRFLOW__CORE__PLUGINS_FOLDER := $(CURDIR)/plugins
export AIRFLOW__CORE__LOAD_EXAMPLES := False
export AIRFLOW__CORE__EXECUTOR := LocalExecutor
export AIRFLOW__API__HOST := 127.0.0.1
export AIRFLOW__API__PORT ?= 8080
export AIGC_LAKE_URI ?= $(CURDIR)/.lake
# What the trigger form (and the schedule) runs when nothing is changed: laptop-sized.
export AIGC_DEFAULT_PRESET ?= demo
export GX_ANALYTICS_ENABLED := False
# SQLite (the embedded metadata DB) fails a write after 5 s behind a lock: wait a minute instead.
# Only for SQLite: point these elsewhere (or unset them) with a PostgreSQL sql_alchemy_conn.
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS ?= aigc_airflow.sqlite.CONNECT_ARGS
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC ?= aigc_airflow.sqlite.CONNECT_ARGS
# The settings every LocalExecutor deployment of this project sets, from one place (plugins/aigc_airflow/operations.py
# writes deploy/airflow-local.env): a GPU task waits its turn up to 2 h, not Airflow's default 10 min; the workers
# fork each task from a server that imported PyTorch, Great Expectations and the stages once
# (plugins/aigc_airflow/preload.py); every event of an asset reaches a run of the DAGs it schedules
# (plugins/aigc_airflow/asset_manager.py). A value already in the environment wins.
AIRFLOW_SETTINGS := $(shell grep -v '^\#' $(or $(wildcard deploy/airflow-local.env),$(error deploy/airflow-local.env is missing: run make from the repository's root)))
$(foreach setting,$(AIRFLOW_SETTINGS),$(eval export $(subst =, ?= ,$(setting))))

.PHONY: help install demo demo-s3 demo-dates test test-reliability airflow bench bench-full bench-gpu gpu-check lint clean secrets

help:
	@echo "make demo     - set up, then run the pipeline DAG for $(DEMO_DATE) on the local lake (WORKLOAD=text: the text workload; WORKLOAD=hf-causal-lm or hf-diffusion [HF_MODEL=folder]: a transformers model or diffusers pipeline)"
	@echo "make test     - set up, then the whole test suite (unit, DAG, S3 server, end to end)"
	@echo "make test-reliability - the fault-injection suite alone (S3 faults through a proxy, lost replies)"
	@echo "make airflow  - the Airflow UI on http://127.0.0.1:$(AIRFLOW__API__PORT) (login printed)"
	@echo "make demo-s3  - the demo against a local S3 server instead of a folder"
	@echo "make secrets  - .env for docker compose: .env.example with every secret generated (kept where .env sets one)"
	@echo "make bench    - benchmarks (prepare: bound, scaling, fan-out; training: loading, throughput, DDP, measured rank balance; batching; long prompts; variants; the pipeline under Airflow vs the CLI; resolution x precision), then one table (goal 25 minutes; docs/benchmarks.md has what it took)"
	@echo "make bench-full - the same at the scripts' default sizes and budgets (about an hour)"
	@echo "make bench-gpu - the GPU section (B2 loop, B1 attention, B6 variants, B8 on CUDA; needs a CUDA build of torch)"
	@echo "make gpu-check - the prepared device check: tests/gpu, then B1 and B6 on CUDA (a few minutes on one GPU)"
	@echo "make demo-dates - the demo's nightly chain for 14 dates and gate 5's pass rate (about 90 minutes)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Re-install only when the pins change; the core is editable, so code edits need nothing.
$(VENV)/.installed: requirements.txt pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements.txt -e ".[dev]"
	touch $@

$(AIRFLOW_HOME)/airflow.db: $(VENV)/.installed
	mkdir -p $(AIRFLOW_HOME)
	$(BIN)/airflow db migrate > $(AIRFLOW_HOME)/db-migrate.log 2>&1 || (cat $(AIRFLOW_HOME)/db-migrate.log; exit 1)

# The pool GPU tasks (training, generation shards) take a slot of: one slot, one device.
$(AIRFLOW_HOME)/.pools: $(AIRFLOW_HOME)/airflow.db
	$(BIN)/airflow pools set gpu 1 "GPU slots: one per GPU on the gpu workers" > /dev/null
	touch $@

install: $(AIRFLOW_HOME)/.pools

# Progress on the console (tasks, training, gates); the full task log in $(AIRFLOW_HOME)/demo.log;
# `aigc status` at the end whether the run passed or failed.
# WORKLOAD=text: the text workload's five stages instead of the image workload's.
WORKLOAD ?= image
# WORKLOAD=hf-causal-lm HF_MODEL=<folder or lake URI>: your transformers model (save_pretrained layout) as the base;
# WORKLOAD=hf-diffusion HF_MODEL=<folder or lake URI>: your diffusers pipeline (save_pretrained layout);
# without HF_MODEL, a small demo base with random weights (docs/hf-causal-lm.md, docs/hf-diffusion.md).
HF_MODEL ?=
demo: install
	$(BIN)/python -m aigc.devtools.demo --date $(DEMO_DATE) --workload $(WORKLOAD) --log $(AIRFLOW_HOME)/demo.log \
		$(if $(HF_MODEL),--base-model "$(HF_MODEL)")

# The Compose deployment's .env: nothing installed, the standard library only (aigc/devtools/env_secrets.py).
secrets:
	$(PYTHON) include/aigc/devtools/env_secrets.py .env.example .env

demo-s3: install
	$(BIN)/python -m aigc.devtools.s3demo --date $(DEMO_DATE) --workload $(WORKLOAD)

# System packages some tests drive (the compose file's validator, headless Chromium and its
# driver for the browser test); where they cannot be installed those tests skip with a reason.
SYSTEM_PACKAGES := docker-compose chromium chromium-driver
.PHONY: system-deps
system-deps:
	@missing=""; for c in docker-compose chromium chromedriver; do command -v $$c >/dev/null || missing=1; done; \
	[ -z "$$missing" ] || (command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] \
		&& (apt-get update -qq && apt-get install -y -qq $(SYSTEM_PACKAGES) >/dev/null) \
		|| echo "note: could not install $(SYSTEM_PACKAGES); the tests that need them will skip")

test: install system-deps
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --durations=25 -m "not reliability_full" $(PYTEST_ARGS)

# The fault-injection suite (tests/reliability) whole: its quick part also runs in `make test`; the whole
# pipeline through faults (reliability_full) only here. CI runs both. Ends with the suite's summary line.
test-reliability: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --durations=10 tests/reliability $(PYTEST_ARGS)

airflow: install
	@echo "Airflow UI: http://127.0.0.1:$(AIRFLOW__API__PORT)  (login: admin, password in $(AIRFLOW_HOME)/simple_auth_manager_passwords.json.generated)"
	$(BIN)/airflow standalone

bench: install
	$(BIN)/python -m bench.run_all

bench-full: install
	$(BIN)/python -m bench.run_all --full

# The venv's torch must be a CUDA build (docs/compose.md names the wheel indexes);
# results go to bench/results/gpu (docs/benchmarks.md: "The GPU section").
bench-gpu: install
	$(BIN)/python -m bench.run_all --gpu

# The one prepared device check for a lent GPU (a few minutes): what only a GPU shows (tests/gpu: the device rules,
# the fp16 scaler, NVML, the telemetry sampler on a working GPU), then B1 (the batcher) and B6 (the variants where
# they serve) on CUDA into bench/results/gpu. Needs a CUDA build of torch in the venv.
gpu-check: install
	$(BIN)/python -m pytest -q tests/gpu
	$(BIN)/python -m bench.run_all --gpu --only batching_bench variants_bench

demo-dates: install
	$(BIN)/python -m bench.demo_dates --days 14

lint: install
	$(BIN)/ruff check include dags plugins tests bench

clean:
	rm -rf $(AIRFLOW_HOME) .lake .bench

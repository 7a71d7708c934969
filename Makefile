# rag-loop: `make demo` runs the whole loop on the embedded demo data; `make test` runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# the extras installed with the project: dev (tests) by default; .ci/run adds spark
EXTRAS ?= dev
# a deployment's home holds its database, curation, goldens, reports and Dagster instance
# (rag_loop/home.py): yours is RAG_LOOP_HOME (default .rag-loop/), the demo's is .demo/
export RAG_LOOP_HOME ?= $(CURDIR)/.rag-loop
export DAGSTER_HOME ?= $(RAG_LOOP_HOME)/dagster
DEMO_HOME := $(CURDIR)/.demo
export DEEPEVAL_TELEMETRY_OPT_OUT := 1
export DEEPEVAL_DISABLE_DOTENV := 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

# the demo: its own home, its inputs and drift days, whatever your environment says
DEMO_ENV := RAG_LOOP_HOME="$(DEMO_HOME)" DAGSTER_HOME="$(DEMO_HOME)/dagster" \
	RAG_LOOP_DB="$(DEMO_HOME)/rag_loop.duckdb" RAG_LOOP_CURATION_DIR="$(DEMO_HOME)/curation" \
	RAG_LOOP_GOLDENS_DIR="$(DEMO_HOME)/goldens" RAG_LOOP_REPORTS_DIR="$(DEMO_HOME)/reports" \
	RAG_LOOP_TRACES_DIR="$(CURDIR)/data/demo/traces" RAG_LOOP_KB_DIR="$(CURDIR)/data/demo/kb" \
	RAG_LOOP_DRIFT_START=2026-11-01
# a Dagster instance in a home: deploy/dagster.yaml copied there once (yours may then differ;
# a home from before rag_loop_dagster/ has its run launcher's module name brought up to date)
INSTANCE = $(BIN)/python -c "from rag_loop_dagster.jobs_cli import instance_home; instance_home()"

.PHONY: install demo run release evaluate curate test ui demo-data bench clean

install: $(STAMP)

# compileall: the project's bytecode, as pip compiles every package it installs (an editable
# install is not); where PYTHONDONTWRITEBYTECODE is set, every process would compile it again
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[$(EXTRAS)]'
	$(BIN)/python -c "from rag_loop.vectors.clustering import compile_once; compile_once()"  # Numba cache
	$(BIN)/python -m compileall -q rag_loop rag_loop_dagster tests  # bytecode: see above
	touch $(STAMP)

# on screen, one line per step and the summary; what the runs log (Dagster's events at DEBUG,
# warnings) goes to DEMO_LOG. A step that fails shows the log's end and keeps its exit status.
DEMO_LOG := $(DEMO_HOME)/demo.log
DEMO_FAILED = || { status=$$?; echo "make demo: this step failed (exit $$status); the end of $(DEMO_LOG):"; \
	tail -n 40 "$(DEMO_LOG)"; exit $$status; }

demo: install
	@mkdir -p "$(DEMO_HOME)" && : > "$(DEMO_LOG)"
	@echo "make demo: the whole loop on data/demo/, in $(DEMO_HOME) (Dagster's log: $(DEMO_LOG))"
	@$(DEMO_ENV) sh -c '$(INSTANCE)' >> "$(DEMO_LOG)" 2>&1 $(DEMO_FAILED)
	@$(DEMO_ENV) $(BIN)/rag-loop run rag_loop_job -c data/demo/loop.yaml --log "$(DEMO_LOG)" $(DEMO_FAILED)
	@$(DEMO_ENV) $(BIN)/rag-loop run drift_job --partition-range 2026-11-01...2026-11-14 \
		--log "$(DEMO_LOG)" $(DEMO_FAILED)
	@$(DEMO_ENV) $(BIN)/rag-loop demo curate --round 1 $(DEMO_FAILED)
	@$(DEMO_ENV) $(BIN)/rag-loop run release_goldens -c data/demo/release/round-1.yaml --log "$(DEMO_LOG)" $(DEMO_FAILED)
	@$(DEMO_ENV) $(BIN)/rag-loop demo curate --round 2 $(DEMO_FAILED)
	@$(DEMO_ENV) $(BIN)/rag-loop run release_goldens -c data/demo/release/round-2.yaml --log "$(DEMO_LOG)" $(DEMO_FAILED)
	@$(DEMO_ENV) $(BIN)/rag-loop run coverage_job --partition-range 2026-11-01...2026-11-14 \
		--log "$(DEMO_LOG)" $(DEMO_FAILED)
	@$(DEMO_ENV) $(BIN)/rag-loop run regression_eval_job -c data/demo/eval/baseline.yaml --log "$(DEMO_LOG)" $(DEMO_FAILED)
	@echo "Evaluating the candidate deployment: its hard gate is expected to block it (exit code ignored)."
	@$(DEMO_ENV) $(BIN)/rag-loop run regression_eval_job -c data/demo/eval/candidate.yaml --log "$(DEMO_LOG)" || true
	@$(DEMO_ENV) $(BIN)/rag-loop run dashboard_job --log "$(DEMO_LOG)" $(DEMO_FAILED)
	@echo
	@$(DEMO_ENV) $(BIN)/rag-loop summary $(DEMO_FAILED)
	@echo
	@echo "Dagster's log of these runs: $(DEMO_LOG)"
	@echo "Open the UI with: make ui  (then http://127.0.0.1:3000)"

# your own deployment, in RAG_LOOP_HOME (default .rag-loop/, never the demo's): the loop on
# RAG_LOOP_TRACES_DIR (required; RAG_LOOP_KB_DIR optional), then a release, then an eval
run: install
	@test -n "$$RAG_LOOP_TRACES_DIR" || { echo "make run: set RAG_LOOP_TRACES_DIR to the folder of your trace files"\
		"(RAG_LOOP_HOME, default $(CURDIR)/.rag-loop, holds what the run writes; RAG_LOOP_KB_DIR is optional)"; exit 2; }
	@case "$$RAG_LOOP_HOME" in "$(DEMO_HOME)"*) echo "make run: RAG_LOOP_HOME is the demo's; choose another"; exit 2;; esac
	@$(INSTANCE)
	RAG_LOOP_KB_DIR="$${RAG_LOOP_KB_DIR-}" $(BIN)/rag-loop run rag_loop_job
	$(BIN)/rag-loop summary --next-steps

# release the labelled goldens of RAG_LOOP_HOME (RELEASE_CONFIG: a run config with notes, released_by)
release: install
	@$(INSTANCE)
	$(BIN)/rag-loop run release_goldens $(if $(RELEASE_CONFIG),-c $(RELEASE_CONFIG))
	$(BIN)/rag-loop summary

# evaluate RAG_LOOP_RAG_APP_URL (or the rag_app of EVAL_CONFIG) on the newest release of RAG_LOOP_HOME
evaluate: install
	@$(INSTANCE)
	@# a blocked run fails the job: the summary says why, and make's exit status stays the job's
	$(BIN)/rag-loop run regression_eval_job $(if $(EVAL_CONFIG),-c $(EVAL_CONFIG)); \
		status=$$?; $(BIN)/rag-loop summary; exit $$status

# the curator workspace on http://127.0.0.1:8765 over RAG_LOOP_HOME's queue (the demo's: make curate DEMO=1)
curate: install
	$(if $(DEMO),$(DEMO_ENV)) $(BIN)/rag-loop serve

test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

ui: install
	$(DEMO_ENV) sh -c '$(INSTANCE)'
	$(DEMO_ENV) $(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

demo-data: install
	$(BIN)/rag-loop demo generate --out data/demo

SHARED_DATA ?= $(CURDIR)/../shared/data
bench: install
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/intent_dedup.py --data $(SHARED_DATA)/banking77.csv
	$(BIN)/python bench/intent_dedup.py --data $(SHARED_DATA)/hwu64.csv
	$(BIN)/python bench/selection.py
	$(BIN)/python bench/eval.py
	$(BIN)/python bench/drift.py
	$(BIN)/python bench/online_eval.py
	$(BIN)/python bench/workspace.py
	$(BIN)/python bench/language_id.py --data $(SHARED_DATA)
	$(BIN)/python bench/loop.py --data $(SHARED_DATA) --incremental  # 15-30 min: the loop on 100k and 1M traces
	$(BIN)/python bench/engines.py $(if $(wildcard $(VENV)/lib/python3.11/site-packages/pyspark),,--skip-spark)

clean:  # the demo's home only: your RAG_LOOP_HOME is yours to remove
	rm -rf $(DEMO_HOME)

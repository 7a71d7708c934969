# rag-loop: `make demo` runs the whole loop on the embedded demo data; `make test` runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export DAGSTER_HOME := $(CURDIR)/.dagster_home
export DEEPEVAL_TELEMETRY_OPT_OUT := 1
export DEEPEVAL_DISABLE_DOTENV := 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

DRIFT_ASSETS := group:drift
# the demo's inputs and drift days; `make run` and your own deployment set their own
DEMO_ENV := RAG_LOOP_TRACES_DIR="$${RAG_LOOP_TRACES_DIR-$(CURDIR)/data/demo/traces}" \
	RAG_LOOP_KB_DIR="$${RAG_LOOP_KB_DIR-$(CURDIR)/data/demo/kb}" \
	RAG_LOOP_DRIFT_START="$${RAG_LOOP_DRIFT_START-2026-11-01}"

.PHONY: install demo run test ui demo-data bench clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	$(BIN)/python -c "from rag_loop.vectors.clustering import compile_once; compile_once()"  # Numba cache
	touch $(STAMP)

$(DAGSTER_HOME)/dagster.yaml: deploy/dagster.yaml
	mkdir -p $(DAGSTER_HOME)
	cp deploy/dagster.yaml $@

demo: install $(DAGSTER_HOME)/dagster.yaml
	$(DEMO_ENV) $(BIN)/dagster job execute -f definitions.py -j rag_loop_job -c data/demo/loop.yaml
	$(DEMO_ENV) $(BIN)/dagster asset materialize -f definitions.py --select $(DRIFT_ASSETS) \
		--partition-range 2026-11-01...2026-11-14
	$(BIN)/rag-loop demo curate --round 1
	$(DEMO_ENV) $(BIN)/dagster job execute -f definitions.py -j release_goldens -c data/demo/release/round-1.yaml
	$(BIN)/rag-loop demo curate --round 2
	$(DEMO_ENV) $(BIN)/dagster job execute -f definitions.py -j release_goldens -c data/demo/release/round-2.yaml
	$(DEMO_ENV) $(BIN)/dagster job execute -f definitions.py -j regression_eval_job -c data/demo/eval/baseline.yaml
	@echo "Evaluating the candidate deployment: its hard gate is expected to block it (exit code ignored)."
	-$(DEMO_ENV) $(BIN)/dagster job execute -f definitions.py -j regression_eval_job -c data/demo/eval/candidate.yaml \
		> $(DAGSTER_HOME)/candidate-eval.log 2>&1
	$(BIN)/rag-loop summary
	@echo "Open the UI with: make ui  (then http://127.0.0.1:3000)"

# the loop on your own traces: RAG_LOOP_TRACES_DIR (required), RAG_LOOP_DB, RAG_LOOP_KB_DIR (optional)
run: install $(DAGSTER_HOME)/dagster.yaml
	@test -n "$$RAG_LOOP_TRACES_DIR" || { echo "make run: set RAG_LOOP_TRACES_DIR to the folder of your trace files"\
		"(and RAG_LOOP_DB; RAG_LOOP_KB_DIR is optional)"; exit 2; }
	RAG_LOOP_KB_DIR="$${RAG_LOOP_KB_DIR-}" $(BIN)/dagster job execute -f definitions.py -j rag_loop_job
	$(BIN)/rag-loop summary --next-steps

test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

ui: install $(DAGSTER_HOME)/dagster.yaml
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

clean:
	rm -rf $(DAGSTER_HOME) data/rag_loop.duckdb data/rag_loop.duckdb.wal

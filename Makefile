# One command surface for people and CI. Every target installs what it needs first.
PYTHON ?= python3
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
STAMP := $(VENV)/.synced
RUN := $(UV) run --frozen --no-sync
export UV_PYTHON_DOWNLOADS := never
export UV_PYTHON := $(PYTHON)

.PHONY: up test browser check lint fmt typecheck contracts unit bench bench-spike bench-scan bench-ingest stack-up stack-down clean

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check uv==0.13.9

$(STAMP): $(UV) pyproject.toml uv.lock
	$(UV) sync --frozen --all-groups
	@touch $(STAMP)

## up: start the whole system (embedded PostgreSQL, broker, etcd, all services, demo workload)
up: $(STAMP)
	$(RUN) duetime up --demo

## test: the whole test suite on real PostgreSQL, Kafka-protocol broker and etcd
test: $(STAMP) browser
	$(RUN) pytest -n 2 -m "not e2e"
	$(RUN) pytest -m e2e

## browser: Debian's chromium for the dashboard's browser test (apt-get; silent when installed)
browser:
	@sh tests/install-chromium.sh

## check: lint, format check, strict typing, import contracts, unit tests
check: lint typecheck contracts unit

lint: $(STAMP)
	$(RUN) ruff check .
	$(RUN) ruff format --check .

fmt: $(STAMP)
	$(RUN) ruff format .
	$(RUN) ruff check --fix .

typecheck: $(STAMP)
	$(RUN) mypy

contracts: $(STAMP)
	$(RUN) lint-imports

unit: $(STAMP)
	$(RUN) pytest tests/unit -q -n 2

bench: $(STAMP)
	$(RUN) python -m bench

## bench-spike: the spike benchmark's scenario set (~25 min); bench/results/spike.json, bench/reports/spike.md
bench-spike: $(STAMP)
	$(RUN) python -m bench spike --set

## bench-scan: the due scan with 10k, 1M and 10M pending jobs; bench/results/scan.json, bench/reports/scan.md
## (SIZES=10k,1M for fewer)
SIZES ?= 10k,1M,10M
bench-scan: $(STAMP)
	$(RUN) python -m bench scan --sizes $(SIZES)

## bench-ingest: 100k job definitions by `duetime jobs apply` and through the jobs topic (~3 min);
## bench/results/ingest.json, bench/reports/ingest.md
bench-ingest: $(STAMP)
	$(RUN) python -m bench ingest

stack-up: $(STAMP)
	$(RUN) duetime stack up

stack-down: $(STAMP)
	$(RUN) duetime stack down

clean:
	rm -rf $(VENV) $(TOOLS) .mypy_cache .ruff_cache .pytest_cache

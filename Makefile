PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint format bench up services-stop clean

install: $(STAMP)

# The SDK (sdk/, distribution engram-memory-client) is installed in the same resolve: the
# server depends on it, and it is not taken from an index.
$(STAMP): pyproject.toml sdk/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ./sdk -e '.[dev]'
	touch $(STAMP)

demo: install
	$(BIN)/engram demo

test: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: install
	$(BIN)/python bench/ingest.py

up: install
	$(BIN)/engram up

services-stop: install
	$(BIN)/engram services stop

clean:
	-$(BIN)/engram services stop
	-$(BIN)/python -m app.embedded.postgres purge
	rm -rf $(VENV) .engram

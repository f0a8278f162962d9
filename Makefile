# Everything runs in .venv, built from this project's own files.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test quick lint typecheck bench schemas clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.base: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.base

## make demo: the main job, end to end (writes record.json and keyring.json and verifies them)
demo: $(VENV)/.base
	$(BIN)/hatp demo

## make test: format check, lint, strict typing, and the whole test suite
test: lint typecheck
	$(BIN)/python -m pytest

## make quick: the test suite without tests marked slow
quick: $(VENV)/.dev
	$(BIN)/python -m pytest -m "not slow"

lint: $(VENV)/.dev
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/ruff check src tests benchmarks examples

typecheck: $(VENV)/.dev
	$(BIN)/mypy --strict src

## make bench: the benchmarks, with their same-run baselines
bench: $(VENV)/.dev
	$(BIN)/python benchmarks/evidence.py
	$(BIN)/python benchmarks/coordinator.py
	$(BIN)/python benchmarks/gate.py
	$(BIN)/python benchmarks/mcp.py
	$(BIN)/python benchmarks/writes.py
	$(BIN)/python benchmarks/cli.py

## make schemas: regenerate schemas/ from the pydantic types
schemas: $(VENV)/.dev
	$(BIN)/python -m hatp.model.schemas schemas

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

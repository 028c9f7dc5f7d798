# The project's commands. `make book` and `make test` set everything up from a fresh clone.
# Settings (environment): NORMLIMITS_MODEL, NORMLIMITS_CORPUS, NORMLIMITS_WINDOWS, NORMLIMITS_CACHE,
# NORMLIMITS_THREADS (see README.md).

SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_PIN := torch==2.13.0
INSTALLED := $(VENV)/.installed
MATHJAX := book/_mathjax/mathjax/tex-mml-chtml.js
BUILD_FLAGS := --builder html -W -n --keep-going

.PHONY: help install book test test-fast lab bench standin browser clean distclean

help:
	@echo "make book   - set up the environment if needed and build the book to _build/html"
	@echo "make test   - set up, run the whole test suite (the strict book build and browser test included)"
	@echo "make lab    - JupyterLab on the book; chapters open as notebooks (jupytext)"
	@echo "make bench  - the paper's five experiments at GPT-2 124M size, timed (_build/bench.json)"
	@echo "make clean  - remove build outputs (keeps the environment and the model cache)"

# --- environment ------------------------------------------------------------------------------
# torch first (the CPU wheel), so nothing later pulls a CUDA build; then every pin; then the project.
$(INSTALLED): pyproject.toml requirements.lock
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet $(TORCH_PIN)
	$(PIP) install --quiet -r requirements.lock
	$(PIP) install --quiet --no-deps -e .
	@touch $@

install: $(INSTALLED)

# MathJax 3 served from the site itself (from the pip package django-static-mathjax), so formulas
# render offline.
$(MATHJAX): $(INSTALLED)
	@rm -rf book/_mathjax && mkdir -p book/_mathjax
	$(PY) -c "import mathjax, pathlib, shutil; src = pathlib.Path(mathjax.__file__).parent / 'static/mathjax/es5'; shutil.copytree(src, 'book/_mathjax/mathjax')"
	@touch $@

# Headless Chromium from Debian for the browser test (tests/test_site.py drives it with Playwright;
# no browser download). Root installs it; others are told how, and the browser test then fails
# with the same remedy. A font is installed with it so screenshots show text.
BROWSER_PACKAGES := chromium fonts-dejavu-core
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "Installing Debian's chromium for the browser test (apt-get)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(BROWSER_PACKAGES) >/dev/null; \
	  else echo "The browser test needs Debian's chromium: sudo apt-get install --no-install-recommends $(BROWSER_PACKAGES)" >&2; fi; }
	@command -v chromium >/dev/null 2>&1 && chromium --version 2>/dev/null | grep -i chromium || true

# --- the book ---------------------------------------------------------------------------------
# The execution cache only sees each chapter's source; it is dropped first when the settings, the
# package or the corpus changed (src/normlimits/execution_cache.py).
book: $(INSTALLED) $(MATHJAX)
	$(PY) -m normlimits.execution_cache _build
	$(VENV)/bin/jupyter-book build . $(BUILD_FLAGS)
	@echo "Book: _build/html/index.html   Ledger: _build/ledger.json"

test: $(INSTALLED) $(MATHJAX) browser
	$(PY) -m pytest

test-fast: $(INSTALLED)
	$(PY) -m pytest -m "not book and not browser"

lab: $(INSTALLED)
	$(PY) -m normlimits.lab
	$(VENV)/bin/jupyter lab book

bench: $(INSTALLED)
	$(PY) -m normlimits.bench

standin: $(INSTALLED)
	$(PY) -m normlimits.standin

clean:
	rm -rf _build book/_mathjax .pytest_cache .hypothesis

distclean: clean
	rm -rf $(VENV)

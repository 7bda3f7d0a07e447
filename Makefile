# The commands a new user runs: `make demo` and `make test`; a contributor also runs `make check`.
# Each creates .venv on first use and reinstalls only when pyproject.toml changes: `make demo` and `make test` install
# the test extra (the demo's plotting and the suite's tools), the other targets the dev extra (also lint, types,
# notebooks and the documentation site).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: demo demo-full test test-all check bench docs notebooks recipe clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(DEV_STAMP)

demo: $(STAMP)  ## the test extra includes the plot extra (matplotlib) the demo draws its curves with
	$(PY) -m symnet.demo

test: $(STAMP)  ## the suite a newcomer runs: everything but the campaigns marked slow (under 8 minutes on 2 cores)
	$(PY) -m pytest -n 2 --dist worksteal -m "not slow"

# The whole suite: the campaigns too (fuzzing, kill -9, full disks, notebooks, the docs site and the
# pages' examples, the demo, the multi-process mesh runs), on XLA's optimised code (XLA_FLAGS set, so
# tests/conftest.py keeps it), with four times make test's examples per engine property test.
test-all: $(DEV_STAMP)
	XLA_FLAGS= SYMNET_PROPERTY_EXAMPLES=20 $(PY) -m pytest -n 2 --dist worksteal

# Lint, format, types, the import contract and module sizes; every check runs, and the target fails if any failed.
check: $(DEV_STAMP)
	@status=0; \
	echo "== ruff check"; $(PY) -m ruff check . || status=1; \
	echo "== ruff format --check"; $(PY) -m ruff format --check . || status=1; \
	echo "== mypy"; $(PY) -m mypy || status=1; \
	echo "== import contract"; $(PY) tools/check_imports.py || status=1; \
	echo "== module sizes"; $(PY) tools/check_sizes.py || status=1; \
	exit $$status

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

RECIPE_DIR ?= recipe-digits
RECIPE_TASK ?= digits
RECIPE_VOICES ?= flite
recipe: $(STAMP)  ## a recognizer end to end, RECIPE_TASK=digits|commands, RECIPE_VOICES=flite|many (needs flite, many espeak-ng too; KALDI_BIN=dir/bin adds Kaldi's runs)
	cd benchmarks && ../$(PY) digits_recipe.py --folder $(abspath $(RECIPE_DIR)) --task $(RECIPE_TASK) --voices $(RECIPE_VOICES) --chain --ctc --compile-cache $(abspath $(RECIPE_DIR))/xla-cache $(if $(KALDI_BIN),--kaldi-bin $(abspath $(KALDI_BIN)))

docs: $(DEV_STAMP)  ## the documentation site, into site/ (strict: a broken link or reference fails)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

notebooks: $(DEV_STAMP)  ## run every notebook in notebooks/ (outputs are not written back)
	$(PY) -m pytest -n 2 -m slow tests/docs/test_notebooks.py

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache

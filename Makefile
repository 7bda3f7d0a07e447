# The two commands a new user runs: `make demo` and `make test`.
# Both create .venv on first use and reinstall only when pyproject.toml changes.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench docs notebooks clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m symnet.demo

test: $(STAMP)
	$(PY) -m pytest -n 2

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

docs: $(STAMP)  ## the documentation site, into site/ (strict: a broken link or reference fails)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

notebooks: $(STAMP)  ## run every notebook in notebooks/ (outputs are not written back)
	$(PY) -m pytest -n 2 tests/test_notebooks.py

clean:
	rm -rf $(VENV) build *.egg-info

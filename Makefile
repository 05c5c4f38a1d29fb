# Quickstart: `make run` (the main job on the local inventory), `make test` (the test suite).
# Each installs what it needs into .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run test install data

install: $(VENV)/.installed

# torch first, pinned: on a CPU-only machine `pip install torch==2.13.0` takes its CPU build.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $@

data: data/digits/val/.complete

data/digits/val/.complete: $(VENV)/.installed
	$(PY) -m flagperf_ansible data prepare digits data/digits

run: install data
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m flagperf_ansible run -i inventories/local

test: install
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q

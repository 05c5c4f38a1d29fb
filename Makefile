# Quickstart: `make run` (the main job on the local inventory), `make test` (the test suite).
# Each installs what it needs into .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run test install data

install: $(VENV)/.installed

# The controller package with the benchmark side (`local`: torch 2.14.1 and torchvision 0.29.1,
# the CUDA build, which runs on CPU-only machines too; about 2.8 GB of wheels, 5.5 GB installed).
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[local,test]'
	touch $@

data: data/digits/val/.complete data/digits/BiT-R14x1-random.npz

# The digits in the ImageNet layout and the bigtransfer cpu profile's checkpoint (one command).
data/digits/val/.complete data/digits/BiT-R14x1-random.npz &: $(VENV)/.installed
	$(PY) -m flagperf_ansible data prepare digits data/digits

run: install data
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m flagperf_ansible run -i inventories/local

test: install data
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q

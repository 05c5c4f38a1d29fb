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

COCO := data/coco2017/annotations/instances_val2017.json data/coco2017/checkpoint/resnet10-random.pth

data: data/digits/val/.complete data/digits/BiT-R14x1-random.npz $(COCO)

# The digits in the ImageNet layout and the bigtransfer cpu profile's checkpoint (one command).
data/digits/val/.complete data/digits/BiT-R14x1-random.npz &: $(VENV)/.installed
	$(PY) -m flagperf_ansible data prepare digits data/digits

# The coins in the COCO 2017 layout and the detection cpu profiles' backbone checkpoint.
$(COCO) &: $(VENV)/.installed
	$(PY) -m flagperf_ansible data prepare coco2017 data/coco2017

run: install data
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m flagperf_ansible run -i inventories/local

test: install data
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q

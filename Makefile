# make train: set up .venv and run the main job.  make test: set up and run the test suite (what CI runs).
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_VERSION ?= 2.13.0

.PHONY: setup browser apt-lists lint train test test-fast test-slow test-all test-oldest test-newest mutants bench clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned: with it present, the project's torch>= requirement installs nothing more
	$(PY) -m pip install --quiet torch==$(TORCH_VERSION)
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip check
	# mup 1.0.0, the reference tests/nn/test_mup.py checks lab's µP rules against, without its declared dependencies:
	# `import mup` needs torch and pyyaml only, while its metadata asks for torchvision (whose PyPI build needs a newer
	# torch, or breaks transformers' imports on the CPU torch: "operator torchvision::nms does not exist") and the
	# plotting stack of its coordinate-check helper. So not in the dev extra, and after `pip check`.
	$(PY) -m pip install --quiet --no-deps mup==1.0.0
	touch $@

setup: $(VENV)/.installed

# Headless Chromium (Debian package) renders lab.report's HTML in tests/report/test_report.py; without it that
# test is skipped with the reason. Installed when missing and apt-get is available (root, or sudo).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { command -v apt-get >/dev/null 2>&1 && $(SUDO) apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends chromium >/dev/null; } || \
	  echo "chromium could not be installed: the report rendering test will be skipped"

# The translator's corpus is a Debian package: `apt-get download` needs the package lists (fresh machines may lack them).
apt-lists:
	@ls /var/lib/apt/lists/*_Packages* >/dev/null 2>&1 || \
	  { command -v apt-get >/dev/null 2>&1 && $(SUDO) apt-get update -qq; } || \
	  echo "no apt package lists: the translator's data will fail to fetch, with the command that fixes it"

train: setup
	$(PY) -m lab.train +experiment=gpt_small

# ruff and the import-linter contracts (pyproject.toml): a violation names the file and the offending import
lint: setup
	$(VENV)/bin/ruff check lab tests benchmarks experiments hydra_plugins .ci
	$(VENV)/bin/lint-imports --no-cache

# Two pytest-xdist workers (CI's machine has 2 cores), a whole test module at a time so a module's shared
# training runs are built once; the longest modules first, in tests/conftest.py's order (no reordering by
# test count). PYTEST_WORKERS=0 runs everything in one process.
PYTEST_WORKERS ?= 2
XDIST := -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder
PYTEST := $(PY) -m pytest -q $(XDIST) --durations=15

# the whole suite, slow (multi-process, sweeps, resume) tests included: what CI runs
test: setup browser apt-lists lint
	$(PYTEST)

# quick local iteration: everything but the tests marked slow
test-fast: setup browser apt-lists
	$(PYTEST) -m 'not slow'

test-slow: setup browser apt-lists
	$(PYTEST) -m slow

# one-line bugs applied to a temporary copy of the repo; each must be killed by the tests that guard it
# (tests/mutants.py; not part of `make test`)
mutants: setup
	$(PY) tests/mutants.py

# The version ranges in pyproject.toml, tested at both ends, each in its own venv (torch stays $(TORCH_VERSION)).
# test-oldest: every direct dependency at its lower bound (.ci/lowest.py writes the constraints), whole suite.
# test-newest: every dependency upgraded to its newest release, a quick subset: an upstream release that
# breaks lab shows at once (CI runs it after `make test`).
OLDEST_VENV ?= .venv-oldest
NEWEST_VENV ?= .venv-newest
QUICK_TESTS ?= tests/conf/test_configs.py tests/runtime/sweeps/test_sweeps.py tests/runtime/sweeps/test_sweeps_jobs.py \
	tests/runtime/sweeps/test_sweeps_optuna.py tests/entry/test_train_cli.py

$(OLDEST_VENV)/.installed: pyproject.toml .ci/lowest.py
	python3 -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(OLDEST_VENV)/bin/python -m pip install --quiet torch==$(TORCH_VERSION)
	$(OLDEST_VENV)/bin/python .ci/lowest.py > $(OLDEST_VENV)/lowest.txt
	$(OLDEST_VENV)/bin/python -m pip install --quiet -c $(OLDEST_VENV)/lowest.txt -e '.[all]' pytest pytest-xdist
	$(OLDEST_VENV)/bin/python -m pip check
	touch $@

test-oldest: $(OLDEST_VENV)/.installed browser apt-lists
	$(OLDEST_VENV)/bin/python -m pip list --format=freeze | grep -iE '^(lightning|hydra-core|omegaconf|wandb|torchmetrics|tokenizers|numpy|matplotlib|optuna|sqlalchemy|torch)=='
	$(OLDEST_VENV)/bin/python -m pytest -q $(XDIST)

test-newest:
	python3 -m venv $(NEWEST_VENV)
	$(NEWEST_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(NEWEST_VENV)/bin/python -m pip install --quiet torch==$(TORCH_VERSION)
	echo "torch==$(TORCH_VERSION)" > $(NEWEST_VENV)/torch.txt
	$(NEWEST_VENV)/bin/python -m pip install --quiet --upgrade --upgrade-strategy eager -c $(NEWEST_VENV)/torch.txt -e '.[dev]'
	$(NEWEST_VENV)/bin/python -m pip check
	$(NEWEST_VENV)/bin/python -m pip list --format=freeze | grep -iE '^(lightning|hydra-core|omegaconf|wandb|torchmetrics|tokenizers|numpy|matplotlib|optuna|sqlalchemy|torch)=='
	$(NEWEST_VENV)/bin/python -m pytest -q $(QUICK_TESTS)

bench: setup
	$(PY) benchmarks/train_overhead.py
	$(PY) benchmarks/generation.py
	$(PY) benchmarks/report.py
	$(PY) benchmarks/scale_out.py

clean:
	rm -rf $(VENV) $(OLDEST_VENV) $(NEWEST_VENV) runs

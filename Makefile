# make train: set up .venv and run the main job.  make test: set up and run the test suite (what CI runs).
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_VERSION ?= 2.13.0

.PHONY: setup train test test-slow test-all bench clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned: with it present, the project's torch>= requirement installs nothing more
	$(PY) -m pip install --quiet torch==$(TORCH_VERSION)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

train: setup
	$(PY) -m lab.train +experiment=gpt_small

test: setup
	$(PY) -m pytest -q

test-slow: setup
	$(PY) -m pytest -q -m slow

test-all: setup
	$(PY) -m pytest -q -m ''

bench: setup
	$(PY) benchmarks/train_overhead.py
	$(PY) benchmarks/generation.py

clean:
	rm -rf $(VENV) runs

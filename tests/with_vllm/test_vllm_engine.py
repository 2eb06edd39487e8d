"""The vLLM rollout engine (`actor_rollout_ref.rollout.name: vllm`) on this CPU, against the hf engine:

(a) greedy tokens equal to the hf engine's on the same model, for several families (random models of
    `rft.models.families`, head_dim 32, which vLLM's CPU attention takes), and the sampled tokens' log-probs equal
    to the trainer's recomputation within a measured tolerance;
(b) weights after an update (full fine-tuning and LoRA) make the engine's greedy tokens the updated model's;
(c) sampling: n samples per prompt, top-k, EOS, and seeds from the caller's generator that repeat a run;
(d) a GRPO run from the CLI on vLLM with verl's rollout defaults, logging the engine / trainer log-prob difference;
    mode both with the explorer as a second process whose vLLM engine takes the trainer's weights;
(e) the seeds' own configs on vLLM: verl's ppo_trainer.yaml and Trinity-RFT's example (engine_type vllm).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rft.models.families import init_family_model
from rft.models.load import load_causal_lm, load_tokenizer
from rft.models.tiny import init_model
from rft.rollout import HFRollout, SamplingParams
from rft.rollout.vllm_engine import VLLMOptions, VLLMRollout
from rft.workers.policy import forward_logprobs

CPU = torch.device("cpu")
FAMILIES = ("qwen2", "llama", "gpt2", "qwen3", "mistral")
LOGPROB_TOL = 1e-4
"""|vLLM's log-prob - the trainer's| on the sampled tokens, fp32 on CPU: vLLM's own kernels (its CPU attention,
fused QKV and gate/up projections, oneDNN matmuls) sum in another order than transformers' (measured below 2e-5 on
these models; a wrong temperature or an off-by-one position moves them by 0.1 and more)."""


def _prompts(lengths=(3, 14, 9, 11), pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    width = max(lengths)
    ids = torch.full((len(lengths), width), pad)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, width - n:] = torch.randint(0, 256, (n,), generator=gen)
        mask[i, width - n:] = 1
    return ids, mask


def _engine(path: Path, model, tok, **options) -> VLLMRollout:
    return VLLMRollout(model, str(path), [tok.eos_token_id], tok.pad_token_id,
                       VLLMOptions(max_model_len=128, kv_cache_tokens=4096, **options))


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("vllm")
    for family in FAMILIES:
        init_family_model(family, root / family)
    init_model("tiny", root / "tiny", seed=0)
    return root


def _trainer_logprobs(model, ids, mask, response, response_mask, temperature: float) -> torch.Tensor:
    from rft.batch import Batch

    batch = Batch(prompt_ids=ids, prompt_mask=mask, response_ids=response, response_mask=response_mask,
                  group=torch.arange(len(ids)))
    with torch.no_grad():
        logprobs, _ = forward_logprobs(model, batch, temperature)
    return logprobs * response_mask


# ------------------------------------------------------------------------------------------- (a) parity
@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_tokens_equal_the_hf_engines_and_log_probs_the_trainers(root, family):
    tok = load_tokenizer(str(root / family))
    model = load_causal_lm(str(root / family), torch.float32, CPU).eval()
    ids, mask = _prompts(pad=tok.pad_token_id)
    greedy = SamplingParams(n=1, do_sample=False, temperature=0.0, max_tokens=16, ignore_eos=True)
    engine = _engine(root / family, model, tok)
    engine.update_weights(None, 0)
    ours, theirs = engine.generate(ids, mask, greedy), HFRollout(model, [tok.eos_token_id],
                                                                  tok.pad_token_id).generate(ids, mask, greedy)
    assert torch.equal(ours.response_ids, theirs.response_ids)
    assert ours.response_mask.all()
    # sampled at temperature 0.7: the log-probs are those of softmax(logits / 0.7), as the trainer recomputes them
    sampled = engine.generate(ids, mask, SamplingParams(n=2, temperature=0.7, max_tokens=12, ignore_eos=True),
                              torch.Generator().manual_seed(0))
    rows = torch.arange(len(ids)).repeat_interleave(2)
    recomputed = _trainer_logprobs(model, ids[rows], mask[rows], sampled.response_ids, sampled.response_mask, 0.7)
    diff = float((recomputed - sampled.logprobs).abs().max())
    print(f"{family}: max |vLLM - trainer| log-prob {diff:.2e}")
    assert diff <= LOGPROB_TOL
    assert float(sampled.logprobs.mean()) < -1e-3  # sampled, not all greedy choices of probability 1


# ------------------------------------------------------------------------------------------- (b) weights
def test_updated_weights_make_the_engine_generate_as_the_updated_model(root):
    """Full fine-tuning (the trainer's model itself, None) and a LoRA model (the adapter merged on the way): after
    update_weights the engine's greedy tokens are the hf engine's on the changed model, and they changed."""
    from omegaconf import OmegaConf

    from rft.models.load import apply_lora

    tok = load_tokenizer(str(root / "tiny"))
    model = load_causal_lm(str(root / "tiny"), torch.float32, CPU).eval()
    ids, mask = _prompts(pad=tok.pad_token_id)
    greedy = SamplingParams(n=1, do_sample=False, temperature=0.0, max_tokens=10, ignore_eos=True)
    engine = _engine(root / "tiny", model, tok)
    before = engine.generate(ids, mask, greedy).response_ids
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5 * p.std() * torch.randn(p.shape, generator=gen))
    engine.update_weights(None, 3)
    after = engine.generate(ids, mask, greedy).response_ids
    assert engine.version == 3 and not torch.equal(before, after)
    assert torch.equal(after, HFRollout(model, [tok.eos_token_id], tok.pad_token_id).generate(ids, mask,
                                                                                               greedy).response_ids)

    lora = apply_lora(load_causal_lm(str(root / "tiny"), torch.float32, CPU),
                      OmegaConf.create({"lora_rank": 4, "lora_alpha": 8, "target_modules": "all-linear",
                                        "exclude_modules": None, "use_dora": False}), task_type="CAUSAL_LM").eval()
    engine = _engine(root / "tiny", lora, tok)
    trainable = {n: p for n, p in lora.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    with torch.no_grad():  # an adapter that changes the model: B away from 0
        update = {n: p + 0.3 * torch.randn(p.shape, generator=gen) for n, p in trainable.items()}
    engine.update_weights(update, 1)  # the explorer's way: names of the LoRA model's parameters
    assert all(torch.equal(trainable[n], update[n]) for n in update)
    merged = HFRollout(lora, [tok.eos_token_id], tok.pad_token_id).generate(ids, mask, greedy).response_ids
    assert not torch.equal(merged, before)
    assert torch.equal(engine.generate(ids, mask, greedy).response_ids, merged)


# ------------------------------------------------------------------------------------------- (c) sampling
def test_sampling_n_per_prompt_top_k_eos_and_seeds(root):
    tok = load_tokenizer(str(root / "tiny"))
    model = load_causal_lm(str(root / "tiny"), torch.float32, CPU).eval()
    ids, mask = _prompts(pad=tok.pad_token_id)
    engine = _engine(root / "tiny", model, tok)
    params = SamplingParams(n=3, temperature=1.0, top_k=5, max_tokens=20)
    first = engine.generate(ids, mask, params, torch.Generator().manual_seed(7))
    again = engine.generate(ids, mask, params, torch.Generator().manual_seed(7))
    other = engine.generate(ids, mask, params, torch.Generator().manual_seed(8))
    assert first.response_ids.shape[0] == 12 and torch.equal(first.response_ids, again.response_ids)
    assert not torch.equal(first.response_ids, other.response_ids)
    # top-5: every sampled token is among the 5 likeliest; its log-prob is of the renormalised top 5
    valid = first.response_mask.bool()
    assert torch.isfinite(first.logprobs[valid]).all() and (first.logprobs[valid] <= 0).all()
    rows = torch.arange(len(ids)).repeat_interleave(3)
    with torch.no_grad():
        full = torch.cat([ids[rows], first.response_ids], 1)
        full_mask = torch.cat([mask[rows], first.response_mask], 1)
        logits = model(input_ids=full, attention_mask=full_mask,
                       position_ids=(full_mask.cumsum(-1) - 1).clamp(min=0)).logits[:, ids.shape[1] - 1:-1]
    rank = (logits > logits.gather(-1, first.response_ids[..., None])).sum(-1)
    assert int(rank[valid].max()) < 5
    # the mask ends at the first EOS (included), padding after it
    eos = tok.eos_token_id
    for row, m in zip(first.response_ids, first.response_mask):
        n = int(m.sum())
        assert (row[n:] == tok.pad_token_id).all()
        if n < first.response_ids.shape[1]:
            assert int(row[n - 1]) == eos
    # rows come back in the prompts' order
    greedy = SamplingParams(n=1, do_sample=False, temperature=0.0, max_tokens=4, ignore_eos=True)
    single = engine.generate(ids, mask, greedy).response_ids
    assert torch.equal(engine.generate(ids[[2, 0]], mask[[2, 0]], greedy).response_ids, single[[2, 0]])


# ------------------------------------------------------------------------------------------- (d) a run
def _grpo_args(root: Path, tmp_path: Path, *extra: str) -> tuple[list[str], Path]:
    """The command line of `rft train` of GRPO on vLLM (4 one-digit additions x 4 samples a step, the shaped reward
    of rl_helpers, whose digit count makes a random model's groups differ; lr 1e-3) with `extra` overrides, and its
    run folder."""
    from rl_helpers import SHAPED_REWARD

    from rft.tasks import write_arithmetic

    write_arithmetic(tmp_path / "data", n_train=32, n_val=8, seed=0, max_digits=1)
    (tmp_path / "reward.py").write_text(SHAPED_REWARD)
    out = tmp_path / "run"
    return [sys.executable, "-m", "rft", "train",
            f"actor_rollout_ref.model.path={root / 'tiny'}", f"data.train_files={tmp_path / 'data' / 'train.parquet'}",
            "data.train_batch_size=4", "data.max_prompt_length=32", "data.max_response_length=8",
            "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.rollout.name=vllm", "algorithm.adv_estimator=grpo",
            f"custom_reward_function.path={tmp_path / 'reward.py'}", "actor_rollout_ref.actor.optim.lr=1e-3",
            "actor_rollout_ref.actor.optim.weight_decay=0", f"trainer.default_local_dir={out}", *extra], out


def _grpo_on_vllm(root: Path, tmp_path: Path, *extra: str) -> Path:
    """`rft train` of `_grpo_args`; asserts exit 0, returns the run folder."""
    args, out = _grpo_args(root, tmp_path, *extra)
    proc = subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def test_grpo_on_vllm_with_verls_rollout_defaults_trains_and_logs_the_log_prob_difference(root, tmp_path):
    """verl's rollout section as ppo_trainer.yaml ships it (name vllm, tensor_model_parallel_size 2,
    load_format dummy_dtensor, gpu_memory_utilization 0.5, free_cache_engine true): two GRPO steps on this CPU, the
    engine / trainer log-prob difference logged each step, every trainable parameter moved."""
    from safetensors.torch import load_file

    out = _grpo_on_vllm(root, tmp_path, f"data.val_files={tmp_path / 'data' / 'val.parquet'}",
                        "actor_rollout_ref.actor.ppo_epochs=2", "trainer.total_training_steps=2",
                        "trainer.test_freq=2", "trainer.logger=[console]")
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2]
    for x in lines:
        assert x["training/rollout_probs_diff_valid"] == 1
        assert 0 <= x["training/rollout_probs_diff_max"] <= LOGPROB_TOL * 10
        assert math.isfinite(x["critic/score/mean"])
    assert "val-core/" in " ".join(lines[-1])
    before, after = load_file(root / "tiny" / "model.safetensors"), load_file(out / "model" / "model.safetensors")
    assert [k for k in before if torch.equal(before[k], after[k])] == []


def test_grpo_on_vllm_with_a_served_judge_and_the_rule_logs_each_part(root, tmp_path):
    """Issue 65: the policy sampled by vLLM, the reward a judge served by `rft serve` on 127.0.0.1 (the tiny model,
    rubric-prompted, scale scoring) at weight 0.5 plus the arithmetic rule at 1.0: 4 steps, each logging the
    judge's part, the rule's, the share parsed and the share cut, the score their weighted sum."""
    serve = subprocess.Popen([sys.executable, "-m", "rft", "serve", str(root / "tiny"), "--name", "judge"],
                             stdout=subprocess.PIPE, text=True)
    try:
        url = None
        for _ in range(600):  # its one line names the URL once the model is loaded
            line = serve.stdout.readline()
            if "/v1," in line or not line:
                url = line.split(" on ", 1)[1].split(",", 1)[0] if line else None
                break
        assert url, "rft serve did not start"
        template = ("Rubric: 10 for the right number. Question: {question} Reference: {reference} "
                    "Answer: {response} Score:")
        out = _grpo_on_vllm(root, tmp_path, "custom_reward_function.path=null",
                            "custom_reward_function.reward_fn_type=llm_judge",
                            f"custom_reward_function.reward_kwargs={{base_url: '{url}', timeout: 120, "
                            f"max_tokens: 4, scoring: scale, judge_weight: 0.5, rule_weight: 1.0, "
                            f"template: '{template}'}}", "trainer.total_training_steps=4", "trainer.logger=[]")
    finally:
        serve.terminate()
        serve.wait(60)
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2, 3, 4]
    for x in lines:
        judge, rule = x["reward_extra/judge_score/mean"], x["reward_extra/rule_score/mean"]
        assert x["reward_extra/judge_timeout/mean"] == 0.0 and 0.0 <= x["reward_extra/judge_parsed/mean"] <= 1.0
        assert x["critic/score/mean"] == pytest.approx(0.5 * judge + 1.0 * rule, abs=1e-6)


def test_a_vllm_step_with_one_update_a_batch_runs_no_old_log_prob_pass_and_logs_the_difference(root, tmp_path):
    """One optimizer step per batch (ppo_epochs 1, one mini-batch): no old-log-prob pass (the loss does not need
    it), and the engine / trainer difference verl logs comes from the update's own passes."""
    out = _grpo_on_vllm(root, tmp_path, "trainer.total_training_steps=2", "trainer.logger=[console]",
                        "actor_rollout_ref.rollout.dtype=float32",
                        "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32")
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2]
    for x in lines:
        assert "timing_s/old_log_prob" not in x
        assert x["training/rollout_probs_diff_valid"] == 1
        assert 0 <= x["training/rollout_probs_diff_max"] <= LOGPROB_TOL * 10


@pytest.mark.slow
def test_mode_both_with_the_explorer_process_on_vllm_takes_the_trainers_weights(root, tmp_path):
    """Mode both with the explorer as a second process (sync_interval 2, nccl: explore steps 1 and 2 generate with
    the starting weights, step 3 with trainer step 2's, broadcast over the process group into the explorer's vLLM
    engine). Steps 1 and 3 are on policy, so the engine's log-probs are the trainer's within the parity tolerance,
    which they are not unless the broadcast weights reached vLLM; step 2 generated one update ago and differs."""
    out = _grpo_on_vllm(root, tmp_path, "synchronizer.sync_interval=2", "synchronizer.sync_method=nccl",
                        "trainer.total_training_steps=3", "trainer.val_before_train=false", "trainer.logger=[]")
    explorer = [json.loads(x) for x in (out / "explorer" / "metrics.jsonl").read_text().splitlines()]
    trainer = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["rollout/model_version"] for x in explorer] == [0, 0, 2]
    assert [x["rollout/staleness/max"] for x in trainer] == [0, 1, 0]
    diff = [x["training/rollout_probs_diff_max"] for x in trainer]
    assert diff[0] <= LOGPROB_TOL * 10 and diff[2] <= LOGPROB_TOL * 10, diff  # the weights reached vLLM
    assert diff[1] > LOGPROB_TOL * 10, diff  # and the measure sees a policy one update away


@pytest.mark.slow
def test_explore_on_vllm_and_train_as_two_commands_carry_weights_through_checkpoint_files(root, tmp_path):
    """`trainer.mode: explore` (the vLLM engine) and `trainer.mode: train` as two commands on one SQLite buffer, as
    on two machines: the trainer's weights reach the explorer's engine as sync files (sync_method checkpoint,
    sync_interval 2), so explore steps 1 and 3 are on policy (the log-prob difference within the parity tolerance)
    and step 2 is one update behind."""
    args, out = _grpo_args(root, tmp_path, "synchronizer.sync_interval=2", "synchronizer.sync_method=checkpoint",
                           "trainer.total_training_steps=3", "trainer.val_before_train=false", "trainer.logger=[]")
    procs = [subprocess.Popen([*args, f"trainer.mode={mode}"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for mode in ("train", "explore")]
    for proc in procs:
        _, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-3000:]
    explorer = [json.loads(x) for x in (out / "explorer" / "metrics.jsonl").read_text().splitlines()]
    trainer = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["rollout/model_version"] for x in explorer] == [0, 0, 2]
    diff = [x["training/rollout_probs_diff_max"] for x in trainer]
    assert diff[0] <= LOGPROB_TOL * 10 and diff[2] <= LOGPROB_TOL * 10, diff  # the sync file reached vLLM
    assert diff[1] > LOGPROB_TOL * 10, diff


@pytest.mark.slow
def test_two_trainer_processes_each_generate_on_their_own_vllm_engine_with_the_gathered_weights(root, tmp_path):
    """trainer.n_gpus_per_node=2: two FSDP processes, a vLLM engine in each (vLLM's external launcher, as verl's
    hybrid engine), each generating its rank's half of the prompts. Every step is on policy, so the log-prob
    difference, gathered over both ranks' rows, stays within the parity tolerance only if each rank's engine took
    the whole policy gathered from the shards after every update (one update at this learning rate moves it past
    that, as the mode-both test shows); the final model is the trained one."""
    from safetensors.torch import load_file

    out = _grpo_on_vllm(root, tmp_path, "trainer.n_gpus_per_node=2", "trainer.total_training_steps=3",
                        "trainer.val_before_train=false", "trainer.logger=[]")
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2, 3]
    diff = [x["training/rollout_probs_diff_max"] for x in lines]
    assert all(0 <= d <= LOGPROB_TOL * 10 for d in diff), diff
    before, after = load_file(root / "tiny" / "model.safetensors"), load_file(out / "model" / "model.safetensors")
    assert [k for k in before if torch.equal(before[k], after[k])] == []


@pytest.mark.slow
def test_a_run_on_vllm_killed_after_a_checkpoint_resumes_exactly(root, tmp_path):
    """SIGKILL once step 2's checkpoint is written, then the same command: the engine reloads the checkpoint's
    weights and the explorer's generator comes back, so vLLM's per-request seeds, the samples, the rewards, the
    losses and the final weights are those of the run that was never stopped."""
    import signal
    import time

    from safetensors.torch import load_file

    extra = ("trainer.save_freq=1", "trainer.total_training_steps=4", "trainer.val_before_train=false",
             "trainer.logger=[]")
    whole = _grpo_on_vllm(root, tmp_path / "whole", *extra)
    args, out = _grpo_args(root, tmp_path / "killed", *extra)
    proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 600
    while not (out / "checkpoints" / "global_step_2").is_dir():
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read()[-3000:] if proc.poll() else ""
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert not (out / "model").exists()
    again = subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]

    def record(folder: Path) -> list[dict]:
        lines = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in x.items() if not k.startswith(("timing_s/", "perf/"))} for x in lines]

    assert [x["step"] for x in record(out)] == [1, 2, 3, 4]
    assert record(out) == record(whole)
    final, reference = load_file(out / "model" / "model.safetensors"), load_file(whole / "model" / "model.safetensors")
    assert all(torch.equal(final[k], reference[k]) for k in reference)


# ------------------------------------------------------------------------------------------- (e) the seeds
def _eos_model(source: Path, out: Path) -> Path:
    """A copy of the random (untied) Llama at `source` whose likeliest next token is EOS everywhere (p 0.7 to
    0.99): embedding dimension 0 is 1 for every token and no layer writes to it, and only the EOS row of the head
    reads it."""
    import shutil

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(source)
    assert not model.config.tie_word_embeddings
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 1.0
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0] = 0
            layer.mlp.down_proj.weight[0] = 0
        model.lm_head.weight[:, 0] = 0
        model.lm_head.weight[model.config.eos_token_id, 0] = 50.0
    model.save_pretrained(out)
    for f in source.iterdir():
        if "token" in f.name or f.name == "vocab.json" or f.name == "merges.txt":
            shutil.copy(f, out / f.name)
    return out


@pytest.mark.slow
def test_verls_ppo_trainer_yaml_runs_two_steps_on_vllm_unedited(root, tmp_path):
    """The seed's ppo_trainer.yaml (rollout.name vllm and every rollout default; gae with a critic, 1024 prompts a
    step, up to 512 + 512 tokens) for two steps, edited only where it names another machine: the model and data
    paths, the one process of this machine (its n_gpus_per_node 8 names GPUs that are not here), the run's length,
    and an offline W&B (its logger list names wandb). The model is a random Llama that ends most responses at once
    (`_eos_model`): with a random model's 512-token responses the two steps take some 20 minutes of this CPU."""
    from spec_configs import verl_ppo_trainer_yaml

    from rft.tasks import write_arithmetic

    write_arithmetic(tmp_path / "data", n_train=1024, n_val=4, seed=0, max_digits=2)
    (tmp_path / "ppo_trainer.yaml").write_text(verl_ppo_trainer_yaml())
    model = _eos_model(root / "llama", tmp_path / "model")
    out = tmp_path / "run"
    args = [sys.executable, "-m", "rft", "train", str(tmp_path / "ppo_trainer.yaml"),
            f"actor_rollout_ref.model.path={model}",
            f"data.train_files={tmp_path / 'data' / 'train.parquet'}",
            f"data.val_files={tmp_path / 'data' / 'val.parquet'}", "trainer.n_gpus_per_node=1",
            "trainer.total_training_steps=2", f"trainer.default_local_dir={out}"]
    env = {**__import__("os").environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path)}
    proc = subprocess.run(args, capture_output=True, text=True, timeout=1500, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2]
    assert all("critic/vf_loss" in x and x["training/rollout_probs_diff_valid"] == 1 for x in lines)
    assert (out / "model" / "model.safetensors").is_file()


def test_an_argument_vllm_refuses_is_one_error_naming_the_keys(root):
    from rft.errors import RftError

    tok = load_tokenizer(str(root / "tiny"))
    model = load_causal_lm(str(root / "tiny"), torch.float32, CPU)
    with pytest.raises(RftError, match=r"the vLLM engine refused its arguments \(.*no_such_argument.*engine_kwargs"):
        _engine(root / "tiny", model, tok, engine_kwargs={"no_such_argument": 1})


def test_the_vllm_example_validates_with_real_paths(root, tmp_path):
    from rft.tasks import write_arithmetic
    from rft.trainer.configure import load_config

    data = write_arithmetic(tmp_path / "d", n_train=16, n_val=4, seed=0)
    example = Path(__file__).resolve().parents[2] / "examples" / "arithmetic_grpo_vllm.yaml"
    cfg = load_config(example, [f"actor_rollout_ref.model.path={root / 'tiny'}", f"data.train_files={data['train']}",
                                f"data.val_files={data['val']}"], validate_paths=True)
    assert cfg.actor_rollout_ref.rollout.name == "vllm" and cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 1


@pytest.mark.slow
def test_trinitys_example_config_runs_two_steps_on_vllm(root, tmp_path, monkeypatch):
    """Trinity-RFT's example (the page's global, algorithm, model, cluster, buffer, taskset, trainer, trainer_config
    and stages blocks, with the edits tests/test_seed_configs.py lists) and its explorer block (engine_type vllm),
    for two steps of each stage: its SFT warm-up, then GRPO through its math_workflow with countdown_reward, 32 tasks
    x 8 rollouts a step on vLLM, up to 16384 response tokens. Edited only where it names another machine: the
    model and data paths (the environment variables it reads; its auxiliary model, a hub name, is the test's model
    too) and the run's length. The model is `_eos_model`'s Llama given the 32768 positions the example's
    max_model_len (20480) asks of the model it names."""
    import yaml
    from spec_configs import SPEC, md_yaml_blocks, merge
    from test_seed_configs import edited_trinity_example
    from transformers import AutoConfig

    model = _eos_model(root / "llama", tmp_path / "model")
    config = AutoConfig.from_pretrained(model)
    config.max_position_embeddings = 32768
    config.save_pretrained(model)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    for split, n in (("train", 64), ("test", 4)):
        with (tasks / f"{split}.jsonl").open("w") as f:
            for i in range(n):
                numbers = [i % 7 + 1, i % 5 + 2, 3]
                f.write(json.dumps({"question": f"Using {numbers}, make {sum(numbers)}.",
                                    "answer": json.dumps({"target": sum(numbers), "numbers": numbers})}) + "\n")
    (tmp_path / "sft.jsonl").write_text("".join(json.dumps({"prompt": f"{i}+1=", "response": str(i + 1)}) + "\n"
                                                for i in range(64)))  # its SFT batch: 64 rows
    for name, value in (("MODEL_PATH", model), ("TRINITY_TASKSET_PATH", tasks), ("TRINITY_DATASET_PATH",
                        tmp_path / "sft.jsonl"), ("TRINITY_CHECKPOINT_ROOT_DIR", tmp_path / "checkpoints")):
        monkeypatch.setenv(name, str(value))
    explorer = next(b for b in md_yaml_blocks(SPEC / "trinity_config_reference.md") if list(b) == ["explorer"])
    assert explorer["explorer"]["rollout_model"]["engine_type"] == "vllm"
    explorer["explorer"]["auxiliary_models"][0]["model_path"] = str(model)
    path = tmp_path / "trinity.yaml"
    path.write_text(yaml.safe_dump(merge(edited_trinity_example(), explorer), sort_keys=False))
    proc = subprocess.run([sys.executable, "-m", "rft", "train", str(path), "trainer.total_steps=2",
                           "stages.0.buffer.total_steps=2"], capture_output=True, text=True, timeout=1500, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path / "checkpoints" / "Trinity-RFT" / "example"
    sft = [json.loads(x) for x in (out / "sft_warmup" / "metrics.jsonl").read_text().splitlines()]
    rl = [json.loads(x) for x in (out / "rft" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in sft] == [1, 2] and [x["step"] for x in rl] == [1, 2]
    # the math_workflow ran through the model handle on vLLM: every task gave experiences, and they trained
    assert all(x["workflow/errors"] == 0 and x["workflow/skipped_tasks"] == 0 and "actor/pg_loss" in x for x in rl)
    assert all(x["training/rollout_probs_diff_valid"] == 1 for x in rl)
    assert all(x["training/rollout_probs_diff_max"] <= LOGPROB_TOL * 10 for x in rl)
    assert (out / "rft" / "model" / "model.safetensors").is_file()


@pytest.mark.slow
def test_the_verl_component_generates_with_vllm_at_its_engine_defaults(root, tmp_path):
    """verl_trainer_component's ENGINE and rollout_name default to vllm: where vLLM is installed they pick it and
    the component's vLLM inputs land on verl's rollout keys (the config's vLLM checks apply to them). The
    documented command line without its `--ENGINE hf --rollout_name hf` trains two steps on vLLM."""
    import shlex

    from rft.components import get_component
    from rft.components.run import resolve
    from rft.components.verl_trainer import EXAMPLE
    from rft.tasks import write_arithmetic

    write_arithmetic(tmp_path / "d", n_train=16, n_val=4, seed=0)
    (tmp_path / "m").symlink_to(root / "tiny")
    argv = shlex.split(EXAMPLE)[1:]
    for name in ("--ENGINE", "--rollout_name"):
        i = argv.index(name)
        del argv[i:i + 2]
    component = get_component("verl_trainer_component")
    values = {"actor_model_path": str(root / "tiny"), "data_train_files": str(tmp_path / "d" / "train.parquet"),
              "data_val_files": str(tmp_path / "d" / "val.parquet"), "trainer_n_gpus_per_node": 1, "rollout_gpu_memory_utilization": 0.4, "rollout_enforce_eager": True,
              "actor_model_use_remove_padding": False, "data_train_batch_size": 4, "rollout_n": 2,
              "actor_ppo_mini_batch_size": 4, "actor_ppo_micro_batch_size_per_gpu": 4}
    cfg, plan = resolve(component, values, {"model_output": str(tmp_path / "never")})
    rollout = cfg.actor_rollout_ref.rollout
    assert (rollout.name, rollout.gpu_memory_utilization, rollout.enforce_eager) == ("vllm", 0.4, True)
    assert plan.inert == ["rollout_disable_mm_preprocessor_cache=True"]  # a multimodal setting: text only here
    proc = subprocess.run([sys.executable, "-m", "rft", *argv], capture_output=True, text=True, timeout=900,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "out" / "model" / "model.safetensors").is_file()


def test_rft_trainer_generates_with_vllm_and_grpo_when_a_vllm_input_asks():
    """Where vLLM is installed, rft_trainer (verl underneath, no engine input) generates with it at its defaults,
    its vLLM inputs on verl's rollout keys; the TRL-based GRPO component generates with vLLM when a vllm_* input is
    set away from its default (TRL's use_vllm), the value on its rollout key, and with the hf engine otherwise."""
    from rft.components import get_component

    def rollout(component: str, values: dict, output: str) -> tuple[dict, list[str]]:
        plan = get_component(component).plan(values, {output: "out"}, check_paths=False)
        assert not plan.refusals, plan.refusals
        return plan.nested()["actor_rollout_ref"]["rollout"], plan.notes

    ro, notes = rollout("rft_trainer", {"actor_model_path": "m", "data_train_files": "t.parquet", "data_val_files": "v.parquet",
                                        "rollout_gpu_memory_utilization": 0.4}, "model_output")
    assert (ro["name"], ro["gpu_memory_utilization"], ro["enforce_eager"]) == ("vllm", 0.4, False)
    assert any(n.startswith("rollout engine vLLM") for n in notes), notes
    grpo = {"model_name_or_path": "m", "dataset_train_split": "t.jsonl", "deepspeed_config": "ds.json"}
    ro, notes = rollout("group_relative_policy_optimization", grpo, "output_model_path")
    assert ro.get("name", "hf") == "hf" and "gpu_memory_utilization" not in ro
    ro, _ = rollout("group_relative_policy_optimization", {**grpo, "vllm_gpu_memory_utilization": 0.5},
                    "output_model_path")
    assert (ro["name"], ro["gpu_memory_utilization"]) == ("vllm", 0.5)


@pytest.mark.slow
def test_the_tools_demo_runs_its_tool_workflow_on_vllm(tmp_path, monkeypatch):
    """`rft demo --task tools --engine vllm` cut down: the multi-turn tool workflow's model handle generates with
    vLLM (each turn a request to the engine, the tool's result appended), with no workflow errors, and the GRPO
    stage trains on what it returns."""
    from rft.orchestration import demo

    monkeypatch.setattr(demo, "COPY_STEPS", 5)
    monkeypatch.setattr(demo, "TOOLS_SFT_STEPS", 20)
    monkeypatch.setattr(demo, "TOOLS_RL_STEPS", 2)
    monkeypatch.setattr(demo, "N_VAL", 40)
    result = demo.run_demo(tmp_path, seed=0, task="tools", engine="vllm")
    assert result["engine"] == "vllm" and 0.0 <= result["rl_accuracy"] <= 1.0
    lines = [json.loads(x) for x in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2]
    assert all(x["workflow/errors"] == 0 and x["workflow/model_calls"] > 0 and "actor/pg_loss" in x for x in lines)
    assert "rollout_probs_diff_max" in " ".join(lines[-1])

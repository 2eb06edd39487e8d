"""The explorer: tasks in, experiences out.

One explore step draws `data.train_batch_size` tasks (prompts) from the taskset, generates `rollout.n` responses to
each with the rollout engine (`gen`), scores them with the reward pipeline (`reward`), adds what the advantage
estimator declared it needs from generation (ReMax: one greedy response per prompt, scored alike: `gen_max`), and
with DAPO's dynamic sampling (`algorithm.filter_groups`) draws generation batches (of verl's `data.gen_batch_size`
prompts where set) until enough groups whose metric varies are kept. The scored rows become `Experience`s stamped
with the engine's weights version. Validation (`evaluate`) generates for the held-out tasks without touching the
training sampling stream.

Several processes (`dist`): every rank draws the same task indices and generates for its contiguous share of every
mini-batch (all responses of a task on one rank); group positions are global, so the trainer can put the rows of
all ranks in the one-process order.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os

import torch

from rft.algorithms import estimator_spec, informative_groups
from rft.batch import Batch, concat_batches
from rft.data.dataset import Prompt, PromptDataset
from rft.data.validation import capped_validation, note_uncapped_validation
from rft.data_processor import ExperiencePipeline, run_task_pipeline
from rft.distributed import SINGLE, Dist, padded_shard, step_shard
from rft.experience import Experience, from_batch
from rft.explorer.checks import TRUTHLESS_WORKFLOWS
from rft.explorer.evaluate import evaluate, report_task_failures, rollout_batch, validation_metrics
from rft.explorer.taskset import generation_batch
from rft.models.vision import vision_for
from rft.monitor import Timer
from rft.rewards.judge import JUDGE, LLMJudge, question_of
from rft.rewards.pipeline import RewardPipeline, overlong_punishment
from rft.rewards.scoring import FAILED, UNSCORED_VALIDATION, UNTRAINED_STEP, report_failures
from rft.rollout import SamplingParams
from rft.workers.fsdp import gathered_for_generation

log = logging.getLogger("rft")

# the generator state of the explorer's sampling stream is saved with the explorer's state
GENERATOR = "rollout"


def load_prompts(cfg, tokenizer, files, data_sources=None, file_keys=None) -> PromptDataset:
    """The prompts of `files` (paths, or (name, rows) pairs; with data.custom_cls what its dataset class reads
    from them) with the data section's template, length, truncation and format settings (Trinity's
    system_prompt(_key), response_key, tools_key, chat_template; verl's apply_chat_template_kwargs); `file_keys`:
    per file, the columns it has of its own (`val_file_keys`)."""
    data = cfg.data
    truthless = cfg.workflow.type in TRUTHLESS_WORKFLOWS  # an environment's reward: no response column read
    if truthless and file_keys:
        file_keys = [{k: v for k, v in own.items() if k != "response_key"} for own in file_keys]
    vision = vision_for(cfg.actor_rollout_ref.model.path)
    if data.custom_cls.path is not None:
        from rft.data.custom import custom_rows

        files = [custom_rows(data, files, tokenizer, vision.processor if vision is not None else None)]
        data_sources = None  # one dataset of all the files
    return PromptDataset(files, tokenizer, prompt_key=data.prompt_key, max_prompt_length=data.max_prompt_length,
                         truncation=data.truncation, filter_overlong_prompts=data.filter_overlong_prompts,
                         image_key=data.image_key, system_prompt=data.system_prompt,
                         system_prompt_key=data.system_prompt_key, reply_prefix=data.reply_prefix,
                         response_key=None if truthless else data.response_key,
                         tools_key=data.tools_key, chat_template=data.chat_template,
                         template_kwargs=data.apply_chat_template_kwargs, vision=vision, data_sources=data_sources,
                         file_keys=file_keys)


def val_file_keys(data) -> list[dict]:
    """Per val_files entry, the prompt / response columns it has of its own (data.val_prompt_keys /
    val_response_keys, a null entry: the shared data.prompt_key / response_key), each with the key that names it."""
    own: list[dict] = []
    for name in ("prompt_key", "response_key"):
        for i, column in enumerate(getattr(data, f"val_{name}s") or []):
            own += [{} for _ in range(i + 1 - len(own))]
            if column is not None:
                own[i][name] = (column, f"data.val_{name}s[{i}]")
    return own


def load_val_prompts(cfg, tokenizer) -> PromptDataset | None:
    """The validation prompts of data.val_files (None without), at most data.val_max_samples of them (verl's key
    and meaning: with data.shuffle a sample drawn with numpy's default_rng(data.seed), else the first rows)."""
    data = cfg.data
    if not data.val_files:
        return None
    val_set = load_prompts(cfg, tokenizer, data.val_files, data.val_data_sources, val_file_keys(data))
    kept = capped_validation(len(val_set), data.val_max_samples, data.shuffle, data.seed, "prompts")
    if kept is not None:
        val_set.keep(kept)
    return val_set


def note_large_validation(cfg, val_set: PromptDataset) -> None:
    """One note where a run validates on more than 300 prompts (rft.data.validation) without data.val_max_samples:
    how many, and the key that caps them (a GSM8K test set's 1,319 prompts take minutes at every validation)."""
    t = cfg.trainer
    if (t.test_freq > 0 or t.val_before_train or t.mode == "bench") and t.explorer_rank == 0:
        note_uncapped_validation(len(val_set), cfg.data.val_max_samples,
                                 f"generates for all {len(val_set)} prompts of data.val_files "
                                 f"(x{cfg.actor_rollout_ref.rollout.val_kwargs.n} responses)")


def pad_responses(batch: Batch, width: int, pad_token_id: int) -> Batch:
    """`batch` with its (B, R) response tensors right-padded to `width` columns (padding: masked out)."""
    extra = width - batch.response_ids.shape[1]
    if extra <= 0:
        return batch
    pad = lambda x, value: torch.nn.functional.pad(x, (0, extra), value=value) if x is not None else None
    batch.response_ids = pad(batch.response_ids, pad_token_id)
    batch.response_mask = pad(batch.response_mask, 0)
    batch.rollout_logprobs = pad(batch.rollout_logprobs, 0.0)
    batch.rollout_versions = pad(batch.rollout_versions, 0)
    return batch


def load_tasksets(cfg, tokenizer):
    """(the training taskset, the validation prompts or None) of an RL config, checked against the reward
    function (known data sources, ground truth present) before any model loads. With a task pipeline the taskset
    is its output file, made here."""
    from rft.explorer.preflight import check_interaction_rows, check_reward_inputs
    from rft.explorer.taskset import FileTaskset, make_taskset

    served = ServedModels(cfg, "data_processor.task_pipeline")
    try:  # data_processor.task_pipeline's output
        processed = run_task_pipeline(cfg, served) if cfg.data.train_files else None
    finally:
        served.close()
    taskset = make_taskset(cfg, lambda files: load_prompts(cfg, tokenizer, processed or files)) \
        if cfg.data.train_files else None
    val_set = load_val_prompts(cfg, tokenizer)
    check_reward_inputs(cfg, taskset.dataset if isinstance(taskset, FileTaskset) else None, val_set)
    check_interaction_rows(cfg, taskset.dataset if isinstance(taskset, FileTaskset) else None, val_set)
    return taskset, val_set


def rank_stream(shared: torch.Generator, rank: int) -> torch.Generator:
    """The sampling stream of process `rank` for one generation batch of several processes: a seed drawn from the
    shared rollout generator (one draw on every rank, so the ranks' shared generators stay equal and a checkpoint
    holds one state), offset by the rank, so that each rank samples its own responses. The same seed and number of
    processes give the same samples; another number of processes gives other ones (docs/scaling.md: one process
    samples from `shared` itself, and the hf engine draws the tokens of a batch's rows together, so a row's
    draws depend on which rows share its batch)."""
    seed = int(torch.randint(0, 2**62, (1,), generator=shared))
    return torch.Generator().manual_seed((seed + 1_000_003 * rank) % 2**63)


class Explorer:
    streaming = None
    """A `StreamingRollout` where the run streams groups through its engine server (`rft.explorer.streaming`), set
    by the run; None: each step generates its own batch."""

    def __init__(self, cfg, tokenizer, engine, rewards: RewardPipeline, taskset,
                 val_set: PromptDataset | None = None, dist: Dist = SINGLE):
        """`engine`: the rollout engine (its `model` is the policy it samples from; `version` the weights'
        trainer step); `taskset`: where the tasks come from (`rft.explorer.taskset`), None for an explorer that
        only evaluates (mode bench)."""
        self.cfg, self.tokenizer, self.engine, self.rewards, self.dist = cfg, tokenizer, engine, rewards, dist
        self.taskset, self.val_set = taskset, val_set
        if val_set is not None:
            note_large_validation(cfg, val_set)
        self.generator = torch.Generator().manual_seed(cfg.trainer.seed)
        self.adv_needs = estimator_spec(cfg.algorithm.adv_estimator).needs
        self.step = 0  # explore steps done
        os.environ.update({str(k): str(v) for k, v in cfg.workflow.env_vars.items()})  # where the workflows run
        # further local models for the workflows and the LLM judge, each served by an hf engine of its own
        self.auxiliary = [auxiliary_model(cfg, spec, i, engine) for i, spec in enumerate(cfg.workflow.auxiliary_models)]
        crf = cfg.custom_reward_function
        if crf.reward_fn_type == JUDGE:
            rewards.attach_judge(LLMJudge.from_settings(crf.reward_kwargs, self.auxiliary))
        # simple_workflow runs as one batched generation over the step's tasks (below); any other workflow through
        # the runners, its model calls batched by a generation server
        self.workflows = None if cfg.workflow.type == "simple_workflow" else Workflows(self)
        self.served = ServedModels(cfg, "data_processor.experience_pipeline")
        # data_processor.experience_pipeline, None without
        self.pipeline = ExperiencePipeline.from_config(cfg, self.served)

    def close(self) -> None:
        """The experience pipeline's Data-Juicer worker or server and the models served for it, stopped."""
        if self.pipeline is not None:
            self.pipeline.close()
        if self.streaming is not None:
            self.streaming.close()
        self.served.close()

    # ----------------------------------------------------------------------------------------- state
    def auxiliary_states(self) -> list[list[int]]:
        """The auxiliary models' sampling streams (a judge, a workflow's second model: each samples where its
        temperature is above 0), as a checkpoint holds them: later steps draw on from where these are."""
        return [handle.server.generator.get_state().tolist() for handle in self.auxiliary]

    def load_auxiliary_states(self, states: list[list[int]]) -> None:
        """Continue the auxiliary models' streams from `auxiliary_states()` (none in a state an older rft wrote:
        they start from their seeds, as they did then)."""
        for handle, saved in zip(self.auxiliary, states):
            handle.server.generator.set_state(torch.tensor(saved, dtype=torch.uint8))

    def state_dict(self) -> dict:
        return {"step": self.step, "sampler": self.taskset.state_dict(),
                "generator": self.generator.get_state().tolist(), "auxiliary": self.auxiliary_states()}

    def load_state_dict(self, state: dict) -> None:
        self.step = state["step"]
        self.taskset.load_state_dict(state["sampler"])
        self.generator.set_state(torch.tensor(state["generator"], dtype=torch.uint8))
        self.load_auxiliary_states(state.get("auxiliary", []))

    # ----------------------------------------------------------------------------------------- explore
    def sampling_params(self, source, *, n: int, do_sample: bool) -> SamplingParams:
        """`n` responses of up to data.max_response_length tokens with the temperature / top-k / top-p of `source`
        (the rollout config or its val_kwargs); the rollout's ignore_eos."""
        return SamplingParams(n=n, temperature=source.temperature, top_k=source.top_k, top_p=source.top_p,
                              do_sample=do_sample, max_tokens=self.cfg.data.max_response_length,
                              ignore_eos=self.cfg.actor_rollout_ref.rollout.ignore_eos)

    def skip_step(self) -> None:
        """Step over an explore step another explorer generates (trainer.explorer_num); its tasks are that
        explorer's to draw (`next_tasks`)."""
        self.step += 1

    def next_tasks(self) -> list[Prompt]:
        """The next generation batch of this explorer's tasks. One of trainer.explorer_num explorers takes the
        taskset's generation batches b with b % explorer_num == explorer_rank, in order. With one batch a step
        (explorer r generates the steps n with (n - 1) % explorer_num == r) that is batch n - 1 for step n, as one
        explorer would draw it; with dynamic sampling, whose steps draw as many batches as they need, the explorers
        still never draw the same batch, and none's tasks depend on how many the others drew."""
        t = self.cfg.trainer
        if t.explorer_num > 1:
            self.taskset.skip((t.explorer_rank - self.taskset.drawn) % t.explorer_num)  # the others' batches
        return self.taskset.next_batch()

    def explore_step(self, timer: Timer) -> tuple[list[Experience], dict[str, float]]:
        """One step's experiences (this rank's share with several processes) and the explorer's metrics, after the
        experience pipeline's operators (what every mode writes to the buffer)."""
        experiences, metrics = self.workflows.explore_step(timer) if self.workflows is not None \
            else self.generate_step(timer)
        if self.cfg.data.selector.selector_type == "difficulty_based":
            self.selector_feedback(experiences)
        if self.pipeline is not None:
            with timer("experience_pipeline"):
                experiences, more = self.pipeline.process(experiences)
            metrics.update(more)
        return experiences, metrics

    def selector_feedback(self, experiences: list[Experience]) -> None:
        """data.selector difficulty_based: each task's pass rate this step (the mean reward of its responses, what
        Trinity-RFT's pass_rate_calculator hands its selector) updates the selector's estimates."""
        rewards: dict[int, list[float]] = {}
        for e in experiences:
            rewards.setdefault(int(e.info["position"]), []).append(float(e.reward))
        positions = sorted(rewards)
        self.taskset.feedback(positions, [sum(rewards[p]) / len(rewards[p]) for p in positions])

    def generate_step(self, timer: Timer) -> tuple[list[Experience], dict[str, float]]:
        """One step of simple_workflow: one batched generation over the step's tasks, scored."""
        batch, rows = self.generate_and_score(timer)
        metrics: dict[str, float] = dict(self.streaming.metrics) if self.streaming is not None else {}
        if self.cfg.algorithm.filter_groups.enable:
            batch, metrics = self.dynamic_sampling(batch, rows, timer)
        self.step += 1
        n_resp = float(self.dist.sum(batch.response_mask.sum().double()))
        metrics["perf/gen_tokens_per_s"] = n_resp / max(timer.times["gen"], 1e-9)
        groups = [f"{self.step}-{int(g)}" for g in batch.group]
        info = {"position": batch.group.tolist(), "explore_step": [self.step] * len(batch)}
        experiences = from_batch(batch, groups, self.engine.version, info)
        for e in experiences:  # a streamed response may span versions: its age is its oldest token's
            if e.versions is not None and len(e.versions):
                e.model_version = int(e.versions.min())
        return experiences, metrics

    def generate_and_score(self, timer: Timer) -> tuple[Batch, dict[str, torch.Tensor]]:
        """One generation batch (`data.train_batch_size` prompts, or `data.gen_batch_size` with dynamic sampling),
        scored (and its per-prompt baselines); with several processes this rank's share of them; streaming, the
        first complete groups. Returns the batch and its per-row reward values by name."""
        if self.streaming is not None:
            with timer("gen"):
                prompts, batch = self.streaming.take(self.tokenizer)
        else:
            prompts = self.next_tasks()
            positions = None
            if self.dist.enabled:  # this rank's share of every mini-batch of the step's prompts
                positions = step_shard(len(prompts), self.cfg.actor_rollout_ref.actor.ppo_mini_batch_size,
                                       self.dist.rank, self.dist.world_size,
                                       lengths=[len(p.ids) for p in prompts] if self.cfg.trainer.balance_batch
                                       else None)
                prompts = [prompts[i] for i in positions]
            with timer("gen"):
                batch = self.generate_batch(prompts, positions)
        failures: list[str] = []
        with timer("reward"):
            rows = self.rewards.score(batch, failures)
        if FAILED in rows:  # on_error=zero
            self.report_failed_rows(failures, len(batch), f"explore step {self.step + 1}")
        if "reward_baselines" in self.adv_needs:
            with timer("gen_max"):
                batch.reward_baselines = self.greedy_baselines(prompts)
        return batch, rows

    def generate_batch(self, prompts: list[Prompt], positions: list[int] | None = None) -> Batch:
        """n responses to each of `prompts`; `positions`: the prompts' places in the step's batch of all ranks
        (their group ids), default 0, 1, ..."""
        ro = self.cfg.actor_rollout_ref.rollout
        params = self.sampling_params(ro, n=ro.n, do_sample=ro.do_sample)
        if not self.dist.enabled:
            return rollout_batch(self.engine, self.tokenizer, prompts, params, self.generator)
        # Each rank samples from its own stream (`rank_stream`; one process sharded alone from the shared one, as
        # unsharded); prompts get globally unique group ids; every rank pads its responses to the widest of all, so
        # the gathered (B, R) tensors are the one-process batch's.
        generator = rank_stream(self.generator, self.dist.rank) if self.dist.processes > 1 else self.generator
        with gathered_for_generation(self.engine.model):
            batch = rollout_batch(self.engine, self.tokenizer, prompts, params, generator)
        if positions is not None:
            batch.group = torch.as_tensor(positions, dtype=torch.long)[batch.group]
        return pad_responses(batch, self.dist.max_int(batch.response_ids.shape[1]), self.tokenizer.pad_token_id)

    def greedy_baselines(self, prompts: list[Prompt]) -> torch.Tensor:
        """(B,) ReMax's baseline: the score of one greedy response (do_sample false, same max tokens) to each of
        `prompts`, scored as the samples are, given to every row of that prompt's group."""
        ro = self.cfg.actor_rollout_ref.rollout
        params = self.sampling_params(ro, n=1, do_sample=False)
        with gathered_for_generation(getattr(self.engine, "model", None)):  # an engine server: none here
            greedy = rollout_batch(self.engine, self.tokenizer, prompts, params, generator=None)
        failures: list[str] = []
        scores, extras = self.rewards.score_rows(greedy, failures)
        if FAILED in extras:  # on_error=zero
            self.report_failed_rows(failures, len(greedy), f"the greedy baselines (ReMax) of explore step "
                                    f"{self.step + 1}", without="every prompt's baseline would be 0")
        position = torch.arange(len(prompts)).repeat_interleave(ro.n)  # each row's prompt, as in rollout_batch
        return torch.tensor(scores, dtype=torch.float32)[position]

    def report_failed_rows(self, failures: list[str], rows: int, where: str, without: str = UNTRAINED_STEP) -> None:
        """`report_failures` over the `rows` rows of `where` scored on this rank, of which `failures` failed (their
        messages), and on every other rank (each says its own first failure)."""
        failed, total = self.dist.sum(torch.tensor([len(failures), rows])).tolist()
        report_failures(failed, total, next(iter(failures), None), where, without=without)

    def dynamic_sampling(self, batch: Batch, rows: dict[str, torch.Tensor],
                         timer: Timer) -> tuple[Batch, dict[str, float]]:
        """DAPO's dynamic sampling (verl's algorithm.filter_groups): drop the groups whose filter metric is the
        same for every response, generate further batches (of data.gen_batch_size prompts where set, as `batch`)
        until data.train_batch_size groups are kept, then keep the first train_batch_size of them (in generation
        batch, then prompt order). More than max_num_gen_batches generation batches (> 0) is an error."""
        fg, want = self.cfg.algorithm.filter_groups, self.cfg.data.train_batch_size
        per_batch = generation_batch(self.cfg.data)[0]  # prompts of every generation batch (of all ranks)
        kept: list[Batch] = []
        num_kept = num_generated = num_gen_batches = 0
        while True:
            num_gen_batches += 1
            if fg.metric not in rows:
                raise ValueError(
                    f"algorithm.filter_groups.metric={fg.metric!r}: the reward function returned no such value; "
                    f"available: {sorted(rows)}"
                )
            keep = informative_groups(batch.group, rows[fg.metric])
            counts = torch.tensor([len(torch.unique(batch.group)), 0], dtype=torch.long)
            if keep.any():
                kept.append(batch.select(keep.nonzero().flatten().tolist()))
                # labels are prompt positions in their generation batch: unique over batches, ascending in order
                kept[-1].group = kept[-1].group + (num_gen_batches - 1) * per_batch
                counts[1] = len(torch.unique(kept[-1].group))
            counts = self.dist.sum(counts)  # several processes: every rank's groups (the same count on all)
            num_generated += int(counts[0])
            num_kept += int(counts[1])
            if num_kept >= want:
                break
            if 0 < fg.max_num_gen_batches <= num_gen_batches:
                raise RuntimeError(
                    f"dynamic sampling (algorithm.filter_groups) kept {num_kept} of the {want} groups a step needs "
                    f"after {num_gen_batches} generation batches (algorithm.filter_groups.max_num_gen_batches="
                    f"{fg.max_num_gen_batches}): the responses to most prompts agree in "
                    f"{fg.metric!r}. Use easier or harder data, raise max_num_gen_batches, or set it to 0 (no limit)"
                )
            batch, rows = self.generate_and_score(timer)
        if self.dist.enabled:
            batch = self._kept_share(kept, want)
        else:
            batch = concat_batches(kept, self.tokenizer.pad_token_id)
            first = batch.group <= torch.unique(batch.group)[want - 1]  # the first `want` groups (labels ascend)
            batch = batch.select(first.nonzero().flatten().tolist())
        return batch, {"train/num_gen_batches": float(num_gen_batches), "train/num_kept_groups": float(num_kept),
                       "train/num_generated_groups": float(num_generated)}

    def _kept_share(self, kept: list[Batch], want: int) -> Batch:
        """Several processes: the first `want` kept groups of every rank (in the one-process order: generation
        batch, then prompt position), relabelled 0..want-1, and this rank's share of them (`step_shard`, as the
        prompts of a step are shared), so every rank trains on the same number of rows."""
        parts = [b for part in self.dist.gather_objects(kept) for b in part]
        labels = torch.cat([b.group for b in parts])
        batch = concat_batches(parts, self.tokenizer.pad_token_id)
        order = torch.argsort(labels, stable=True)
        batch, labels = batch.select(order.tolist()), labels[order]
        first = labels <= torch.unique(labels)[want - 1]
        batch = batch.select(first.nonzero().flatten().tolist())
        batch.group = torch.unique(labels[first], return_inverse=True)[1]
        lengths = None
        if self.cfg.trainer.balance_batch:  # each group's prompt length, as generate_and_score deals them
            first_row = torch.unique(batch.group, return_inverse=False)
            lengths = [int(batch.prompt_mask[(batch.group == g).nonzero()[0, 0]].sum()) for g in first_row.tolist()]
        mine = step_shard(want, self.cfg.actor_rollout_ref.actor.ppo_mini_batch_size, self.dist.rank,
                          self.dist.world_size, lengths=lengths)
        rows = [i for pos in mine for i in (batch.group == pos).nonzero().flatten().tolist()]
        out = batch.select(rows)
        return pad_responses(out, self.dist.max_int(out.response_ids.shape[1]), self.tokenizer.pad_token_id)

    # ---------------------------------------------------------------------------------------- evaluate
    def evaluate(self) -> tuple[dict[str, float], list[dict]]:
        """(`val-core/<data_source>/reward/mean@<n>` metrics, samples) on the whole validation set."""
        if self.workflows is not None:
            return self.workflows.evaluate()
        vk, data = self.cfg.actor_rollout_ref.rollout.val_kwargs, self.cfg.data
        params = self.sampling_params(vk, n=vk.n, do_sample=vk.do_sample)
        batch_scored = self.rewards.reward_model is not None or self.rewards.judge is not None
        scorer = self.rewards.score_rows if batch_scored else None
        reward_fn = self.rewards.reward_fn
        seed = self.cfg.trainer.seed + 7919
        if not self.dist.enabled:
            return evaluate(self.engine, self.tokenizer, self.val_set, reward_fn, params, data.val_batch_size,
                            seed=seed, scorer=scorer)
        # each rank its share of the prompts, padded to the same number of forward passes
        indices, keep = padded_shard(len(self.val_set), self.dist.rank, self.dist.world_size)
        with gathered_for_generation(self.engine.model):
            return evaluate(self.engine, self.tokenizer, self.val_set, reward_fn, params, data.val_batch_size,
                            seed=seed + self.dist.rank, scorer=scorer, indices=indices, keep=keep,
                            gather=self.dist.gather_objects)


class Workflows:
    """The explorer's workflow machinery (any workflow but the batched simple_workflow): the workflow class, a
    generation server over the engine, the runners, the OpenAI-compatible endpoint and the auxiliary models."""

    def __init__(self, explorer: Explorer):
        from rft.explorer.model import GenerationServer
        from rft.explorer.plugins import workflow_class
        from rft.explorer.runner import RunnerSettings, WorkflowRunner
        from rft.explorer.tools import parser_for

        self.ex = ex = explorer
        wf, ro = ex.cfg.workflow, ex.cfg.actor_rollout_ref.rollout
        self.cls = workflow_class(wf.type, wf.path)
        # the config's parser, else the model family's (its chat template, its tokenizer's tokens)
        self.tool_call_parser = wf.tool_call_parser or parser_for(ex.tokenizer, ex.cfg.data.chat_template)
        self.server = GenerationServer(ex.engine, ex.tokenizer, ex.generator)
        self.train_params = ex.sampling_params(ro, n=1, do_sample=ro.do_sample)
        self.endpoint = None
        if wf.endpoint or wf.enable_history:
            from rft.explorer.server import Endpoint

            self.endpoint = Endpoint(lambda: self.handle(self.server, self.train_params), model_name(ex.cfg),
                                     self.tool_call_parser, wf.endpoint_port, reasoning_parser=wf.reasoning_parser)
        self.tool_schemas = []  # verl's tool-config file: declared to the model on every task
        if wf.tool_config_path:
            from rft.explorer.verl_tools import read_tool_config

            self.tool_schemas = [schema for _, schema in read_tool_config(wf.tool_config_path)]
        self.interactions = {}  # verl's interactions: built once, shared by every conversation, as verl's
        if wf.interaction_config_path:
            from rft.explorer.interactions import load_interactions

            self.interactions = load_interactions(wf.interaction_config_path)
        self.auxiliary = ex.auxiliary
        self.settings = RunnerSettings(wf.runner_per_model, wf.max_timeout, wf.max_retry_times)
        self.runner = WorkflowRunner(self.cls, self.server, lambda: self.handle(self.server, self.train_params),
                                     self.settings, self.auxiliary)

    def handle(self, server, params):
        from rft.explorer.model import ModelHandle
        from rft.models.vision import vision_of

        wf = self.ex.cfg.workflow
        data = self.ex.cfg.data
        return ModelHandle(server, self.ex.tokenizer, params, chat_template=data.chat_template,
                           template_kwargs=dict(data.apply_chat_template_kwargs), endpoint=self.endpoint, enable_history=wf.enable_history,
                           tool_call_parser=self.tool_call_parser,
                           vision=vision_of(getattr(self.ex.engine, "model", None)),
                           max_prompt_tokens=data.max_prompt_length, truncation=data.truncation)

    def tasks(self, prompts, n: int, is_eval: bool) -> list:
        from rft.explorer.workflow import Task

        args = dict(self.ex.cfg.workflow.args)
        judge = self.ex.rewards.judge  # shown each task's question
        reward_fn = (lambda p: functools.partial(judge, question=question_of(p.messages))) if judge is not None \
            else (lambda p: self.ex.rewards.reward_fn)
        if self.tool_schemas:
            from rft.explorer.verl_tools import with_tools

            prompts = [dataclasses.replace(p, tools=with_tools(p.tools, self.tool_schemas)) for p in prompts]
        return [Task(prompt=p, index=i, repeat_times=n, workflow_args=args, reward_fn=reward_fn(p),
                     is_eval=is_eval, interactions=self.interactions) for i, p in enumerate(prompts)]

    def explore_step(self, timer: Timer) -> tuple[list[Experience], dict[str, float]]:
        ex = self.ex
        prompts = ex.next_tasks()
        tasks = self.tasks(prompts, ex.cfg.actor_rollout_ref.rollout.n, is_eval=False)
        calls = self.server.calls
        with timer("gen"):
            results, metrics = self.runner.run(tasks)
        ex.step += 1
        out = []
        for task, experiences in zip(tasks, results):
            for e in experiences:
                p = task.prompt
                # a workflow's own group within the task (math_trainable_ruler's judgements) keeps its name
                e.group = f"{ex.step}-{task.index}" + (f"-{e.group}" if e.group else "")
                e.model_version = ex.engine.version
                e.info = {"data_source": p.data_source, "ground_truth": p.ground_truth, "extra_info": p.extra_info,
                          "raw_prompt": p.messages, **e.info, "explore_step": ex.step, "position": task.index}
                out.append(e)
        punish_overlong(out, ex.rewards)
        report_task_failures(tasks, out, f"explore step {ex.step}")
        if not out:
            log.warning("rft: workflow %r failed on every task of explore step %d (the warnings above say how): the "
                        "step has no experiences", ex.cfg.workflow.type, ex.step)
        tokens = sum(int(e.action_mask.sum()) for e in out)
        metrics["perf/gen_tokens_per_s"] = tokens / max(timer.times["gen"], 1e-9)
        metrics["workflow/model_calls"] = float(self.server.calls - calls)  # the step's: no count to checkpoint
        if self.endpoint is not None:
            metrics.update(self.endpoint.take_counts())
        return out, metrics

    def evaluate(self) -> tuple[dict[str, float], list[dict]]:
        """Validation through the workflow: greedy (val_kwargs) responses to every validation task, scored by the
        workflow; a generator of its own, so the training stream is untouched."""
        from rft.explorer.model import GenerationServer
        from rft.explorer.runner import WorkflowRunner

        ex = self.ex
        vk = ex.cfg.actor_rollout_ref.rollout.val_kwargs
        params = ex.sampling_params(vk, n=1, do_sample=vk.do_sample)
        server = GenerationServer(ex.engine, ex.tokenizer, torch.Generator().manual_seed(ex.cfg.trainer.seed + 7919))
        runner = WorkflowRunner(self.cls, server, lambda: self.handle(server, params), self.settings, self.auxiliary)
        tasks = self.tasks([ex.val_set[i] for i in range(len(ex.val_set))], vk.n, is_eval=True)
        return evaluate_workflow(runner, tasks, ex.tokenizer, vk.n, ex.rewards)


def punish_overlong(experiences: list[Experience], rewards) -> None:
    """DAPO's soft overlong punishment (reward_model.overlong_buffer, `rewards`' RewardPipeline's) added to each
    workflow experience's reward, by the count of its model tokens, as the batched path adds it to each response's
    score (Trinity-RFT's math_dapo_reward adds it in the reward function, from the response's tokens); with
    overlong_buffer.log its parts are the experience's `overlong_reward` / `overlong` values."""
    if getattr(rewards, "overlong", None) is None or not experiences:
        return
    lengths = torch.tensor([int(e.action_mask.sum()) for e in experiences])
    penalty, logged = overlong_punishment(rewards.overlong, rewards.max_response_length, lengths)
    for i, e in enumerate(experiences):
        e.reward = e.reward + float(penalty[i])
        if logged:
            e.rewards = {**e.rewards, **{name: values[i] for name, values in logged.items()}}


def evaluate_workflow(runner, tasks: list, tokenizer, n: int, rewards=None) -> tuple[dict[str, float], list[dict]]:
    """(val-core/<data_source>/reward/mean@n, samples) of `tasks` run through `runner`'s workflow; a skipped
    task scores 0. Responses whose reward failed and were scored 0 (on_error=zero) are counted in one warning; a
    validation whose every response failed raises RewardError (`report_task_failures`), as `evaluate` does.
    `rewards`: the run's RewardPipeline, whose overlong punishment the rewards get (`punish_overlong`)."""
    results, _ = runner.run(tasks)
    for experiences in results:
        punish_overlong(experiences, rewards)
    report_task_failures(tasks, [e for experiences in results for e in experiences], "validation",
                         without=UNSCORED_VALIDATION)
    return validation_metrics(tasks, results, n, lambda task: tokenizer.decode(task.prompt.ids))


def model_name(cfg) -> str:
    """The name the endpoint serves the policy under: its folder's name."""
    from pathlib import Path

    return Path(str(cfg.actor_rollout_ref.model.path)).name or "policy"


def auxiliary_model(cfg, spec: dict, index: int, engine):
    """A handle on auxiliary model `spec` ({model_path, temperature?, max_tokens?, enable_thinking?}): loaded frozen
    on the policy's device, served by an hf engine and a generation server of its own (greedy unless told);
    enable_thinking is its chat template's variable of that name (none passed when null)."""
    from rft.models.load import device_of

    return local_model_handle(cfg, spec["model_path"], dtype=next(engine.model.parameters()).dtype,
                              device=device_of(engine.model), key=f"workflow.auxiliary_models[{index}]",
                              temperature=float(spec.get("temperature", 0.0)),
                              max_tokens=int(spec.get("max_tokens", cfg.data.max_response_length)),
                              seed=cfg.trainer.seed + 100 + index,
                              template_kwargs=({"enable_thinking": spec["enable_thinking"]}
                                               if spec.get("enable_thinking") is not None else None))


def local_model_handle(cfg, path: str, *, dtype, device, key: str, temperature: float, max_tokens: int, seed: int,
                       template_kwargs: dict | None = None):
    """A model handle on the folder `path`, loaded frozen and served by an hf engine and a generation server of its
    own; `key` names it in errors."""
    from rft.explorer.model import GenerationServer, ModelHandle
    from rft.models.load import load_causal_lm, load_tokenizer
    from rft.rollout import HFRollout
    from rft.rollout.base import eos_token_ids

    tokenizer = load_tokenizer(path)
    # the folder checks of the policy's (a causal decoder, its own tokenizer's ids, whole weight files)
    model = load_causal_lm(path, dtype, device, key=key, tokenizer=tokenizer)
    model.requires_grad_(False).eval()
    engine = HFRollout(model, eos_token_ids(model, tokenizer), tokenizer.pad_token_id)
    params = SamplingParams(n=1, temperature=temperature, do_sample=temperature > 0, max_tokens=max_tokens)
    server = GenerationServer(engine, tokenizer, torch.Generator().manual_seed(seed))
    return ModelHandle(server, tokenizer, params, template_kwargs=template_kwargs)


class ServedModels:
    """Local model folders served as OpenAI-compatible endpoints on 127.0.0.1, one per folder, for Data-Juicer's
    LLM operators in the data processor (`rft.data_processor.llm`): greedy, up to data.max_response_length new
    tokens unless a request says otherwise, on the run's device in its rollout precision; closed with the
    pipeline."""

    def __init__(self, cfg, where: str):
        self.cfg, self.where = cfg, where
        self.endpoints: dict = {}
        self.requests: dict[str, int] = {}

    def __call__(self, path: str) -> str:
        from rft.explorer.server import Endpoint
        from rft.models.load import compute_dtype, resolve_device

        if path not in self.endpoints:
            cfg = self.cfg
            device = resolve_device(cfg.trainer.device)
            handle = local_model_handle(cfg, path, dtype=compute_dtype(cfg.actor_rollout_ref.rollout.dtype, device),
                                        device=device, key=f"{self.where} api_or_hf_model", temperature=0.0,
                                        max_tokens=cfg.data.max_response_length, seed=cfg.trainer.seed + 200)
            self.requests[path] = 0

            def serve_one(path=path):
                self.requests[path] += 1  # each request of Data-Juicer's (no workflow's key) asks for a handle
                return handle

            self.endpoints[path] = Endpoint(serve_one, path)
            log.info("rft: %s: serving %s for Data-Juicer at %s", self.where, path, self.endpoints[path].api_base)
        return self.endpoints[path].api_base

    def close(self) -> None:
        for path, endpoint in self.endpoints.items():
            endpoint.close()
            log.info("rft: %s: served %d requests with %s", self.where, self.requests[path], path)
        self.endpoints.clear()

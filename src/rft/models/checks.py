"""The checks of the model keys: LoRA's rank, the override config, the tokenizer folder, the positions a model
holds; what a model folder says before it loads (its config, its parameter count)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from rft.config.checks import CHECKS, CheckContext
from rft.config.errors import ConfigError
from rft.models.hub import resolve_hub_ids

log = logging.getLogger("rft")

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model",
                   "sentencepiece.bpe.model", "vocab.txt")
"""A folder holding one of these has a tokenizer transformers can load (without one it builds an empty one)."""


def check_tokenizer_folder(key: str, path: str) -> None:
    """The folder `path` holds tokenizer files (without any, transformers builds an empty tokenizer and the run
    fails much later)."""
    folder = Path(path).expanduser()
    if folder.is_dir() and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ConfigError(
            f"{key}={path!r} has no tokenizer (none of {', '.join(TOKENIZER_FILES[:3])}, ...): copy the model's "
            "tokenizer files into it, or set data.tokenizer to a folder that has them"
        )


def check_lora_rank(key: str, rank: int) -> None:
    if rank < 0:
        raise ConfigError(f"{key} must be >= 0, got {rank}")


@CHECKS.register("models.hub_ids")
def check_hub_ids(ctx: CheckContext) -> None:
    """A model or tokenizer key that names a Hugging Face Hub id gets its folder in the local cache (`rft.models.hub`),
    before any other check reads the folder; the trained model's key only where its folder must exist already, and
    no key of a part the run does not build."""
    if ctx.check_paths:
        resolve_hub_ids(ctx.cfg, policy=ctx.check_model_path, inactive=ctx.inactive)


@CHECKS.register("models.lora")
def check_lora(ctx: CheckContext) -> None:
    """The LoRA rank; a saved adapter to start from (lora_adapter_path) is a peft adapter folder."""
    model = ctx.cfg.actor_rollout_ref.model
    check_lora_rank("actor_rollout_ref.model.lora_rank", model.lora_rank)
    folder = model.lora_adapter_path
    if folder and ctx.check_paths and not (Path(folder).expanduser() / "adapter_config.json").is_file():
        raise ConfigError(f"actor_rollout_ref.model.lora_adapter_path={folder!r} has no adapter_config.json: set it to "
                          "a peft adapter folder (a LoRA adapter saved with save_pretrained), or remove it")


@CHECKS.register("models.override_config")
def check_override_config(ctx: CheckContext) -> None:
    """override_config.moe_config is Megatron's; rft has none of its MoE layers."""
    moe = (ctx.cfg.actor_rollout_ref.model.override_config or {}).get("moe_config")
    if moe and not (isinstance(moe, dict) and all(not v for v in moe.values())):
        raise ConfigError(
            f"actor_rollout_ref.model.override_config.moe_config={moe!r} configures Megatron's MoE layers, which "
            "rft (FSDP / one process) does not have; remove it or leave its values false / null"
        )


@CHECKS.register("models.fused_kernels")
def check_fused_kernels(ctx: CheckContext) -> None:
    """fused_kernel_options: impl_backend torch (rft's chunked LM head) or triton (verl's kernels of the same
    numbers, noted), nothing else."""
    options = ctx.cfg.actor_rollout_ref.model.fused_kernel_options or {}
    key = "actor_rollout_ref.model.fused_kernel_options"
    if not isinstance(options, dict) or set(options) - {"impl_backend"}:
        raise ConfigError(f"{key}={options!r}: the one option is impl_backend ('torch')")
    backend = options.get("impl_backend")
    if backend == "triton":  # verl's Triton kernels of the same chunked log-probs and entropies
        log.warning("rft: note: %s.impl_backend='triton': verl's Triton kernels compute the log-probs the torch "
                    "backend does; rft runs its own (torch), the same numbers", key)
    elif backend not in (None, "None", "torch"):  # verl writes None (its default: the torch backend)
        raise ConfigError(f"{key}.impl_backend={backend!r}: rft's fused log-probs are the torch backend (verl's "
                          "torch or triton): set impl_backend: torch, or remove it")


@CHECKS.register("models.tokenizer")
def check_tokenizer(ctx: CheckContext) -> None:
    """data.tokenizer, or the model folder, holds tokenizer files."""
    if ctx.check_paths and ctx.check_model_path:
        data, arr = ctx.cfg.data, ctx.cfg.actor_rollout_ref
        check_tokenizer_folder("data.tokenizer" if data.tokenizer else "actor_rollout_ref.model.path",
                               data.tokenizer or arr.model.path)


LEARNED_POSITIONS = ("gpt2", "gpt_bigcode", "gpt_neo", "opt", "biogpt", "xglm", "codegen", "gptj")
"""Model types whose positions are a learned table (a position past it has no embedding: an index error)."""


def text_config_json(path: str) -> dict | None:
    """The language model's part of the config.json in the model folder `path` (its text_config for a
    vision-language model), read before anything loads; None when it cannot be read (the model checks say why)."""
    try:
        config = json.loads((Path(path).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def check_reward_backbone(key: str, path: str) -> None:
    """`rft rm`'s backbone (`key`=`path`): a model folder of a family of the model-family matrix
    (`rft.models.families.FAMILIES`, the families tests/test_model_families.py trains), whose
    `*ForSequenceClassification` class transformers has; any other family is refused by name before it loads
    (a vision-language model, an encoder, a family rft has not tested under a score head)."""
    from rft.models.families import FAMILIES

    try:
        config = json.loads((Path(path).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        return  # the model-folder check says why
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type not in FAMILIES:
        raise ConfigError(
            f"{key}={path!r} is a {model_type!r} model, which is not in rft's model-family matrix; rft rm trains a "
            f"score head over the families it tests ({', '.join(sorted(FAMILIES))}): use a model of one of them")


def saved_parameters(path: str) -> int | None:
    """The number of parameters in the model folder `path`'s safetensors files, read from their headers (nothing
    loads; a tied embedding is saved once); None without safetensors files or when one cannot be read."""
    import math
    import struct

    files = sorted(Path(path).expanduser().glob("*.safetensors"))
    total = 0
    try:
        for file in files:
            with file.open("rb") as f:
                header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
            total += sum(math.prod(t["shape"]) for name, t in header.items() if name != "__metadata__")
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None
    return total if files else None


def model_positions(config: dict) -> int | None:
    """The positions a model's (text) config says it holds (max_position_embeddings or GPT-2's n_positions)."""
    value = config.get("max_position_embeddings") or config.get("n_positions")
    return int(value) if isinstance(value, int) else None


def _positions_of(path: str) -> tuple[int | None, bool]:
    """(the positions the model folder `path` holds, whether they are a learned table with nothing past it: GPT-2,
    OPT, ...), read from its config.json before it loads; (None, False) where it says none."""
    config = text_config_json(path)
    if config is None:
        return None, False
    return model_positions(config), config.get("model_type") in LEARNED_POSITIONS


@CHECKS.register("models.positions")
def check_positions(ctx: CheckContext) -> None:
    """A prompt and its response, and with algorithm.mix an expert row (data.expert.max_length), fit the positions
    of a model with a learned position table (GPT-2, OPT, ...), read from its config.json before it loads; past a
    rotary model's max_position_embeddings the run goes on, with a note (positions it was not trained on)."""
    if not (ctx.check_paths and ctx.check_model_path):
        return
    data, path = ctx.cfg.data, ctx.cfg.actor_rollout_ref.model.path
    positions, learned = _positions_of(path)
    if positions is None:
        return
    need = data.max_prompt_length + data.max_response_length
    if need > positions:
        _past_positions(f"data.max_prompt_length + data.max_response_length = {data.max_prompt_length} + "
                        f"{data.max_response_length} = {need} tokens, more than the {positions} positions of {path}",
                        learned, "lower them")
    expert = data.expert.max_length
    if ctx.cfg.algorithm.mix.enable and expert > positions:  # an expert row is prompt and response in one
        _past_positions(f"data.expert.max_length={expert}: an expert row (algorithm.mix) of up to {expert} tokens, "
                        f"more than the {positions} positions of {path}", learned,
                        f"set data.expert.max_length={positions} (data.expert.truncation then says what happens to "
                        "longer rows)")


def _past_positions(what: str, learned: bool, fix: str) -> None:
    """`what` asks for positions past a model's: refused (saying `fix`) for a learned table, which has none past it;
    a note for a rotary model, which runs on positions it was not trained on."""
    if learned:
        raise ConfigError(f"{what} (a learned position table, which has no position past it): {fix}")
    log.warning("rft: note: %s (its max_position_embeddings): positions past them were not trained", what)


def check_generation_positions(path: str, prompts, response_length: int) -> None:
    """`rft generate`'s prompts, each with rollout.response_length new tokens, fit the positions of the model at
    `path` when it has a learned position table (GPT-2, OPT, ...; a rotary model goes on, as `check_positions`
    lets it): checked on the longest prompt of `prompts` (each with `ids` and `origin`), after the chat template and
    before the model loads, where generation past the table would stop on an index error."""
    positions, learned = _positions_of(path)
    if positions is None or not learned or not len(prompts):
        return
    longest = max((prompts[i] for i in range(len(prompts))), key=lambda p: len(p.ids))
    if len(longest.ids) + response_length <= positions:
        return
    room = positions - len(longest.ids)
    fix = (f"lower rollout.response_length to at most {room}" if room > 0 else
           f"shorten the prompt (rollout.prompt_length={positions - 1} refuses such prompts by name)")
    raise ConfigError(
        f"rollout.response_length={response_length}: the longest prompt ({longest.origin}, {len(longest.ids)} tokens) "
        f"and its response need {len(longest.ids) + response_length} positions, more than the {positions} of {path} "
        f"(a learned position table, which has no position past it): {fix}")


def check_row_positions(path: str, longest: int, unit: str) -> None:
    """rft sft's and rft dpo's rows, the longest `longest` tokens (after data.max_length and data.truncation), fit the
    positions of the model at `path` when it has a learned position table (GPT-2, OPT, ...): checked when the data
    has loaded, before the model, where the forward pass of a longer row would stop on an index error."""
    positions, learned = _positions_of(path)
    if positions is None or not learned or longest <= positions:
        return
    raise ConfigError(
        f"the longest {unit.removesuffix('s')} of data.train_files / val_files has {longest} tokens, more than the "
        f"{positions} positions of {path} (a learned position table, which has no position past it): set "
        f"data.max_length={positions} (data.truncation then says what happens to longer {unit}), or shorten them")


SCORE_HEADS = ("ForSequenceClassification", "ForTokenClassification")
"""How the architectures of a reward or value model's config.json end (a score head, no token log-probs)."""


def teacher_problem(teacher: str, student: str, student_tokenizer: str | None = None) -> str | None:
    """What makes the folder `teacher` unfit to teach the model in `student` (tokenized by `student_tokenizer`,
    default the student's folder), read before either model loads; None when nothing. The teacher's log-probs are
    read at the student's token ids, so both must share one vocabulary: a reward model (a score head, no
    log-probs), another vocabulary size or other tokens are refused by name (TRL's GOLD aligns tokens across
    tokenizers; rft does not)."""
    config = text_config_json(teacher)
    names = [n for n in (config or {}).get("architectures") or [] if isinstance(n, str)]
    if names and all(n.endswith(SCORE_HEADS) for n in names):
        return (f"is a reward model ({', '.join(names)}): its weights hold a score head, not the token "
                "log-probs a teacher gives; point it at a causal LM (the reward model scores through "
                "reward_model.model.path)")
    own = text_config_json(student)
    sizes = [(c or {}).get("vocab_size") for c in (config, own)]
    if all(isinstance(s, int) for s in sizes) and sizes[0] != sizes[1]:
        return (f"has a vocabulary of {sizes[0]} tokens (config.json's vocab_size), the student {student!r} one of "
                f"{sizes[1]}: the teacher scores the student's token ids, so both need one tokenizer; distil from a "
                "teacher of the student's family and tokenizer")
    from rft.models.load import load_tokenizer

    tokenizers = (teacher, student_tokenizer or student)
    if not all(any((Path(t).expanduser() / f).is_file() for f in TOKENIZER_FILES) for t in tokenizers):
        return None  # a folder without a tokenizer: the model checks name it
    vocabs = [load_tokenizer(t).get_vocab() for t in tokenizers]
    if vocabs[0] != vocabs[1]:
        differ = sorted(set(vocabs[0].items()) ^ set(vocabs[1].items()), key=str)[:3]
        return (f"has another tokenizer than the student's ({tokenizers[1]!r}; e.g. {differ}): the teacher scores "
                "the student's token ids, so both need one tokenizer; distil from a teacher with the student's "
                "tokenizer")
    return None


@CHECKS.register("models.teacher")
def check_teacher(ctx: CheckContext) -> None:
    """distillation.teacher_model.model_path: set when distillation is enabled, a model folder, not a reward
    model, of the student's vocabulary and tokenizer (`teacher_problem`), before any model loads."""
    from rft.config.checks import check_model_dir

    d = ctx.cfg.distillation
    if not d.enabled:
        return
    key = "distillation.teacher_model.model_path"
    if not d.teacher_model.model_path:
        raise ConfigError(f"distillation.enabled=true needs {key}: the teacher's model folder (a causal LM with the "
                          "student's tokenizer)")
    if not ctx.check_paths:
        return
    check_model_dir(key, d.teacher_model.model_path, ctx)
    student = ctx.cfg.actor_rollout_ref.model.path
    if not ctx.check_model_path or not (Path(student).expanduser() / "config.json").is_file():
        return  # a later stage's student is written by the stage before: the trainer asks before loading
    problem = teacher_problem(d.teacher_model.model_path, student, ctx.cfg.data.tokenizer)
    if problem:
        raise ConfigError(f"{key}={d.teacher_model.model_path!r} {problem}")

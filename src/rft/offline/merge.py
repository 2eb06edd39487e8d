"""`rft merge`: a training checkpoint to a Hugging Face folder (verl's model merger).

A checkpoint holds only what was trained (`policy.safetensors`: every weight, or the LoRA adapter; `policy_dcp/` when
several processes wrote it), so the model is rebuilt as the run built it, from the run's `config.yaml` (beside
`checkpoints/`): the starting model folder, the LoRA settings. The weights are loaded into it
(`load_policy_weights`: a DCP folder is read into the one-process model) and exported with the LoRA adapter merged
(`export_hf`, atomic), with the tokenizer. RL runs (`rft train`), SFT runs (`rft sft`, SFT stages), DPO runs (`rft dpo`, DPO stages) and reward-model runs (`rft rm`: a sequence classifier) alike.

What the folder was merged from (`inputs_of`: the checkpoint, the config, the starting model) is recorded in it,
`rft_merge.json` (`rft.offline.record`), so the same command again says OUT is complete and writes nothing, and a
merge of other inputs into it is refused without --overwrite (`check_earlier_output`), as is an OUT that holds a
model no rft merge recorded (the run's own model/, a model of yours).
"""

from __future__ import annotations

import json
from pathlib import Path

from rft.errors import CheckpointError, RftError

RECORD = "rft_merge.json"
"""The file in a merged folder that records what it was merged from."""


def checkpoint_folder(path: str | Path) -> Path:
    """The global_step_N folder `path` names: itself, or the newest of a checkpoints/ folder or of a run folder."""
    from rft.trainer.checkpoint import CheckpointManager

    path = Path(path).expanduser()
    if not path.exists():
        raise RftError(f"{str(path)!r} does not exist{_beside(path)}; rft merge takes a run folder, its checkpoints/ "
                       "or one global_step_N folder")
    if (path / "trainer_state.json").is_file():
        return path
    for root in (path, path / "checkpoints"):
        latest = CheckpointManager(root).latest() if root.is_dir() else None
        if latest is not None:
            return latest
    raise RftError(f"{str(path)!r} is not a checkpoint (global_step_N with trainer_state.json), nor a checkpoints/ "
                   f"or run folder holding one; {_no_checkpoint_hint(path)}")


def _beside(path: Path) -> str:
    """", did you mean 'x'? (folder holds: ...)" for a missing path whose folder exists, else ""."""
    from rft.config.suggest import did_you_mean

    parent = path.parent
    if not parent.is_dir():
        return ""
    names = sorted(p.name for p in parent.iterdir() if p.is_dir() and not p.name.startswith("."))
    hint = did_you_mean(path.name, names)
    return f" ({hint})" if hint else ""


def _no_checkpoint_hint(path: Path) -> str:
    """What to do instead, for a folder without a checkpoint: runs write checkpoints only when asked (rft train, sft
    and dpo alike), and a run's `model/` (its final export) or the folder itself may already be the Hugging Face
    model the user wants."""
    why = "runs write checkpoints only with trainer.save_freq set (rft train, sft and dpo: none by default)"
    for model, what in ((path, ""), (path / "model", " (the run's final export)")):
        if (model / "config.json").is_file() and any(model.glob("*.safetensors")):
            return f"{why}; {str(model)!r} is already a Hugging Face model{what}: nothing to merge, use it as it is"
    return f"{why}; rerun with trainer.save_freq=N to merge a step's weights"


def _load_dcp(folder: Path, model) -> None:
    """The trainable weights of a DCP folder (several processes wrote it) into the one-process `model`, by name:
    DCP reads exactly the tensors asked for and names any the folder lacks (LoRA settings that differ)."""
    import torch
    import torch.distributed.checkpoint as dcp

    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    state = {"model": {n: torch.empty_like(p.detach()) for n, p in params.items()}}
    dcp.load(state, checkpoint_id=str(folder))
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(state["model"][name])


def inputs_of(folder: Path, config: Path, model: str) -> dict[str, str]:
    """The record of a merge (`rft.offline.record`): the checkpoint folder, the config and the model folder the run
    started from, resolved, and their contents."""
    from rft.offline.record import CONTENTS, file_digest, folder_digest, resolved

    return {"the checkpoint": resolved(folder), "the checkpoint" + CONTENTS: folder_digest(folder),
            "the config": resolved(config), "the config" + CONTENTS: file_digest(config),
            "the starting model": resolved(model), "the starting model" + CONTENTS: folder_digest(model)}


def check_earlier_output(out: Path, inputs: dict[str, str], overwrite: bool) -> bool:
    """Whether the folder `out` already holds the merge of `inputs` (then said in one line); a merge of other
    inputs, or a model no rft merge recorded, is refused (RftError) naming what differs, unless `overwrite`."""
    from rft.offline.record import changes

    if not out.is_dir() or not any(out.iterdir()):
        return False
    try:
        recorded = json.loads((out / RECORD).read_text())
    except (OSError, ValueError):
        recorded = None
    changed = changes(recorded, inputs) if isinstance(recorded, dict) else None
    if changed == []:
        print(f"rft merge: {str(out)!r} already holds this merge of {inputs['the checkpoint']} (the same checkpoint, "
              "config and starting model): nothing written (remove it to merge again)", flush=True)
        return True
    if overwrite:
        return False
    what = (f"a merge of other inputs ({'; '.join(changed)})" if changed is not None else
            "a model no rft merge recorded (a run's own model/, a model of yours, or an older rft's merge)")
    raise RftError(f"rft merge: the output {str(out)!r} holds {what}, which merging would replace; name another "
                   "folder, remove it, or pass --overwrite to replace it")


def merge_checkpoint(checkpoint: str | Path, out: str | Path, config: str | Path | None = None,
                     overwrite: bool = False) -> Path:
    import torch

    from rft.config.dpo_schema import DPOConfig
    from rft.config.load import merge_layers, read_yaml
    from rft.config.rm_schema import RMConfig
    from rft.config.schema import RFTConfig
    from rft.config.sft_schema import SFTConfig
    from rft.fsutil import output_problem, sole_writer
    from rft.models.hub import resolve_model
    from rft.models.load import export_hf, load_tokenizer, load_trainable_model
    from rft.trainer.checkpoint import POLICY_DCP, damage, load_policy_weights

    problem = output_problem(out, folder=True)
    if problem:
        raise RftError(f"rft merge: the output {problem}")
    folder = checkpoint_folder(checkpoint)
    run = folder.parent.parent
    config = Path(config) if config else run / "config.yaml"
    if not config.is_file():
        raise RftError(f"rft merge rebuilds the model from the run's config.yaml, and {str(config)!r} does not exist: "
                       "give --config with the config the run was trained with")
    why = damage(folder)
    if why is not None:
        raise CheckpointError(f"checkpoint {folder} is damaged ({why}); merge another one (global_step_N)")
    raw = read_yaml(config)
    reward_head = False
    if "actor_rollout_ref" in raw:
        cfg = merge_layers(RFTConfig, [raw])
        model_cfg, key = cfg.actor_rollout_ref.model, "actor_rollout_ref.model"
        path, tokenizer_path = model_cfg.path, cfg.data.tokenizer or model_cfg.path
    elif "model" in raw and "partial_pretrain" in raw.model:
        # an rft dpo config is the SFT sections plus the preference loss's algorithm section, an rft rm config
        # the same sections with the reward model's loss options
        reward_head = "center_rewards_coefficient" in (raw.get("algorithm") or {})
        cfg = merge_layers(RMConfig if reward_head else DPOConfig if "algorithm" in raw else SFTConfig, [raw])
        model_cfg, key = cfg.model, "model"
        path, tokenizer_path = model_cfg.partial_pretrain, model_cfg.partial_pretrain
    else:
        raise RftError(f"{str(config)!r} is neither an rft train nor an rft sft / dpo config (no actor_rollout_ref, "
                       "no model.partial_pretrain)")
    # a config naming a Hugging Face Hub id (a run records the folder it resolved to): its folder in the local cache
    named = path
    path = resolve_model("actor_rollout_ref.model.path" if key == "actor_rollout_ref.model" else
                         "model.partial_pretrain", path)
    tokenizer_path = path if tokenizer_path == named else resolve_model("data.tokenizer", tokenizer_path, True)
    if not path or not (Path(path).expanduser() / "config.json").is_file():
        raise RftError(f"{str(config)!r}: the run started from {path!r}, which is not a Hugging Face model folder "
                       "any more; rft merge needs it to rebuild the model (give --config with a path that is)")
    for used, what in ((path, "started from"), (tokenizer_path, "reads its tokenizer from")):
        if Path(out).expanduser().resolve() == Path(used).expanduser().resolve():  # it replaced it without a word
            raise RftError(f"rft merge: the output {str(out)!r} is the model folder the run {what} ({config}), "
                           "which its resume, and every merge of its checkpoints, rebuild the model from; name a new "
                           "folder")
    with sole_writer(Path(out).expanduser(), "rft merge"):  # a second merge into OUT at once: refused
        inputs = inputs_of(folder, config, path)
        if check_earlier_output(Path(out).expanduser(), inputs, overwrite):
            return Path(out)
        tokenizer = load_tokenizer(tokenizer_path, model_cfg.trust_remote_code)
        model = load_trainable_model(path, model_cfg, torch.float32, torch.device("cpu"), key=key,
                                     reward_head=reward_head, tokenizer=tokenizer if reward_head else None)
        try:
            if (folder / POLICY_DCP).is_dir():
                _load_dcp(folder / POLICY_DCP, model)
            else:
                load_policy_weights(folder, model)
        except FileNotFoundError:
            if folder.exists():
                raise
            # a live run keeping trainer.max_ckpt_to_keep removed it after its next save
            raise CheckpointError(f"checkpoint {folder} was removed while rft merge read it (the run in {run} "
                                  "replaced it with a newer one, as trainer.max_ckpt_to_keep has it); run the same "
                                  "command again, or merge once the run has finished") from None
        except (ValueError, RuntimeError, KeyError) as e:  # DCP's mismatches
            why = " ".join(str(e).split())[:200]
            raise CheckpointError(f"checkpoint {folder} does not match the model of {config} ({why}); give --config "
                                  "with the config it was trained with") from None
        out = export_hf(model, tokenizer, out, merge_in_place=True,
                        extra_files={RECORD: json.dumps(inputs, indent=1) + "\n"})
        weights = "LoRA merged" if model_cfg.lora_rank > 0 else "full weights"
        print(f"rft merge: {folder} ({weights}) -> {out}", flush=True)
        return out

"""The reward-model config (`rft rm`). verl has no reward-model trainer: the data / model / optim / trainer sections
are rft dpo's (the same preference pairs, verl's sft_trainer.yaml keys), the loss keys are TRL RewardConfig's names
(a pair's margin column, center_rewards_coefficient)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from rft.config.dpo_schema import DPODataConfig
from rft.config.schema import fld, sub
from rft.config.sft_schema import SFTModelConfig, SFTOptimConfig, SFTTrainerConfig


@dataclass
class RMDataConfig(DPODataConfig):
    val_files: Any = fld(None, "Held-out preference rows (val/accuracy: the share of pairs whose chosen response "
                         "scores higher, val/loss, val/margin); null disables validation.")
    margin_key: Optional[str] = fld(None, "Column of a pair's margin, a number (TRL's `margin`): the loss is "
                                    "-log sigmoid(r_chosen - r_rejected - margin); null: no margin (0).")


@dataclass
class RMModelConfig(SFTModelConfig):
    partial_pretrain: Optional[str] = fld(
        None, "The backbone: a causal LM folder (its LM head is dropped, a one-label score head initialised) or a "
        "reward model folder to train further; a family of the model-family matrix (required).", model="policy")


@dataclass
class RMAlgorithmConfig:
    center_rewards_coefficient: Optional[float] = fld(
        None, "TRL's center_rewards_coefficient (Eisenstein et al. 2023): adds coef * mean((r_chosen + r_rejected)^2) "
        "over the step's pairs, which keeps the scores centred on 0; null: off.")


@dataclass
class RMTrainerConfig(SFTTrainerConfig):
    project_name: str = fld("rft-rm", "Project name.")
    test_freq: int = fld(-1, "val/accuracy and val/loss every N steps and at the last; <= 0: never.")


@dataclass
class RMConfig:
    data: RMDataConfig = sub(RMDataConfig, "Preference pairs (the ones rft dpo reads).")
    model: RMModelConfig = sub(RMModelConfig, "The backbone under the score head.")
    optim: SFTOptimConfig = sub(SFTOptimConfig, "Optimizer and schedule.")
    algorithm: RMAlgorithmConfig = sub(RMAlgorithmConfig, "The Bradley-Terry loss's options.")
    trainer: RMTrainerConfig = sub(RMTrainerConfig, "The loop, logging and checkpoints.")

"""The DPO config (`rft dpo`, and `algorithm: dpo` stages). verl has no DPO trainer: the data / model / optim /
trainer sections are rft's SFT ones (verl's sft_trainer.yaml keys), the loss keys are TRL DPOConfig's names (beta,
loss_type, label_smoothing) plus Trinity-RFT's extra terms of its dpo algorithm (a KL loss and an entropy bonus)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

from rft.config.schema import CHAT_TEMPLATE_KWARGS_HELP, KL_ESTIMATOR_NAMES, LOSS_AGG_MODE_NAMES, fld, sub
from rft.config.sft_schema import VAL_MAX_SAMPLES_HELP, SFTModelConfig, SFTOptimConfig, SFTTrainerConfig

DPO_LOSS_TYPES = ("sigmoid", "ipo", "hinge", "robust")  # the names registered in rft.algorithms.PREFERENCE_LOSSES


@dataclass
class DPODataConfig:
    train_files: Any = fld(None, "Preference rows: one parquet/jsonl file or a list of them.")
    val_files: Any = fld(None, "Held-out preference rows (val/loss, val/rewards/*); null disables validation.")
    val_max_samples: int = fld(-1, VAL_MAX_SAMPLES_HELP.replace("<unit>", "pairs"))
    prompt_key: str = fld("prompt", "Column of the prompt: a string (one user message) or a chat message list. A "
                                    "row without it whose chosen and rejected are whole conversations is TRL's "
                                    "implicit prompt: the messages both begin with are the prompt.")
    chosen_key: str = fld("chosen", "Column of the preferred response: a string (the assistant's text) or a chat "
                          "message list continuing the prompt (loss on its assistant turns).")
    rejected_key: str = fld("rejected", "Column of the dispreferred response (as chosen_key).")
    system_prompt_key: Optional[str] = fld(None, "A string prompt: column holding a system message put before it "
                                           "(Trinity-RFT's format key); null: none.")
    system_prompt: Optional[str] = fld(None, "A string prompt: a system message put before it when "
                                       "system_prompt_key is null (Trinity-RFT's format key).")
    image_key: str = fld("images", "Column of a row's images (as rft train's data.image_key: docs/multimodal.md), "
                         "which the chosen and rejected responses share; needs a vision-language model.")
    apply_chat_template_kwargs: Dict[str, Any] = fld({}, CHAT_TEMPLATE_KWARGS_HELP)
    train_batch_size: int = fld(64, "Preference pairs per optimizer step (global).")
    micro_batch_size_per_gpu: int = fld(8, "Pairs per forward/backward pass (2 rows each; gradient accumulation, "
                                        "performance only).")
    max_length: int = fld(1024, "Maximum tokens of the prompt plus the longer of its two responses.")
    truncation: str = fld("error", "Pairs over max_length: error (one message for all of them), cut the prompt's "
                          "start (left) or the responses' ends (right). A pair they cannot fit is dropped, with a note "
                          "counting them (right: no token of a response within max_length; left: a response alone "
                          "reaches it); none left is an error.", choices=("error", "left", "right"))


@dataclass
class DPOAlgorithmConfig:
    loss_type: str = fld(
        "sigmoid", "TRL's loss_type: sigmoid (DPO, -log sigmoid(beta * logits); with label_smoothing cDPO), ipo "
        "((logits - 1/(2 beta))^2 on per-token mean log-probs), hinge (max(0, 1 - beta * logits)), robust (robust "
        "DPO); logits = (pi_chosen - pi_rejected) - (ref_chosen - ref_rejected), sums of the responses' token "
        "log-probs (docs/algorithms.md).", choices=DPO_LOSS_TYPES)
    beta: float = fld(0.1, "TRL's beta (> 0): the strength of the implicit KL to the reference; ipo's tau.")
    label_smoothing: float = fld(0.0, "TRL's label_smoothing, in [0, 0.5): the probability a pair's labels are "
                                 "flipped (sigmoid: conservative DPO; robust: robust DPO); other loss types: 0.")
    use_kl_loss: bool = fld(False, "Add kl_loss_coef * KL(policy || reference) over every response token "
                            "(Trinity-RFT's dpo adds its kl_loss_fn).")
    kl_loss_type: str = fld("k2", "KL estimator of the KL loss (names as actor_rollout_ref.actor.kl_loss_type, "
                            "except full).", choices=tuple(k for k in KL_ESTIMATOR_NAMES if k != "full"))
    kl_loss_coef: float = fld(0.001, "Coefficient of the KL loss.")
    entropy_coeff: float = fld(0.0, "Entropy bonus: loss -= entropy_coeff * entropy (Trinity-RFT's entropy_loss_fn).")
    loss_agg_mode: str = fld("token-mean", "How the KL and entropy terms are reduced over the step's response tokens "
                             "(names as actor_rollout_ref.actor.loss_agg_mode); the preference loss is the mean "
                             "over the step's pairs.", choices=LOSS_AGG_MODE_NAMES)


@dataclass
class DPOTrainerConfig(SFTTrainerConfig):
    project_name: str = fld("rft-dpo", "Project name.")


@dataclass
class DPOConfig:
    data: DPODataConfig = sub(DPODataConfig, "Preference pairs.")
    model: SFTModelConfig = sub(SFTModelConfig, "The model (its starting weights are the reference: a frozen copy, "
                                "or with LoRA the model with its adapter disabled).")
    optim: SFTOptimConfig = sub(SFTOptimConfig, "Optimizer and schedule.")
    algorithm: DPOAlgorithmConfig = sub(DPOAlgorithmConfig, "The preference loss.")
    trainer: DPOTrainerConfig = sub(DPOTrainerConfig, "The loop, logging and checkpoints.")

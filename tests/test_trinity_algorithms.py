"""Every Trinity-RFT algorithm_type (its ALGORITHM_TYPE registry at 0.5.2 and 0.6.0): each one rft runs lands on
rft's estimator, loss and Trinity's default arguments, and trains 2 steps through `rft train` on a Trinity YAML;
each one rft cannot run is refused by name with its reason (docs/algorithms.md, "Trinity-RFT's algorithm types")."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from cli_helpers import rft_here

from rft.config.load import ConfigError
from rft.dialects.trinity import ALGORITHMS, REFUSED_ALGORITHMS, translate

A = "actor_rollout_ref.actor"
BASE = {"project": "p", "name": "n", "model": {"model_path": "m"}}

# Trinity-RFT's ALGORITHM_TYPE names: 0.5.2 (the peer corpus's commit) and 0.6.0 (its latest release) add cpt,
# dapo, gigpo; its main branch after 0.6.0 adds m2po
TRINITY_ALGORITHM_TYPES = ("sft", "ppo", "grpo", "reinforceplusplus", "rloo", "opmd", "asymre", "dpo", "topr", "cispo",
                           "gspo", "sapo", "mix", "mix_chord", "raft", "sppo", "rec", "multi_step_grpo",
                           "on_policy_distill", "jsd", "grpo_verl", "cpt", "dapo", "gigpo", "m2po")


def _translate(algorithm: dict) -> dict:
    return translate({**BASE, "algorithm": algorithm})


def _get(tree: dict, key: str):
    for part in key.split("."):
        tree = tree[part]
    return tree


def test_every_trinity_algorithm_type_is_run_or_refused_by_name():
    assert set(TRINITY_ALGORITHM_TYPES) == set(ALGORITHMS) | set(REFUSED_ALGORITHMS)
    assert not set(ALGORITHMS) & set(REFUSED_ALGORITHMS)


# algorithm_type -> rft keys its defaults land on (Trinity's default_config and its functions' default_args)
LANDS = {
    "grpo_verl": {"algorithm.adv_estimator": "grpo", f"{A}.policy_loss.loss_mode": "vanilla",
                  "actor_rollout_ref.rollout.n": 2, f"{A}.use_kl_loss": True},
    "dapo": {"algorithm.adv_estimator": "grpo", "actor_rollout_ref.rollout.n": 16, f"{A}.use_kl_loss": False},
    "reinforceplusplus": {"algorithm.adv_estimator": "reinforce_plus_plus", f"{A}.policy_loss.loss_mode": "vanilla"},
    "rloo": {"algorithm.adv_estimator": "rloo"},
    "asymre": {"algorithm.adv_estimator": "asymre", f"{A}.policy_loss.loss_mode": "opmd", f"{A}.use_kl_loss": False,
               f"{A}.entropy_coeff": 0.0},
    "topr": {"algorithm.adv_estimator": "reinforce", f"{A}.policy_loss.loss_mode": "topr"},
    # MiniMax-M1's CISPO: the IS weight bounded above only
    "cispo": {"algorithm.adv_estimator": "grpo", f"{A}.policy_loss.loss_mode": "cispo", f"{A}.clip_ratio_low": 1.0,
              f"{A}.clip_ratio_high": 0.28},
    # Trinity's config check overwrites gspo's default_args loss_agg_mode (seq-mean-token-mean) with
    # algorithm.loss_agg_mode, token-mean when unset
    "gspo": {f"{A}.policy_loss.loss_mode": "gspo", f"{A}.clip_ratio_low": 0.0003, f"{A}.clip_ratio_high": 0.0004,
             f"{A}.loss_agg_mode": "token-mean"},
    # rft's sapo aggregates as the paper does whatever the key, which aggregates the KL loss, as Trinity's
    "sapo": {f"{A}.policy_loss.loss_mode": "sapo", f"{A}.loss_agg_mode": "token-mean"},
    "sppo": {"algorithm.adv_estimator": "opmd", f"{A}.policy_loss.loss_mode": "sppo", f"{A}.clip_ratio_low": 0.3,
             f"{A}.clip_ratio_high": 0.3, f"{A}.use_kl_loss": False},
    "rec": {"algorithm.adv_estimator": "rec", "algorithm.norm_adv_by_std_in_grpo": False,
            f"{A}.policy_loss.loss_mode": "rec", f"{A}.loss_agg_mode": "token-mean"},
    "multi_step_grpo": {"algorithm.adv_estimator": "grpo", "actor_rollout_ref.rollout.n": 8},
    "raft": {"algorithm.adv_estimator": "raft", f"{A}.policy_loss.loss_mode": "sft", "actor_rollout_ref.rollout.n": 1,
             f"{A}.use_kl_loss": False, f"{A}.entropy_coeff": 0.0},
}


@pytest.mark.parametrize("kind", sorted(LANDS))
def test_an_algorithm_types_defaults_land_on_rfts_keys(kind):
    out = _translate({"algorithm_type": kind})
    assert {key: _get(out, key) for key in LANDS[kind]} == LANDS[kind]


ARGS = [
    # the corpus's rec example (examples/rec_gsm8k): REC-OneSide-NoIS
    ({"algorithm_type": "rec", "advantage_fn_args": {"std_normalize": False},
      "policy_loss_fn_args": {"clip_mode": "one-side", "epsilon_high": 0.2, "epsilon_low": 0.2, "weight": "none"}},
     {f"{A}.policy_loss.rec.clip_mode": "one-side", f"{A}.clip_ratio_low": 0.2, f"{A}.policy_loss.rec.weight": "none",
      "algorithm.norm_adv_by_std_in_grpo": False}),
    ({"algorithm_type": "rec", "policy_loss_fn_args": {"clip_mode": "gspo-one-side", "epsilon_low_prime": 0.5,
                                                       "regularizer": "k2", "regularizer_coef": 0.1, "temp": 2.0}},
     {f"{A}.loss_agg_mode": "seq-mean-token-mean", f"{A}.policy_loss.rec.clip_ratio_low_prime": 0.5,
      f"{A}.policy_loss.rec.regularizer": "k2", f"{A}.policy_loss.rec.regularizer_coef": 0.1,
      f"{A}.policy_loss.rec.temp": 2.0}),
    ({"algorithm_type": "grpo", "policy_loss_fn": "m2po", "policy_loss_fn_args": {"m2_threshold": 0.02,
                                                                                 "log_ratio_clip": 5.0}},
     {f"{A}.policy_loss.loss_mode": "m2po", f"{A}.policy_loss.m2_threshold": 0.02,
      f"{A}.policy_loss.log_ratio_clip": 5.0}),
    ({"algorithm_type": "sppo", "policy_loss_fn_args": {"epsilon": 0.1}},  # examples/sppo_gsm8k
     {f"{A}.clip_ratio_low": 0.1, f"{A}.clip_ratio_high": 0.1}),
    ({"algorithm_type": "topr", "policy_loss_fn_args": {"advantage_threshold": 0.5}},
     {f"{A}.policy_loss.topr_advantage_threshold": 0.5}),
    ({"algorithm_type": "cispo", "policy_loss_fn_args": {"clip_range_high": 0.5}},
     {f"{A}.clip_ratio_low": 1.0, f"{A}.clip_ratio_high": 0.5}),
    # arguments given in part meet the loss's own parameter defaults: gspo's aggregation is then its own
    ({"algorithm_type": "gspo", "policy_loss_fn_args": {"clip_range": 0.001}},
     {f"{A}.loss_agg_mode": "seq-mean-token-mean", f"{A}.clip_ratio": 0.001}),
    ({"algorithm_type": "gspo", "loss_agg_mode": "seq-mean-token-mean"}, {f"{A}.loss_agg_mode": "seq-mean-token-mean",
                                                                          f"{A}.clip_ratio_high": 0.0004}),
    ({"algorithm_type": "gspo", "loss_agg_mode": "seq-mean-token-sum",
      "policy_loss_fn_args": {"clip_range": 0.001, "loss_agg_mode": "seq-mean-token-sum"}},
     {f"{A}.loss_agg_mode": "seq-mean-token-sum"}),
    # the corpus's frozen_lake: ppo's arguments without loss_agg_mode keep ppo's token-mean; KL coefficient 0
    ({"algorithm_type": "grpo", "policy_loss_fn_args": {"clip_range_low": 0.2, "clip_range_high": 0.28},
      "kl_loss_fn_args": {"kl_coef": 0.0}, "loss_agg_mode": "seq-mean-token-sum"},
     {f"{A}.loss_agg_mode": "token-mean", f"{A}.clip_ratio_high": 0.28}),
    ({"algorithm_type": "rec", "policy_loss_fn_args": {"clip_mode": "ring"}},  # rec's own primes: 0.4, 0.4 (its default_args' 0.6, 2: rft's defaults)
     {f"{A}.policy_loss.rec.clip_ratio_low_prime": 0.4, f"{A}.policy_loss.rec.clip_ratio_high_prime": 0.4}),
    ({"algorithm_type": "sapo", "policy_loss_fn_args": {"tau_pos": 0.5, "tau_neg": 1.5}},
     {f"{A}.tau_pos": 0.5, f"{A}.tau_neg": 1.5}),
    ({"algorithm_type": "ppo", "policy_loss_fn_args": {"clip_range": 0.2, "clip_ratio_c": 5.0}},
     {f"{A}.clip_ratio_c": 5.0}),
    # the corpus's agentscope frozenlake and email-search examples (epsilon as a string, as their YAML writes it)
    ({"algorithm_type": "multi_step_grpo",
      "advantage_fn_args": {"epsilon": "1e-6", "std_threshold": 0.0001, "enable_step_norm": True}},
     {"algorithm.std_threshold": 0.0001}),
    ({"algorithm_type": "multi_step_grpo", "advantage_fn_args": {"std_cal_level": "batch"}},
     {"algorithm.std_cal_level": "batch"}),
    ({"algorithm_type": "grpo", "advantage_fn_args": {"std_threshold": 0.0001}}, {"algorithm.std_threshold": 0.0001}),
    ({"algorithm_type": "reinforceplusplus", "advantage_fn_args": {"gamma": 0.9}}, {"algorithm.gamma": 0.9}),
    ({"algorithm_type": "opmd", "advantage_fn": "opmd_verl", "advantage_fn_args": {"tau": 0.5}},
     {"algorithm.adv_estimator": "opmd", "algorithm.tau": 0.5}),
    ({"algorithm_type": "grpo", "advantage_fn": "reinforce"}, {"algorithm.adv_estimator": "reinforce"}),
    # the corpus's examples/entropy: GRPO's advantages, then the filter with Trinity's default bound
    ({"algorithm_type": "grpo_verl", "advantage_fn": "clipb"},
     {"algorithm.adv_estimator": "grpo", "algorithm.entropy_clip.mode": "clipb", "algorithm.entropy_clip.mu": 2.5}),
    ({"algorithm_type": "grpo_verl", "advantage_fn": "clipv", "advantage_fn_args": {"max_frac": 0.001}},
     {"algorithm.entropy_clip.mode": "clipv", "algorithm.entropy_clip.mu": 8.5,
      "algorithm.entropy_clip.max_frac": 0.001}),
    ({"algorithm_type": "grpo", "policy_loss_fn": "importance_sampling"},
     {f"{A}.policy_loss.loss_mode": "importance_sampling"}),
]


@pytest.mark.parametrize("algorithm, expected", ARGS, ids=[f"{a['algorithm_type']}-{i}" for i, (a, _) in
                                                           enumerate(ARGS)])
def test_an_algorithms_arguments_land_on_rfts_keys(algorithm, expected):
    out = _translate(algorithm)
    assert {key: _get(out, key) for key in expected} == expected


def test_on_policy_distill_is_rfts_distillation_with_the_first_auxiliary_model_as_teacher(caplog):
    """Trinity's on_policy_distill: advantage kl_coef (log q - log p) of the sampled token, no task reward, its
    teacher explorer.auxiliary_models[0]: rft's distillation with k1 as a per-token advantage (its defaults:
    kl_coef 1, repeat_times 8, no KL or entropy term)."""
    cfg = {**BASE, "algorithm": {"algorithm_type": "on_policy_distill", "advantage_fn_args": {"kl_coef": 0.5}},
           "explorer": {"auxiliary_models": [{"model_path": "teacher", "engine_num": 1, "tensor_parallel_size": 2,
                                              "enable_thinking": False}]}}
    with caplog.at_level("WARNING", logger="rft"):
        out = translate(cfg, "t.yaml")
    assert out["distillation"] == {"enabled": True, "teacher_model": {"model_path": "teacher"},
                                   "distillation_loss": {"loss_mode": "k1", "use_policy_gradient": True,
                                                         "in_reward": False, "use_task_rewards": False,
                                                         "distillation_loss_coef": 0.5}}
    assert _get(out, "actor_rollout_ref.rollout.n") == 8 and _get(out, f"{A}.use_kl_loss") is False
    assert _get(out, f"{A}.entropy_coeff") == 0.0 and "auxiliary_models" not in out.get("workflow", {})
    assert "explorer.auxiliary_models[0].tensor_parallel_size=2 changes nothing in rft: the teacher scores" \
        in caplog.text
    assert "explorer.auxiliary_models[0].enable_thinking=False changes nothing in rft: the teacher scores" in caplog.text
    assert _get(translate({**cfg, "algorithm": {"algorithm_type": "on_policy_distill"}}),
                "distillation.distillation_loss.distillation_loss_coef") == 1.0  # Trinity's default kl_coef
    for models, needle in (([], "explorer.auxiliary_models: on-policy distillation reads its teacher from "
                                "explorer.auxiliary_models[0].model_path; add it"),
                           ([{"model_path": "a"}, {"model_path": "b"}],
                            "explorer.auxiliary_models[1]: Trinity-RFT's distillation workflows read one teacher")):
        with pytest.raises(ConfigError) as err:
            translate({**cfg, "explorer": {"auxiliary_models": models}}, "t.yaml")
        assert needle in str(err.value), str(err.value)


@pytest.mark.parametrize("p, q, beta, expected", [
    # Trinity's JSDAdvantage by hand: m = beta q + (1 - beta) p of the sampled token, D = beta log(q / m) +
    # (1 - beta) log(p / m); its end points log p - log q (beta 0) and log q - log p (beta 1)
    (0.5, 0.25, 0.5, 0.5 * math.log(0.25 / 0.375) + 0.5 * math.log(0.5 / 0.375)),
    (0.5, 0.25, 0.25, 0.25 * math.log(0.25 / 0.4375) + 0.75 * math.log(0.5 / 0.4375)),
    (0.5, 0.25, 0.0, math.log(0.5) - math.log(0.25)),
    (0.5, 0.25, 1.0, math.log(0.25) - math.log(0.5)),
    (0.3, 0.3, 0.5, 0.0),
])
def test_token_jsd_is_trinitys_jsd_advantage_by_hand(p, q, beta, expected):
    import torch

    from rft.algorithms.distill import distill_divergence

    got = distill_divergence("token_jsd", torch.tensor([[math.log(p)]]), torch.tensor([[math.log(q)]]), beta=beta)
    assert float(got) == pytest.approx(expected, abs=1e-6)


def test_jsd_is_rfts_distillation_with_the_sampled_tokens_jsd():
    cfg = {**BASE, "algorithm": {"algorithm_type": "jsd", "advantage_fn_args": {"kl_coef": 2.0, "lambda_coef": 0.3,
                                                                                "chunk_size": 1024}},
           "explorer": {"auxiliary_models": [{"model_path": "teacher"}]}}
    loss = translate(cfg)["distillation"]["distillation_loss"]
    assert (loss["loss_mode"], loss["jsd_beta"], loss["distillation_loss_coef"], loss["use_task_rewards"]) == (
        "token_jsd", 0.3, 2.0, False)
    loss = translate({**cfg, "algorithm": {"algorithm_type": "jsd"}})["distillation"]["distillation_loss"]
    assert (loss["jsd_beta"], loss["distillation_loss_coef"]) == (0.5, 1.0)  # Trinity's defaults
    with pytest.raises(ConfigError) as err:
        translate({**cfg, "algorithm": {"algorithm_type": "jsd", "advantage_fn_args": {"temperature": 2.0}}}, "t.yaml")
    assert "algorithm.advantage_fn_args.temperature=2.0: Trinity-RFT divides both log-probs by it" in str(err.value)


REFUSED = [
    ({"algorithm_type": "gigpo"}, "algorithm.algorithm_type='gigpo': GiGPO's step-level groups are the anchor "
                                  "states"),
    ({"algorithm_type": "cpt"}, "algorithm.algorithm_type='cpt': continued pre-training trains on plain text"),
    ({"algorithm_type": "m2po"}, "algorithm.algorithm_type='m2po': Trinity-RFT's m2po algorithm type came after its "
                                 "0.6.0 release, whose defaults rft has not read; its loss is rft's: set algorithm_type: "
                                 "grpo with policy_loss_fn: m2po"),
    ({"algorithm_type": "rec", "advantage_fn_args": {"drop": "balance"}},
     "algorithm.advantage_fn_args.drop='balance': REC's balance drop"),
    ({"algorithm_type": "grpo", "advantage_fn_args": {"rank_penalty": 0.1}},
     "algorithm.advantage_fn_args.rank_penalty=0.1: rft has no rank-based reward correction"),
    ({"algorithm_type": "grpo", "advantage_fn_args": {"epsilon": 0.01}},
     "algorithm.advantage_fn_args.epsilon=0.01: rft's group std epsilon is 1e-6"),
    ({"algorithm_type": "cispo", "policy_loss_fn_args": {"enable_mask_clip": True}},
     "algorithm.policy_loss_fn_args.enable_mask_clip=True: rft's cispo is the paper's loss"),
    ({"algorithm_type": "gspo", "policy_loss_fn_args": {"clip_range": 0.001, "loss_agg_mode": "seq-mean-token-mean"}},
     "algorithm.policy_loss_fn_args.loss_agg_mode='seq-mean-token-mean': Trinity-RFT replaces it with "
     "algorithm.loss_agg_mode ('token-mean'); set algorithm.loss_agg_mode: seq-mean-token-mean instead"),
    ({"algorithm_type": "ppo", "policy_loss_fn_args": {"clip_ratio_c": 5.0}},
     "algorithm.policy_loss_fn_args: sets no clip_range_low or clip_range_high (nor clip_range)"),
    ({"algorithm_type": "ppo", "policy_loss_fn_args": {"enable_sequence_masking": True}},
     "algorithm.policy_loss_fn_args.enable_sequence_masking=True: rft's ppo loss has no enable_sequence_masking"),
    ({"algorithm_type": "raft", "advantage_fn": "grpo"}, "algorithm.advantage_fn='grpo': raft's SFT loss reads no "
                                                         "advantage"),
    ({"algorithm_type": "topr", "policy_loss_fn_args": {"bogus": 1}}, "algorithm.policy_loss_fn_args.bogus"),
]


@pytest.mark.parametrize("algorithm, needle", REFUSED, ids=[r[1][:45] for r in REFUSED])
def test_what_rft_cannot_run_is_refused_by_name(algorithm, needle):
    with pytest.raises(ConfigError) as err:
        translate({**BASE, "algorithm": algorithm}, "t.yaml")
    assert needle in str(err.value), str(err.value)


# ---------------------------------------------------------------------------------- 2 steps through rft train


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    from rft.tasks import write_arithmetic

    root = tmp_path_factory.mktemp("trinity_algorithms")
    rft_here("init-model", "--preset", "tiny", "m", cwd=root)
    write_arithmetic(root / "tasks", n_train=16, n_val=4, seed=0)
    (root / "reward.py").write_text(REWARD)
    return root


# a shaped reward: an untrained model's samples differ in it, so the groups have a best response and advantages
REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return sum(c.isdigit() for c in solution_str) / (1 + len(solution_str))
"""


def _yaml(work: Path, folder: Path, algorithm: dict, actor: dict | None = None, teacher: Path | None = None) -> Path:
    """Trinity's YAML; `actor`: rft (verl) actor keys in its trainer_config, for options Trinity has no name for;
    `teacher`: on_policy_distill's (explorer.auxiliary_models[0])."""
    config = {
        "project": "algos", "name": "run", "mode": "both", "checkpoint_root_dir": str(folder / "ckpt"),
        "algorithm": {"repeat_times": 4, "optimizer": {"lr": 1e-3}, **algorithm},
        "model": {"model_path": str(work / "m"), "max_prompt_tokens": 32, "max_response_tokens": 4},
        "buffer": {"batch_size": 2, "total_steps": 2, "explorer_input": {"taskset": {
            "name": "t", "path": str(work / "tasks"), "split": "train", "format": {"prompt_key": "prompt"},
            "rollout_args": {"temperature": 1.0}}}},
        "explorer": {"eval_interval": 100, **({"auxiliary_models": [{"model_path": str(teacher)}]} if teacher else {})},
        "trainer": {"save_interval": 100, "trainer_config": {"custom_reward_function": {
            "path": str(work / "reward.py"), "name": "compute_score"},
            **({"actor_rollout_ref": {"actor": actor}} if actor else {})}},
    }
    path = folder / "t.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


TRAINED = {kind: {"algorithm_type": kind} for kind in (
    "grpo", "grpo_verl", "dapo", "opmd", "ppo", "reinforceplusplus", "rloo", "asymre", "topr", "cispo", "gspo", "sapo", "sppo", "rec",
    "multi_step_grpo", "raft", "on_policy_distill", "jsd")}
# the estimators' and losses' options this branch added, each through the CLI too (their hand-computed tests:
# tests/test_advantages.py, tests/test_policy_losses.py)
TRAINED.update({
    "grpo-std_threshold-batch_std": {"algorithm_type": "grpo", "advantage_fn_args": {"std_threshold": 0.001,
                                                                                     "std_cal_level": "batch"}},
    "grpo-importance_sampling": {"algorithm_type": "grpo", "policy_loss_fn": "importance_sampling"},
    # M2PO's mask (its hand-computed test: tests/test_policy_losses.py), Trinity's args under their names
    "grpo-m2po": {"algorithm_type": "grpo", "policy_loss_fn": "m2po",
                  "policy_loss_fn_args": {"m2_threshold": 0.01, "log_ratio_clip": 10.0}},
    "rec-ring-is-k2-std": {"algorithm_type": "rec", "advantage_fn_args": {"std_normalize": True},
                           "policy_loss_fn_args": {"clip_mode": "ring", "weight": "importance_sampling",
                                                   "regularizer": "k2", "regularizer_coef": 0.1}},
    "rec-gspo-one-side-advantage-forward-kl": {"algorithm_type": "rec", "policy_loss_fn_args": {
        "clip_mode": "gspo-one-side", "weight": "advantage", "temp": 2.0, "regularizer": "forward-kl",
        "regularizer_coef": 0.1}},
    # the entropy filters (their hand-computed tests: tests/test_entropy_clip.py), with bounds low enough to drop
    # tokens of the tiny model's samples
    "grpo_verl-clipb": {"algorithm_type": "grpo_verl", "advantage_fn": "clipb", "advantage_fn_args": {"mu": 1.0}},
    "grpo_verl-clipv": {"algorithm_type": "grpo_verl", "advantage_fn": "clipv",
                        "advantage_fn_args": {"mu": 1.0, "max_frac": 0.05}},
    # the TOPR paper's sequence ratio (Trinity's topr takes the token's)
    "topr-sequence": {"algorithm_type": "topr", "actor": {"policy_loss": {"topr_ratio_level": "sequence"}}},
})


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(TRAINED))
def test_each_algorithm_type_trains_two_steps_through_rft_train(work, tmp_path, kind):
    """Trinity's YAML with the algorithm type and its defaults (repeat_times 4 for the groups): 2 steps, a finite
    policy loss logged at each, the exported model moved from the starting one."""
    algorithm = dict(TRAINED[kind])
    teacher = None
    if kind in ("on_policy_distill", "jsd"):  # a teacher of other weights (the same tokenizer): the student moves to it
        from rft.models.tiny import init_model

        teacher = tmp_path / "teacher"
        init_model("tiny", teacher, seed=1)
    path = _yaml(work, tmp_path, algorithm, algorithm.pop("actor", None), teacher)  # raft: the best of 4, the others out
    rft_here("train", str(path), cwd=tmp_path)
    out = tmp_path / "ckpt" / "algos" / "run"
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2]
    for s in steps:
        assert math.isfinite(s["actor/pg_loss"]), s
    if kind == "raft":
        assert all(0 < s["critic/kept_rows"] < 1 for s in steps), steps
    if "clip" in kind:  # the filter dropped tokens of negative advantage from the loss
        assert any(s["actor/entropy_clip/frac_clipped_neg"] > 0 for s in steps), steps
        assert all(s["actor/entropy_clip/frac_clipped_pos"] == 0 for s in steps), steps
    if "std_threshold" in kind:  # the rows of groups over the threshold train
        assert all(0 < s["critic/kept_rows"] <= 1 for s in steps), steps
    before, after = _weights(work / "m"), _weights(out / "model")
    moved = [name for name in before if not (before[name] == after[name]).all()]
    assert moved, "no parameter moved"

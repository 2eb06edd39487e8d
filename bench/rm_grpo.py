"""The reward-model path of issue 65: GRPO rewarded by a reward model `rft rm` trained, from the demo's SFT model.

    python bench/rm_grpo.py [--seed 0] [--output DIR] [--sft-from DEMO_DIR] [--rm-steps 1500] [--rm-pairs 8000]
                            [--rm-lr 5e-4] [--rejected mistakes|carry|every|mix] [--rm-from RM_DIR] [--rm-only]
                            [--grpo-steps 300] [--kl-coef 0] [--no-write]

1. The demo's SFT model: `rft demo --seed S` into DIR/demo, or the finished demo folder `--sft-from` (its
   sft/model and data/).
2. Preference pairs of the arithmetic task (`rft.tasks.arithmetic.preference_rows`: each addition's answer over a
   wrong one; `--rejected mistakes`, the default, draws it from a policy's kinds of mistakes; `carry` has only the
   units carry wrong, whose reward model GRPO games; `every`: each training question with every kind of mistake;
   `mix`: half carry, half mistakes): `--rm-pairs` training questions' pairs of questions drawn apart from the
   demo's held-out questions, and the held-out pairs of those held-out questions, so neither the reward model nor
   GRPO has seen the questions it is measured on.
3. `rft rm` (examples/arithmetic_rm.yaml) on them from the SFT model: its held-out pairwise accuracy (`--rm-from`: a
   finished `rft rm` folder instead; `--rm-only`: stop here).
4. GRPO as the demo's GRPO stage, rewarded by that reward model alone (reward_model.enable, rule_weight 0: verl's
   default, the rule never runs), from the SFT model; `--kl-coef`: with a KL loss to the SFT model.
5. Held-out greedy accuracy (the exact answer, the demo's measure) of the SFT model and of the GRPO model.

Prints one line per figure and appends them to bench/RESULTS.md (unless --no-write). The bar (issue 65): the reward
model ranks >= 90% of the held-out plain pairs right (the carry's, what `rft data arithmetic --preferences` writes;
its accuracy on the held-out file, one mistake of any kind per question for mix / mistakes / every, and by kind of
mistake are printed beside it), and GRPO with it lifts held-out accuracy by >= 10 points. The defaults are the
recipe that meets both for seed 0 (bench/RESULTS.md, 2026-11-28 17:15): half the pairs of the carry, half of any
mistake, 2000 steps at lr 1e-3. The mean
reward-model score of the GRPO stage's samples (critic/score/mean) is printed beside the accuracy, and the wrong
held-out greedy answers the reward model scores at or above the right answer, before and after GRPO: a score that
rises while the accuracy falls is a policy gaming the reward model (bench/RESULTS.md, 2026-11-28: it does).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "RESULTS.md"
RM_BAR, LIFT_BAR = 0.90, 0.10


def rft(*args: str) -> None:
    """`python -m rft ARGS` in a child process (the machine's threads), its output passed through."""
    subprocess.run([sys.executable, "-m", "rft", *args], check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def every_mistake(rows: list[dict]) -> list[dict]:
    """One pair per kind of `MISTAKES` for each addition of `rows` (a kind whose answer is the sum itself, `operation`
    where an operand is 0, is left out): the score sees every slip against the same right answer."""
    import random

    from rft.tasks.arithmetic import MISTAKES, preference_rows

    pairs = []
    for pair in preference_rows(rows, "mistakes"):
        a, b = (int(x) for x in pair["extra_info"]["question"][:-1].split("+"))
        rng = random.Random(f"every:{pair['extra_info']['question']}")
        for kind, slip in sorted(MISTAKES.items()):
            wrong = slip(a, b, rng)
            if wrong != a + b:
                pairs.append({**pair, "rejected": str(wrong),
                              "extra_info": {**pair["extra_info"], "index": len(pairs), "mistake": kind}})
    return pairs


def preference_files(demo: Path, out: Path, n_pairs: int, seed: int, rejected: str) -> dict[str, Path]:
    """Training pairs of `n_pairs` questions none of which is held out in the demo (`every`: each question with every
    kind of mistake; `mix`: half the questions' pairs of the carry, half of the mistakes), held-out pairs of its
    held-out questions (of the carry for `carry`, else of the mistakes)."""
    from rft.data.io import read_rows, write_parquet
    from rft.tasks.arithmetic import arithmetic_rows, preference_rows

    val = read_rows(demo / "data" / "val.parquet")
    held_out = {row["extra_info"]["question"] for row in val}
    train = arithmetic_rows(n_pairs, seed + 1000, "train", exclude=held_out)
    if rejected == "every":
        train_pairs = every_mistake(train)
    elif rejected == "mix":
        train_pairs = preference_rows(train[::2], "carry") + preference_rows(train[1::2], "mistakes")
    else:
        train_pairs = preference_rows(train, rejected)
    val_kind = "carry" if rejected == "carry" else "mistakes"
    return {"train": write_parquet(train_pairs, out / "preference_train.parquet"),
            "val": write_parquet(preference_rows(val, val_kind), out / "preference_val.parquet")}


def prompts_of(rows: list[dict], tok) -> list[str]:
    return [tok.apply_chat_template([dict(m) for m in r["prompt"]], tokenize=False, add_generation_prompt=True)
            for r in rows]


def rm_scorer(reward_model: Path, eos: str):
    """scores(prompts, replies): `reward_model`'s score of each prompt + reply + EOS (what rft train scores)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    rm = AutoModelForSequenceClassification.from_pretrained(reward_model).eval()
    rm_tok = AutoTokenizer.from_pretrained(reward_model, padding_side="right")

    def scores(prompts: list[str], replies: list[str]):
        texts = [p + r + eos for p, r in zip(prompts, replies)]
        with torch.no_grad():
            return rm(**rm_tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)).logits[:, 0]

    return scores


def accuracy_by_kind(policy: Path, reward_model: Path, val: Path) -> dict[str, float]:
    """Held-out pairwise accuracy of `reward_model` on the held-out questions' pairs of each kind of mistake."""
    from transformers import AutoTokenizer

    from rft.data.io import read_rows

    tok = AutoTokenizer.from_pretrained(policy)
    pairs = every_mistake(read_rows(val))
    prompts = prompts_of(pairs, tok)
    scores = rm_scorer(reward_model, tok.eos_token)
    right = scores(prompts, [p["chosen"] for p in pairs]) > scores(prompts, [p["rejected"] for p in pairs])
    kinds: dict[str, list[bool]] = {}
    for pair, ok in zip(pairs, right.tolist()):
        kinds.setdefault(pair["extra_info"]["mistake"], []).append(ok)
    return {kind: sum(oks) / len(oks) for kind, oks in sorted(kinds.items())}


def gamed_answers(policy: Path, reward_model: Path, val: Path) -> tuple[int, int]:
    """(wrong greedy answers of `policy` on the held-out prompts that `reward_model` scores at or above the right
    answer, wrong greedy answers): how far the policy found the reward model's blind spots."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rft.data.io import read_rows

    rows = read_rows(val)
    tok = AutoTokenizer.from_pretrained(policy, padding_side="left")
    prompts = prompts_of(rows, tok)
    truth = [r["reward_model"]["ground_truth"] for r in rows]
    model = AutoModelForCausalLM.from_pretrained(policy).eval()
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=5, do_sample=False, pad_token_id=tok.pad_token_id)
    answers = [tok.decode(o[enc["input_ids"].shape[1]:], skip_special_tokens=True).strip() for o in out]
    scores = rm_scorer(reward_model, tok.eos_token)
    got, right = scores(prompts, answers), scores(prompts, truth)
    wrong = [i for i, (a, t) in enumerate(zip(answers, truth)) if a != t]
    return sum(bool(got[i] >= right[i]) for i in wrong), len(wrong)


def sft_on_chosen(demo: Path, pairs: Path, out: Path, seed: int) -> Path:
    """The demo's SFT stage from its copying warm-up model, on the chosen answers of `pairs` (one per question) in
    place of the demonstrations: a backbone that knows what the pairs prefer. Returns its model folder."""
    from rft.data.io import read_rows, write_parquet
    from rft.orchestration.demo import SFT_BATCH, SFT_LR, SFT_STEPS, SFT_WARMUP

    rows = list({row["extra_info"]["question"]: row for row in read_rows(pairs)}.values())
    chosen = write_parquet(rows, out / "chosen.parquet")
    rft("sft", f"model.partial_pretrain={demo / 'copy' / 'model'}", f"data.train_files={chosen}",
        "data.response_key=chosen", f"data.train_batch_size={SFT_BATCH}", f"data.micro_batch_size_per_gpu={SFT_BATCH}",
        "data.max_length=32", f"optim.lr={SFT_LR}", "optim.weight_decay=0.0", f"optim.warmup_steps_ratio={SFT_WARMUP}",
        f"trainer.total_training_steps={SFT_STEPS}", "trainer.save_freq=-1", "trainer.logger=[]",
        f"trainer.seed={seed}", f"trainer.default_local_dir={out}")
    return out / "model"


def last_metrics(run: Path) -> dict:
    return json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", type=Path, default=Path("runs/bench-rm-grpo"))
    p.add_argument("--sft-from", type=Path, help="a finished `rft demo` folder (its sft/model and data/)")
    p.add_argument("--rm-steps", type=int, default=2000)
    p.add_argument("--rm-pairs", type=int, default=8000)
    p.add_argument("--grpo-steps", type=int, default=300)
    p.add_argument("--rejected", choices=("carry", "mistakes", "every", "mix"), default="mix")
    p.add_argument("--rm-lr", type=float, default=1e-3)
    p.add_argument("--rm-backbone", type=Path, help="the reward model's backbone (default: the SFT model)")
    p.add_argument("--sft-chosen", action="store_true",
                   help="the backbone: the demo's copying warm-up model SFT-trained on the training pairs' chosen "
                        "answers (the demo's SFT keys)")
    p.add_argument("--rm-from", type=Path, help="a finished `rft rm` folder (its model/, metrics.jsonl): no training")
    p.add_argument("--rm-only", action="store_true", help="stop after the reward model (its accuracy, no GRPO)")
    p.add_argument("--kl-coef", type=float, default=0.0,
                   help="GRPO's KL loss to the SFT model (actor.use_kl_loss, low_var_kl) at this coefficient; 0: none")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    from rft.orchestration import demo as demo_module

    out = args.output.resolve()
    demo = args.sft_from.resolve() if args.sft_from else out / "demo"
    if not args.sft_from:
        rft("demo", "--seed", str(args.seed), "--output", str(demo))
    sft_model = demo / "sft" / "model"
    pairs = preference_files(demo, out / "pairs", args.rm_pairs, args.seed, args.rejected)

    rm_out = args.rm_from.resolve() if args.rm_from else out / "rm"
    if not args.rm_from:
        backbone = args.rm_backbone.resolve() if args.rm_backbone else sft_model
        if args.sft_chosen:
            backbone = sft_on_chosen(demo, pairs["train"], out / "chosen_sft", args.seed)
        rft("rm", str(REPO / "examples" / "arithmetic_rm.yaml"), f"model.partial_pretrain={backbone}",
            f"data.train_files={pairs['train']}", f"data.val_files={pairs['val']}", f"optim.lr={args.rm_lr}",
            f"trainer.total_training_steps={args.rm_steps}", f"trainer.test_freq={args.rm_steps // 6}",
            f"trainer.save_freq={args.rm_steps // 3}", f"trainer.seed={args.seed}",
            f"trainer.default_local_dir={rm_out}")
    rm_accuracy = last_metrics(rm_out)["val/accuracy"]
    by_kind = accuracy_by_kind(sft_model, rm_out / "model", demo / "data" / "val.parquet")
    kinds = ", ".join(f"{kind} {acc:.3f}" for kind, acc in by_kind.items())
    # The bar's pairs are the plain ones `rft data arithmetic --preferences` writes (the carry); the held-out file
    # of the mistakes is the harder figure, printed beside it.
    plain = by_kind["carry"]
    print(f"reward model: held-out pairwise accuracy {plain:.3f} on the plain pairs, {rm_accuracy:.3f} on the held-out "
          f"file ({args.rejected}); by kind of mistake: {kinds}", flush=True)
    if args.rm_only:
        return 0 if plain >= RM_BAR else 1

    config = OmegaConf.to_container(OmegaConf.load(demo / "config.yaml"))
    config.pop("stages")
    grpo_out = out / "grpo"
    config["actor_rollout_ref"]["model"]["path"] = str(sft_model)
    config["reward_model"] = {"enable": True, "model": {"path": str(rm_out / "model")}, "reward_weight": 1.0,
                              "rule_weight": 0.0, "micro_batch_size_per_gpu": 128, "max_length": 64}
    if args.kl_coef:
        config["actor_rollout_ref"]["actor"].update(use_kl_loss=True, kl_loss_coef=args.kl_coef,
                                                    kl_loss_type="low_var_kl")
    config["trainer"].update({"default_local_dir": str(grpo_out), "total_training_steps": args.grpo_steps,
                              "test_freq": -1, "val_before_train": False, "log_val_generations": 0,
                              "save_freq": 100})
    config_path = out / "grpo.yaml"
    config_path.write_text(OmegaConf.to_yaml(OmegaConf.create(config)))
    rft("train", str(config_path))
    scores = [json.loads(line)["critic/score/mean"] for line in (grpo_out / "metrics.jsonl").read_text().splitlines()]

    val = demo / "data" / "val.parquet"
    sft_accuracy = demo_module.held_out_accuracy(sft_model, val, max_tokens=5)
    rl_accuracy = demo_module.held_out_accuracy(grpo_out / "model", val, max_tokens=5)
    gamed = {name: gamed_answers(model, rm_out / "model", val)
             for name, model in (("sft", sft_model), ("grpo", grpo_out / "model"))}
    lift = rl_accuracy - sft_accuracy
    tenth = max(len(scores) // 10, 1)
    first, last = sum(scores[:tenth]) / tenth, sum(scores[-tenth:]) / tenth
    lines = [f"reward model: held-out pairwise accuracy {plain:.3f} on the plain pairs (bar {RM_BAR:.2f}), "
             f"{rm_accuracy:.3f} on the held-out file ({args.rm_steps} steps on {args.rm_pairs} questions' pairs, "
             f"rejected: {args.rejected}, lr {args.rm_lr:g}); on the held-out questions by kind of mistake: {kinds}",
             f"GRPO with the reward model only: held-out greedy accuracy {sft_accuracy:.3f} -> {rl_accuracy:.3f} "
             f"({lift:+.3f}; bar +{LIFT_BAR:.2f}; {args.grpo_steps} steps, KL coefficient {args.kl_coef:g}); "
             f"reward-model score of the samples {first:+.3f} (first tenth of the steps) -> {last:+.3f} (last tenth)",
             "wrong held-out greedy answers the reward model scores at or above the right one: "
             + ", ".join(f"{name} {n} of {of}" for name, (n, of) in gamed.items())]
    for line in lines:
        print(line, flush=True)
    if not args.no_write:
        when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        with RESULTS.open("a") as f:
            f.write(f"\n## bench/rm_grpo.py (issue 65: the reward-model path), seed {args.seed}, {when}\n\n"
                    + "".join(f"* {line}\n" for line in lines))
    return 0 if plain >= RM_BAR and lift >= LIFT_BAR - 1e-9 else 1


if __name__ == "__main__":
    sys.exit(main())

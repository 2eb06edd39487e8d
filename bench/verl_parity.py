"""rft's algorithms against verl 0.9.1's ``core_algos`` and ``rollout_corr_helper``, name by name.

    python bench/verl_parity.py [--no-write] [--seeds N]

verl is heavy, so it lives in its own venv, ``bench/.venv-verl`` (git-ignored), made on first use: torch 2.13.0
under constraints.txt (pip may never replace it), ``verl==0.9.1 --no-deps``, and only what
``verl.trainer.ppo.core_algos`` and ``rollout_corr_helper`` import (``VERL_DEPS``). The script then re-runs itself
with that venv's Python and rft's ``src`` on the path (rft.algorithms needs torch alone).

Every shared name is run on the same random inputs in float64: ragged response masks with holes inside responses
(multi-turn tool spans), groups of 1 to 8 responses, and for the losses a mini-batch split into micro-batches,
verl given the mini-batch's global-batch info (``batch_num_tokens``, ``global_batch_size``, dp_size 1) as its
trainer passes it, rft its ``AggNorm``. Each row reports the largest absolute difference over the seeds (values
and, for losses, gradients with respect to the log-probs) and a verdict: ``match`` (<= 1e-6), ``deviation`` (a
documented deliberate difference, docs/algorithms.md, with its reason) or ``FAIL``. The table is printed and
appended to bench/RESULTS.md with the machine's name.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VENV = HERE / ".venv-verl"
VERL = "verl==0.9.1"
# what verl.trainer.ppo.core_algos / rollout_corr_helper import (verl/__init__ pulls in ray, tensordict,
# transformers); versions inside verl 0.9.1's own requirement ranges
VERL_DEPS = ["numpy==2.4.6", "omegaconf==2.4.0", "packaging==25.0", "ray==2.60.0", "tensordict==0.10.0",
             "transformers==5.10.4", "codetiming==1.4.0", "orjson==3.13.0"]
TOL = 1e-6


# ------------------------------------------------------------------------------------------------ the venv
def venv_python() -> Path:
    return VENV / "bin" / "python"


def ensure_venv() -> None:
    """Create bench/.venv-verl with torch (pinned by constraints.txt), verl --no-deps and VERL_DEPS."""
    if venv_python().exists():
        return
    constraint = ["--constraint", str(ROOT / "constraints.txt")]
    pip = [str(venv_python()), "-m", "pip", "install", "--quiet", *constraint]
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run([*pip, "torch==2.13.0"], check=True)
    subprocess.run([*pip, "--no-deps", VERL], check=True)
    subprocess.run([*pip, *VERL_DEPS], check=True)


def in_verl_venv() -> bool:
    return Path(sys.prefix).resolve() == VENV.resolve()


# ------------------------------------------------------------------------------------------------- helpers
def machine() -> str:
    name = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.node()} ({name or platform.machine()}, nproc {os.cpu_count()})"


class Table:
    def __init__(self):
        self.rows: dict[str, list] = {}  # name -> [max diff, deviation reason or None]

    def add(self, name: str, diff: float, deviation: str | None = None) -> None:
        row = self.rows.setdefault(name, [0.0, deviation])
        row[0] = max(row[0], float(diff))

    def verdict(self, name: str) -> str:
        diff, deviation = self.rows[name]
        if deviation is not None:
            return f"deviation: {deviation}"
        return "match" if diff <= TOL else "FAIL"

    def markdown(self) -> str:
        lines = ["| name | max abs diff | verdict |", "| --- | --- | --- |"]
        for name, (diff, _) in self.rows.items():
            lines.append(f"| {name} | {diff:.2e} | {self.verdict(name)} |")
        return "\n".join(lines)

    @property
    def failed(self) -> list[str]:
        return [n for n in self.rows if self.verdict(n) == "FAIL"]


# --------------------------------------------------------------------------------------------- the checks
def run(seeds: int) -> Table:
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT / "src"))
    import verl
    from verl.trainer.config.algorithm import AlgoConfig
    from verl.trainer.config.algorithm import RolloutCorrectionConfig as VerlRC
    from verl.trainer.ppo import core_algos as V
    from verl.trainer.ppo import rollout_corr_helper as VH
    from verl.utils import torch_functional as verl_F
    from verl.utils.debug.metrics import calculate_debug_metrics
    from verl.utils.torch_functional import calculate_sum_pi_squared_from_logits
    from verl.workers.config import ActorConfig, PolicyLossConfig

    import rft.algorithms as A
    from rft.algorithms import rollout_correction as RC

    assert verl.__version__ == "0.9.1", verl.__version__
    F64 = torch.float64
    table = Table()

    def diff(a, b, mask=None) -> float:
        a, b = torch.as_tensor(a, dtype=F64).detach(), torch.as_tensor(b, dtype=F64).detach()
        if mask is not None:
            a, b = a * mask, b * mask
        return float((a - b).abs().max()) if a.numel() else 0.0

    def batch(seed: int, groups: int, R: int, smallest: int = 1):
        g = torch.Generator().manual_seed(seed)
        sizes = torch.randint(smallest, 9, (groups,), generator=g).tolist()  # groups of 1 (or smallest) to 8
        index = np.array([f"p{k}" for k, n in enumerate(sizes) for _ in range(n)], dtype=object)
        B = len(index)
        lengths = torch.randint(1, R + 1, (B,), generator=g)
        prefix = torch.arange(R).unsqueeze(0) < lengths.unsqueeze(1)
        holes = (torch.rand(B, R, generator=g) < 0.2) & (torch.arange(R) > 0)  # tool tokens inside a response
        mask = (prefix & ~holes).to(F64)
        mask[mask.sum(-1) == 0, 0] = 1.0
        rewards = torch.randn(B, R, generator=g, dtype=F64) * mask * (torch.rand(B, R, generator=g) < 0.3)
        last = (mask.cumsum(-1) == mask.sum(-1, keepdim=True)) & mask.bool()
        rewards = rewards + torch.where(last, torch.randn(B, 1, generator=g, dtype=F64), 0.0)  # a score at the end
        group = torch.as_tensor([int(s[1:]) for s in index])
        return g, index, group, mask, prefix, rewards

    # ---------------------------------------------------------------- advantage estimators
    for seed in range(seeds):
        g, index, group, mask, prefix, rewards = batch(seed, groups=5, R=7)
        B, R = mask.shape
        values = torch.randn(B, R, generator=g, dtype=F64)
        baselines = torch.randn(B, generator=g, dtype=F64)
        pi = torch.rand(B, R, generator=g, dtype=F64) * 0.98 + 0.01
        old = pi.log()
        sum_pi2 = pi.square() + torch.rand(B, R, generator=g, dtype=F64) * (1 - pi).square()
        is_w = torch.rand(B, R, generator=g, dtype=F64) * 2 * mask
        comps = torch.randn(B, 3, generator=g, dtype=F64)
        comp_w = [1.0, 0.5, -2.0]

        def rft(name, rewards=rewards, mask=mask, group=group, **kw):
            inputs = A.AdvantageInputs(rewards.clone(), mask.clone(), group.clone(), **kw)
            return A.compute_advantages(name, inputs)

        for gamma, lam in ((1.0, 1.0), (0.9, 0.8)):
            va, vr = V.compute_gae_advantage_return(rewards, values, mask, gamma, lam)
            out = rft("gae", values=values, gamma=gamma, lam=lam)
            table.add("adv gae", max(diff(out.advantages, va, mask), diff(out.returns, vr, mask)))
            table.add("adv gae (returns on masked tokens)", diff(out.returns, vr),
                      "rft: 0 on masked tokens; verl leaves advantages + values there")
        for norm in (True, False):
            va, _ = V.compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=norm)
            table.add(f"adv grpo (norm_adv_by_std={norm})", diff(rft("grpo", norm_adv_by_std_in_grpo=norm).advantages, va))
            _, index2, group2, mask2, _, rewards2 = batch(50 + seed, groups=5, R=7, smallest=2)  # pass@k: n >= 2
            va, _ = V.compute_grpo_passk_outcome_advantage(rewards2, mask2, index2,
                                                           config=AlgoConfig(norm_adv_by_std_in_grpo=norm))
            out = A.compute_advantages("grpo_passk", A.AdvantageInputs(rewards2, mask2, group2,
                                                                      norm_adv_by_std_in_grpo=norm))
            table.add(f"adv grpo_passk (norm_adv_by_std={norm})", diff(out.advantages, va))
        table.add("adv rloo", diff(rft("rloo").advantages, V.compute_rloo_outcome_advantage(rewards, mask, index)[0]))
        table.add("adv opo", diff(rft("opo").advantages, V.compute_opo_outcome_advantage(rewards, mask, index)[0]))
        table.add("adv gpg", diff(rft("gpg").advantages, V.compute_gpg_outcome_advantage(rewards, mask, index)[0]))
        table.add("adv reinforce_plus_plus_baseline", diff(
            rft("reinforce_plus_plus_baseline").advantages,
            V.compute_reinforce_plus_plus_baseline_outcome_advantage(rewards, mask, index)[0]))
        for gamma in (1.0, 0.9):
            va, vr = V.compute_reinforce_plus_plus_outcome_advantage(rewards, mask, config=AlgoConfig(gamma=gamma))
            out = rft("reinforce_plus_plus", gamma=gamma)
            table.add("adv reinforce_plus_plus (gaps in masks)", max(diff(out.advantages, va), diff(out.returns, vr)))
        va, vr = V.compute_remax_outcome_advantage(rewards, baselines, mask)
        out = rft("remax", reward_baselines=baselines)
        table.add("adv remax (gaps in masks)", max(diff(out.advantages, va, mask), diff(out.returns, vr, mask)))
        table.add("adv remax (masked tokens)", max(diff(out.advantages, va), diff(out.returns, vr)),
                  "rft: 0 on masked tokens; verl leaves the return there")
        table.add("adv remax (gamma 0.9)", diff(rft("remax", reward_baselines=baselines, gamma=0.9).advantages, va, mask),
                  "rft applies gamma; verl's remax ignores it (always 1)")
        for norm, weights in ((True, None), (False, comp_w)):
            keys = ["c0", "c1", "c2"]
            config = AlgoConfig(gdpo_reward_keys=keys, gdpo_reward_weights=weights)
            non_tensor = {k: comps[:, i].numpy() for i, k in enumerate(keys)}
            attention = torch.cat([torch.ones(B, 2, dtype=torch.long), prefix.long()], dim=-1)
            va, _ = V.compute_gdpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=norm, config=config,
                                                     non_tensor_batch=non_tensor,
                                                     batch={"prompts": torch.zeros(B, 2), "attention_mask": attention})
            out = rft("gdpo", reward_components=comps, gdpo_reward_weights=weights, norm_adv_by_std_in_grpo=norm)
            table.add("adv gdpo", diff(out.advantages, va))
        for name, fn in (("optimal_token_baseline", V.compute_optimal_token_baseline_advantage),
                         ("tir_optimal_token_baseline", V.compute_multi_turn_optimal_token_baseline_advantage)):
            for weights in (None, is_w):
                va, vr = fn(rewards, mask, index, old, sum_pi2, rollout_is_weights=weights)
                out = rft(name, old_logprobs=old, sum_pi_squared=sum_pi2, rollout_is_weights=weights)
                table.add(f"adv {name}", max(diff(out.advantages, va), diff(out.returns, vr, mask)))
                table.add(f"adv {name} (returns on masked tokens)", diff(out.returns, vr),
                          "rft: 0 on masked tokens; verl leaves the reward to go there")

    # --------------------------------------------------------------------------- aggregation and value loss
    modes = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
    for seed in range(seeds):
        g, _, _, mask, _, _ = batch(100 + seed, groups=4, R=6)
        B, R = mask.shape
        splits = [slice(0, B // 3), slice(B // 3, B)]
        info = dict(dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=B)
        norm = A.AggNorm(float(mask.sum()), float(B), R)
        loss_mat = torch.randn(B, R, generator=g, dtype=F64)
        for mode in modes:
            for factor in (None, 11):
                v = sum(V.agg_loss(loss_mat[s], mask[s], mode, loss_scale_factor=factor, **info) for s in splits)
                n = A.AggNorm(norm.num_tokens, norm.num_seqs, factor or R)
                r = sum(A.agg_loss(loss_mat[s], mask[s], mode, n) for s in splits)
                table.add(f"loss_agg_mode {mode}", diff(r, v))
        vpreds, old_v, returns = (torch.randn(B, R, generator=g, dtype=F64) for _ in range(3))
        for mode in modes:
            v = sum(V.compute_value_loss(vpreds[s], returns[s], old_v[s], mask[s], 0.3, mode, **info)[0] for s in splits)
            r = sum(A.value_loss(vpreds[s], old_v[s], returns[s], mask[s], 0.3, mode, norm).loss for s in splits)
            table.add("value loss (clipped, every mode)", diff(r, v))

    # -------------------------------------------------------------------------------------- KL, controllers
    g = torch.Generator().manual_seed(7)
    logp = (torch.randn(6, 5, generator=g, dtype=F64) - 1).requires_grad_()
    ref = torch.randn(6, 5, generator=g, dtype=F64) - 1
    for name in ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "kl+", "k1+", "abs+", "mse+", "k2+",
                 "low_var_kl+", "k3+"):
        v, r = V.kl_penalty(logp, ref, name), A.kl_penalty(logp, ref, name)
        (gv,), (gr,) = torch.autograd.grad(v.sum(), logp), torch.autograd.grad(r.sum(), logp)
        table.add(f"kl_penalty {name}", max(diff(r, v), diff(gr, gv)))
    vc, rc = V.AdaptiveKLController(0.05, 0.1, 100), A.AdaptiveKLController(0.05, 0.1, 100)
    vf, rf = V.FixedKLController(0.05), A.FixedKLController(0.05)
    for kl in (0.02, 0.3, 0.11, 0.0, 5.0):
        vc.update(kl, 64), rc.update(kl, 64), vf.update(kl, 64), rf.update(kl, 64)
        table.add("kl_ctrl adaptive", abs(vc.value - rc.value))
        table.add("kl_ctrl fixed", abs(vf.value - rf.value))
    logits = torch.randn(4, 7, 50, generator=g, dtype=F64)
    table.add("entropy_from_logits", diff(A.entropy_from_logits(logits, 5), verl_F.entropy_from_logits(logits)))
    table.add("sum_pi_squared_from_logits", diff(A.sum_pi_squared_from_logits(logits, 5),
                                                 calculate_sum_pi_squared_from_logits(logits)))

    # ----------------------------------------------------------------------------------------- policy losses
    def verl_config(**kw):
        rc_kw = kw.pop("rollout_correction", {})
        pl = PolicyLossConfig(loss_mode=kw.pop("loss_mode"), clip_cov_ratio=kw.pop("clip_cov_ratio", 0.0002),
                              clip_cov_lb=kw.pop("clip_cov_lb", 1.0), clip_cov_ub=kw.pop("clip_cov_ub", 5.0),
                              kl_cov_ratio=kw.pop("kl_cov_ratio", 0.0002), ppo_kl_coef=kw.pop("ppo_kl_coef", 0.1),
                              dro_beta=kw.pop("dro_beta", None), rollout_correction=VerlRC(**rc_kw))
        return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, policy_loss=pl, **kw)

    settings = dict(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0, tau_pos=0.9,
                    tau_neg=1.3)
    cases = [  # (name, rft loss, verl loss_mode, extra options, deviation of the micro-batched run or None)
        ("vanilla", {}, None), ("gspo", {}, None), ("gpg", {}, None), ("cispo", {}, None), ("sapo", {}, None),
        ("dro", {"dro_beta": 0.3}, None), ("dppo_tv", {}, None), ("dppo_kl", {"clip_ratio_low": 0.05,
                                                                              "clip_ratio_high": 0.08}, None),
        ("geo_mean", {}, "verl takes torch.mean over each micro-batch's rows, so its gradient grows with the "
                         "number of micro-batches; rft divides by the mini-batch's rows"),
        # clip_cov: ratio 1 cuts every candidate, so verl's global-RNG draw is not a draw
        ("clip_cov", {"clip_cov_ratio": 1.0, "clip_cov_lb": -0.05, "clip_cov_ub": 0.05},
         "verl picks the tokens from each micro-batch's statistics; rft from the whole mini-batch's"),
        ("kl_cov", {"kl_cov_ratio": 0.2, "ppo_kl_coef": 0.7},
         "verl picks the tokens from each micro-batch's statistics; rft from the whole mini-batch's"),
    ]
    rc_cases = [
        ("bypass_mode ppo_clip + seq_mean_k3 RS", {"loss_type": "ppo_clip", "rollout_is": "token",
                                                   "rollout_rs": "seq_mean_k3", "rollout_rs_threshold": 0.02}, None),
        ("bypass_mode reinforce + token TIS + token_k1 RS",
         {"loss_type": "reinforce", "rollout_is": "token", "rollout_is_threshold": 1.3, "rollout_rs": "token_k1",
          "rollout_rs_threshold": "0.7_1.4"}, None),
        ("bypass_mode reinforce + sequence IcePop", {"loss_type": "reinforce", "rollout_is": "sequence",
                                                     "rollout_is_threshold": "0.5_2.0"}, None),
        ("bypass_mode reinforce + batch-normalised token TIS",
         {"loss_type": "reinforce", "rollout_is": "token", "rollout_is_threshold": 1.5,
          "rollout_is_batch_normalize": True},
         "verl normalises the weights by each micro-batch's mean; rft by the whole mini-batch's"),
    ]
    for seed in range(seeds):
        g, _, _, mask, _, _ = batch(200 + seed, groups=4, R=6)
        B, R = mask.shape
        old = torch.randn(B, R, generator=g, dtype=F64) * 0.5 - 1.0
        old = torch.minimum(old, torch.full_like(old, -0.05))  # probabilities below 1 (dppo_kl's log(1 - p))
        logp0 = torch.minimum(old + torch.randn(B, R, generator=g, dtype=F64) * 0.3, torch.full_like(old, -0.01))
        adv = torch.randn(B, R, generator=g, dtype=F64) * mask
        is_w = torch.rand(B, R, generator=g, dtype=F64) * 2 * mask
        info = dict(dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=B, loss_scale_factor=None)
        norm = A.AggNorm(float(mask.sum()), float(B), R)
        split_sets = {"whole": [slice(0, B)], "micro": [slice(0, B // 3), slice(B // 3, 2 * B // 3), slice(2 * B // 3, B)]}
        all_cases = [(n, n, o, d, None) for n, o, d in cases] + [(n, "bypass_mode", {}, d, o) for n, o, d in rc_cases]
        for label, loss_mode, opts, deviation, rc_opts in all_cases:
            for weights in ((None, is_w) if rc_opts is None else (None,)):
                modes_here = ["seq-mean-token-mean"] if loss_mode == "sapo" else modes
                for mode in modes_here:
                    for split_name, splits in split_sets.items():
                        vcfg = verl_config(loss_mode=loss_mode, loss_agg_mode=mode, **{**settings, **opts},
                                           **({"rollout_correction": rc_opts} if rc_opts else {}))
                        vcfg.global_batch_info.update(info)
                        lv = logp0.clone().requires_grad_()
                        v_total = sum(V.get_policy_loss_fn(loss_mode)(
                            old[s], lv[s], adv[s], mask[s].bool(), mode, vcfg,
                            None if weights is None else weights[s])[0] for s in splits)
                        (gv,) = torch.autograd.grad(v_total, lv)
                        lr = logp0.clone().requires_grad_()
                        r_opts = {**settings, **opts}
                        r_opts.pop("clip_ratio")
                        if rc_opts:
                            r_opts.update({"rollout_is": rc_opts.get("rollout_is"),
                                           "rollout_is_threshold": rc_opts.get("rollout_is_threshold", 2.0),
                                           "rollout_is_batch_normalize": rc_opts.get("rollout_is_batch_normalize",
                                                                                     False),
                                           "rollout_rs": rc_opts.get("rollout_rs"),
                                           "rollout_rs_threshold": rc_opts.get("rollout_rs_threshold"),
                                           "bypass_loss_type": rc_opts["loss_type"]})
                        whole = A.PolicyLossInputs(lr.detach(), old, adv, mask, loss_agg_mode=mode, **r_opts,
                                                   rollout_is_weights=weights)
                        r_total = sum(A.compute_policy_loss(loss_mode, A.PolicyLossInputs(
                            lr[s], old[s], adv[s], mask[s], loss_agg_mode=mode, agg_norm=norm, minibatch=whole,
                            row_offset=s.start, rollout_is_weights=None if weights is None else weights[s],
                            **r_opts)).loss for s in splits)
                        (gr,) = torch.autograd.grad(r_total, lr)
                        d = max(diff(r_total, v_total), diff(gr, gv))
                        tag = "" if weights is None else " + IS weights"
                        if split_name == "micro" and deviation is not None:
                            table.add(f"loss {label}{tag} (micro-batched)", d, deviation)
                        else:
                            table.add(f"loss {label}{tag}" + (" (micro-batched)" if deviation is None else " (one micro-batch)"), d)

    # ------------------------------------------------------------------------------------- rollout correction
    rc_configs = [
        {"rollout_is": "token", "rollout_is_threshold": 2.0},
        {"rollout_is": "sequence", "rollout_is_threshold": 3.0},
        {"rollout_is": "token", "rollout_is_threshold": "0.6_1.6"},
        {"rollout_is": "sequence", "rollout_is_threshold": "0.3_4.0", "rollout_is_batch_normalize": True},
        {"rollout_is": "token", "rollout_is_threshold": 1.5, "rollout_is_batch_normalize": True},
        {"rollout_rs": "token_k1", "rollout_rs_threshold": "0.7_1.4"},
        {"rollout_rs": "token_k2,token_k3", "rollout_rs_threshold": "0.05,0.04"},
        {"rollout_rs": "seq_sum_k1,seq_mean_k2", "rollout_rs_threshold": "0.4_2.5,0.03"},
        {"rollout_rs": "seq_mean_k1,seq_mean_k3,seq_max_k2,seq_max_k3,seq_sum_k2,seq_sum_k3",
         "rollout_rs_threshold": 1.5},
        {"rollout_is": "token", "rollout_rs": "seq_mean_k3", "rollout_rs_threshold": 0.02},
    ]
    for seed in range(seeds):
        g, _, _, mask, _, _ = batch(300 + seed, groups=4, R=8)
        B, R = mask.shape
        rollout = torch.randn(B, R, generator=g, dtype=F64) * 0.5 - 1.5
        old = rollout + torch.randn(B, R, generator=g, dtype=F64) * 0.25
        for cfg in rc_configs:
            kw = dict(rollout_is=None, rollout_is_threshold=2.0, rollout_is_batch_normalize=False, rollout_rs=None,
                      rollout_rs_threshold=None)
            kw.update(cfg)
            proto, vmask, vmetrics = VH.compute_rollout_correction_and_rejection_mask(old, rollout, mask, **kw)
            corr = RC.compute_rollout_correction(old, rollout, mask, **kw)
            if proto is not None:
                table.add("rollout_is weights (TIS / IcePop, token / sequence, batch-normalised)",
                          diff(corr.weights, proto.batch["rollout_is_weights"]))
            table.add("rollout_rs rejection mask (all 11 options, combined)", diff(mask * corr.keep, vmask))
            missing = sorted(set(vmetrics) ^ set(corr.metrics))
            table.add("rollout_corr/* metrics (every key)",
                      max(abs(corr.metrics[k] - vmetrics[k]) for k in vmetrics if k in corr.metrics) if not missing
                      else float("inf"))
            if missing:
                print("metric keys differ:", missing)
        responses = torch.zeros(B, R, dtype=torch.long)
        vdebug = calculate_debug_metrics(VH.DataProto.from_dict(tensors={
            "rollout_log_probs": rollout, "old_log_probs": old, "response_mask": mask, "responses": responses}))
        rdebug = RC.rollout_probs_diff_metrics(old, rollout, mask)
        table.add("training/rollout_probs_diff_* metrics", max(abs(rdebug[k] - vdebug[k]) for k in vdebug))
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print the table, do not append to RESULTS.md")
    parser.add_argument("--seeds", type=int, default=6, help="random batches per comparison")
    args = parser.parse_args()
    if not in_verl_venv():
        ensure_venv()
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
               "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "VERL_USE_EXTERNAL_PLUGINS": "none"}
        return subprocess.run([str(venv_python()), __file__, *sys.argv[1:]], env=env).returncode
    table = run(args.seeds)
    import torch
    import verl

    head = (f"## {_dt.datetime.now():%Y-%m-%d %H:%M} — verl {verl.__version__} parity (`bench/verl_parity.py`, "
            f"{args.seeds} seeds; {machine()}, torch {torch.__version__})")
    text = "\n".join([head, "", "float64, ragged masks with holes, groups of 1-8, losses on a mini-batch split into "
                      "micro-batches (verl given the global-batch info), `match` <= 1e-6.", "", table.markdown(), ""])
    print(text)
    if table.failed:
        print("FAILED:", ", ".join(table.failed))
    if not args.no_write:
        results = HERE / "RESULTS.md"
        with results.open("a", encoding="utf-8") as f:
            f.write("\n" + text)
    return 1 if table.failed else 0


if __name__ == "__main__":
    sys.exit(main())

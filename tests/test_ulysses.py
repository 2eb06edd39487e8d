"""Ulysses sequence parallelism (rft.workers.ulysses): log-probs, entropies, values and gradients of sp processes
equal one process's, on model families with GQA (fewer and as many KV heads as processes), sliding windows and
mixtures of experts (their load-balancing loss included), packed and padded; sp=2 on 2 processes and sp=2 x dp=2
on 4 (gloo)."""

from __future__ import annotations

import socket

import pytest
import torch

from rft.batch import Batch
from rft.distributed import Dist

# (family, config keys over rft's test sizes): every family's tiny model has 2 query heads and 1 KV head (repeated to
# 2 under sp=2); "qwen2-gqa" has 4 and 2 (2 query heads over 1 KV head on each process)
CASES = [
    ("qwen2", {}),
    ("qwen2", {"num_attention_heads": 4, "num_key_value_heads": 2}),
    ("mistral", {}),  # sliding window 8, rows up to 22 tokens
    ("gemma3_text", {}),  # alternating sliding layers, its own query scaling
    ("mixtral", {"output_router_logits": True, "router_aux_loss_coef": 0.5}),  # MoE, load-balancing loss applied
    ("qwen3_moe", {}),
    ("llama", {}),
    ("phi3", {}),
]


REFUSED = {"gemma2": "uses attention ['eager'], not sdpa", "llama4_text": "chunked attention",
           "gpt_oss": "uses attention ['eager'], not sdpa"}
"""Families whose attention the sequence-parallel pass does not compute (Gemma 2's soft-capping and GPT-OSS's
sinks run on transformers' eager attention), and the words of the refusal."""
CASES_4 = [CASES[1], CASES[2], CASES[4]]
"""On 4 processes (2 x 2): GQA, a sliding window, a mixture of experts."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model(family: str, keys: dict, seed: int = 0, value_model: bool = False):
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    from rft.models.arch import router_recorder
    from rft.models.families import build_family_config

    config = build_family_config(family, vocab_size=61, eos_token_id=1)
    for k, v in keys.items():
        setattr(config, k, v)
    if family not in REFUSED:
        config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    if value_model:  # as rft.models.load.load_value_model builds a critic
        config.num_labels, config.classifier_dropout = 1, 0.0
        return AutoModelForTokenClassification.from_config(config, dtype=torch.float32).train()
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).train()
    router_recorder(model)  # as loading does: a mixture of experts' load-balancing loss recorded by rft
    return model


def _batch(rows: int, seed: int) -> tuple[Batch, torch.Tensor]:
    """`rows` rows, prompts left-padded to 6 and responses right-padded to 16 (2-16 tokens), and a weight per
    response token for the loss."""
    g = torch.Generator().manual_seed(seed)
    p_len = torch.randint(2, 7, (rows,), generator=g)
    r_len = torch.randint(2, 17, (rows,), generator=g)
    prompt_mask = (torch.arange(6)[None] >= 6 - p_len[:, None]).long()
    response_mask = (torch.arange(16)[None] < r_len[:, None]).long()
    batch = Batch(prompt_ids=torch.randint(2, 61, (rows, 6), generator=g) * prompt_mask, prompt_mask=prompt_mask,
                  response_ids=torch.randint(2, 61, (rows, 16), generator=g) * response_mask,
                  response_mask=response_mask, group=torch.arange(rows))
    return batch, torch.randn(rows, 16, generator=g, dtype=torch.float64).float() * response_mask


def _loss(model, batch: Batch, weights: torch.Tensor):
    """(log-probs, entropies, loss): a weighted sum of log-probs and entropies, plus the load-balancing loss of a
    mixture of experts whose config applies it."""
    from rft.models.arch import router_recorder
    from rft.workers.policy import forward_logprobs

    logprobs, entropy = forward_logprobs(model, batch, 0.7, with_entropy=True, entropy_grad=True)
    loss = (logprobs * weights).sum() + 0.1 * (entropy * weights).sum()
    router = router_recorder(model)
    aux = router.take() if router is not None else None
    if router is not None and router.applied:
        assert aux is not None
        loss = loss + router.coef * aux
    return logprobs, entropy, loss


def _worker(rank: int, world: int, sp: int, port: int, results) -> None:
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        from rft.workers.packing import enable_remove_padding
        from rft.workers.ulysses import enable_sequence_parallel

        dist = Dist(rank=rank, world_size=world).with_sequence_parallel(sp)
        out = {}
        for i, (family, keys) in enumerate(CASES if world == 2 else CASES_4):
            for packed in (True, False):
                name = f"{family}{'-gqa' if keys.get('num_key_value_heads', 1) > 1 else ''}/{'packed' if packed else 'padded'}"
                whole, split = _model(family, keys), _model(family, keys)
                for m in (whole, split) if packed else ():
                    assert enable_remove_padding(m, "use_remove_padding")
                enable_sequence_parallel(split, dist, "actor.ulysses_sequence_parallel_size")
                # every data-parallel rank its own 3 rows; the one-process reference runs all of them
                parts = [_batch(3, seed=100 * i + r) for r in range(dist.world_size)]
                ref = [_loss(whole, b, w) for b, w in parts]
                sum(loss for _, _, loss in ref).backward()
                lp, ent, loss = _loss(split, *parts[dist.rank])
                loss.backward()
                grads = {}
                for (n, p), (_, q) in zip(whole.named_parameters(), split.named_parameters()):
                    g = q.grad.clone()
                    torch.distributed.all_reduce(g)  # the sum over every process, as FSDP reduces it
                    grads[n] = float((g - p.grad).abs().max() / p.grad.abs().max().clamp(min=1e-6))
                real = parts[dist.rank][0].response_mask.bool()  # (past a row's end the passes differ: unused)
                out[name] = {
                    "logprobs": float((lp - ref[dist.rank][0])[real].abs().max()),
                    "entropy": float((ent - ref[dist.rank][1])[real].abs().max()),
                    "grad": max(grads.values()), "grad_at": max(grads, key=grads.get),
                }
        if world == 2:  # what the split attention does not compute: refused by name when the model loads
            from rft.errors import ModelError

            for family in REFUSED:
                try:
                    enable_sequence_parallel(_model(family, {}), dist, "actor_rollout_ref.actor.ulysses_sequence_"
                                             "parallel_size")
                    out[f"refused/{family}"] = None
                except ModelError as e:
                    out[f"refused/{family}"] = str(e)
        if world == 2:  # a critic's values: the value model's outputs at the positions before each response token
            from rft.workers.critic import forward_values

            models = []
            for _ in range(2):
                model = _model("qwen2", {}, value_model=True)
                assert enable_remove_padding(model, "critic.model.use_remove_padding")
                models.append(model)
            whole, split = models
            enable_sequence_parallel(split, dist, "critic.ulysses_sequence_parallel_size")
            batch, weights = _batch(4, seed=7)
            ref = forward_values(whole, batch)
            (ref * weights).sum().backward()
            values = forward_values(split, batch)
            (values * weights).sum().backward()
            grad = 0.0
            for p, q in zip(whole.parameters(), split.parameters()):
                g = q.grad.clone()
                torch.distributed.all_reduce(g)
                grad = max(grad, float((g - p.grad).abs().max() / p.grad.abs().max().clamp(min=1e-6)))
            out["critic"] = {"logprobs": float((values - ref).abs().max()), "entropy": 0.0, "grad": grad}
        results[rank] = out
    finally:
        torch.distributed.destroy_process_group()


def _run(world: int, sp: int) -> dict:
    import torch.multiprocessing as mp

    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_worker, args=(world, sp, _free_port(), results), nprocs=world, join=True)
        return dict(results)


@pytest.mark.parametrize("world", [2, pytest.param(4, marks=pytest.mark.heavy)])  # 4 processes: make test-heavy
def test_sequence_parallel_passes_equal_one_process(world):
    """Log-probs and entropies to 1e-5, every parameter's gradient (summed over the processes) to 1e-5 of its
    largest entry, on every process; sp=2 over 2 processes (one data-parallel rank) and over 4 (two)."""
    results = _run(world, 2)
    assert sorted(results) == list(range(world))
    for rank, out in results.items():
        refused = {k.split("/")[1]: out.pop(k) for k in list(out) if k.startswith("refused/")}
        assert len(out) == (2 * len(CASES) + 1 if world == 2 else 2 * len(CASES_4))  # (+ the critic's values)
        for family, why in REFUSED.items() if world == 2 else ():
            assert refused[family] and "ulysses_sequence_parallel_size=2" in refused[family], (family, refused)
            assert why in refused[family] and "set it to 1" in refused[family], (family, refused[family])
        for name, r in out.items():
            assert r["logprobs"] < 1e-5 and r["entropy"] < 1e-5, (rank, name, r)
            assert r["grad"] < 1e-5, (rank, name, r)


# ------------------------------------------------------------------------------------------- the config
def _load(*overrides: str, paths: dict | None = None):
    from rft.trainer.configure import load_config

    required = ([f"actor_rollout_ref.model.path={paths['model']}", f"data.train_files={paths['train']}"]
                if paths else ["actor_rollout_ref.model.path=model", "data.train_files=train.parquet"])
    return load_config(None, [*required, "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                              "actor_rollout_ref.rollout.n=2", "trainer.device=cpu", *overrides],
                       validate_paths=paths is not None)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict:
    """rft's tiny model (4 query heads, 2 KV heads) and arithmetic prompts."""
    from rft.models.tiny import init_model
    from rft.tasks import write_arithmetic

    root = tmp_path_factory.mktemp("sp")
    return {"model": init_model("tiny", root / "model", seed=0),
            **write_arithmetic(root / "data", n_train=16, n_val=4, seed=0)}


SP = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"


def test_sequence_parallel_splits_the_data_over_the_groups():
    """4 processes in groups of 2: the batch sizes are checked against 2 data-parallel ranks (mini-batches of 4
    prompts x 2 / 2 = 4 rows per rank, micro-batches of 4), where 4 ranks would hold 2 rows."""
    cfg = _load("trainer.n_gpus_per_node=4", f"{SP}=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4")
    assert cfg.actor_rollout_ref.actor.ulysses_sequence_parallel_size == 2
    with pytest.raises(Exception, match="= 2 rows per process"):
        _load("trainer.n_gpus_per_node=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4")


@pytest.mark.parametrize("overrides, needles", [
    ([f"{SP}=3", "trainer.n_gpus_per_node=2"], [f"{SP}=3", "does not divide the 2 process(es)", "1 x 2"]),
    ([f"{SP}=2"], [f"{SP}=2", "does not divide the 1 process(es)"]),
    ([f"{SP}=0"], [SP, "integer >= 1"]),
    ([f"{SP}=2", "trainer.n_gpus_per_node=2", "actor_rollout_ref.ref.ulysses_sequence_parallel_size=4",
      "actor_rollout_ref.actor.use_kl_loss=true"], ["actor_rollout_ref.ref.ulysses_sequence_parallel_size=4",
                                                    f"actor's ({SP}=2) or 1"]),
    ([f"{SP}=2", "trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.use_kl_loss=true",
      "actor_rollout_ref.actor.kl_loss_type=full"], ["kl_loss_type=full", "whole logits", "set it to 1"]),
    ([f"{SP}=2", "trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.calculate_sum_pi_squared=true"],
     ["calculate_sum_pi_squared", "whole logits"]),
    ([f"{SP}=2", "trainer.n_gpus_per_node=6", "data.train_batch_size=12"],
     ["ppo_mini_batch_size (4) must divide by the number of data-parallel groups (3)"]),
])
def test_sequence_parallel_refusals_are_one_line_each(overrides, needles):
    from rft.config import ConfigError

    with pytest.raises(ConfigError) as err:
        _load(*overrides)
    for needle in needles:
        assert needle in str(err.value), (needle, str(err.value))


def test_heads_that_do_not_split_are_refused_before_the_model_loads(tiny):
    """The tiny model has 4 query heads and 2 KV heads: sp=4 repeats each KV head twice; sp=8 does not divide the
    query heads; a config.json read before any weight loads."""
    from rft.config import ConfigError

    _load(f"{SP}=4", "trainer.n_gpus_per_node=4", paths=tiny)
    with pytest.raises(ConfigError, match=r"its 4 attention heads do not divide by 8"):
        _load(f"{SP}=8", "trainer.n_gpus_per_node=8", "data.train_batch_size=8", paths=tiny)


def test_a_critic_whose_heads_do_not_split_is_refused_before_the_models_load(tiny, tmp_path):
    """The check read the actor's heads only: a critic folder (critic.model.path) of 6 query heads under sp=4 was
    refused once both models had loaded on every process. Its own config.json is read now; the critic run whole
    (critic.ulysses_sequence_parallel_size=1) passes."""
    import json
    import shutil

    from rft.config import ConfigError

    critic = shutil.copytree(tiny["model"], tmp_path / "critic")
    config = json.loads((critic / "config.json").read_text())
    (critic / "config.json").write_text(json.dumps({**config, "num_attention_heads": 6, "head_dim": 16}))
    keys = [f"{SP}=4", "trainer.n_gpus_per_node=4", "algorithm.adv_estimator=gae", f"critic.model.path={critic}"]
    with pytest.raises(ConfigError) as err:
        _load(*keys, paths=tiny)
    assert str(err.value) == (
        f"{SP}=4: the critic's model critic.model.path='{critic}' cannot split its sequences over 4 processes (its 6 "
        "attention heads do not divide by 4); set critic.ulysses_sequence_parallel_size=1 to run the critic whole, "
        "or a size that fits both")
    _load(*keys, "critic.ulysses_sequence_parallel_size=1", paths=tiny)
    _load(*keys[:3], paths=tiny)  # the critic of the actor's folder: 4 heads split


def test_heads_error_names_what_does_not_split():
    from types import SimpleNamespace

    from rft.workers.ulysses import heads_error

    assert heads_error(SimpleNamespace(num_attention_heads=8, num_key_value_heads=2), 4) is None  # KV repeated x2
    assert heads_error(SimpleNamespace(num_attention_heads=8, num_key_value_heads=8), 4) is None
    assert "6 key-value heads" in heads_error(SimpleNamespace(num_attention_heads=12, num_key_value_heads=6), 4)
    assert "14 attention heads" in heads_error(SimpleNamespace(num_attention_heads=14, num_key_value_heads=2), 4)


def test_a_sequence_longer_than_a_learned_position_table_is_refused_before_loading(tiny, tmp_path, caplog):
    """GPT-2's 512 learned positions (the family's tiny config): 32 + 600 tokens refused in one line; rft's tiny
    Qwen2 (rotary, max_position_embeddings 2,048) past its positions goes on with a note."""
    import logging

    from rft.config import ConfigError
    from rft.models.families import init_family_model

    gpt2 = init_family_model("gpt2", tmp_path / "gpt2")
    paths = {**tiny, "model": gpt2}
    with pytest.raises(ConfigError, match=r"32 \+ 600 = 632 tokens, more than the 512 positions of .*learned "
                                          r"position table.*lower them"):
        _load("data.max_prompt_length=32", "data.max_response_length=600", paths=paths)
    _load("data.max_prompt_length=32", "data.max_response_length=480", paths=paths)
    with caplog.at_level(logging.WARNING, logger="rft"):
        _load("data.max_prompt_length=32", "data.max_response_length=4096", paths=tiny)
    assert "4128 tokens, more than the 2048 positions" in caplog.text and "not trained" in caplog.text

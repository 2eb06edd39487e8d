"""The precision keys (models/precision.py): the choice on a CPU (by its instructions, and at a model's shapes by
a timing kept per machine and shape; kept for a run in its folder; one log line), mixed precision's float32 weights and optimizer state, and bf16 runs of the
passes and of a whole GRPO step.

On a CPU without fast bf16 (this project's AVX2 machine) a run computes in float32 whatever it names; the bf16
paths run here under RFT_CPU_PRECISION=requested, which computes in the named precision however slow."""

from __future__ import annotations

import json
import time

import pytest
import torch

from rft import runtime
from rft.models import precision
from rft.models.precision import Choice, choose, describe
from tests.rl_helpers import assert_all_moved, make_assets, rl_config, trainable

CPU = torch.device("cpu")
NO_BF16 = "this CPU has no AMX-BF16 or AVX512-BF16 instructions: bf16 would be emulated"


@pytest.fixture
def cpu_has(monkeypatch):
    """A CPU with the instructions in the returned set (AMX-BF16, AVX512-BF16, AMX-FP16, AVX512-FP16), under the
    default mode."""
    has: set[str] = set()
    monkeypatch.setenv(precision.MODE_ENV, "auto")
    monkeypatch.setattr(precision, "has_instructions", lambda name: name in has)
    return has


# ------------------------------------------------------------------------------------------------ the choice
def test_a_cpu_computes_in_bf16_only_where_it_has_the_instructions(cpu_has):
    assert choose("bf16", CPU) == Choice(torch.float32, "bf16", NO_BF16)
    cpu_has.add("AVX512-BF16")
    assert choose("bfloat16", CPU) == Choice(torch.bfloat16, "bfloat16", "this CPU has AVX512-BF16 instructions")
    cpu_has.add("AMX-BF16")
    assert choose("bf16", CPU).reason == "this CPU has AMX-BF16 instructions"
    assert choose("fp16", CPU).dtype == torch.float32  # fp16 needs AMX-FP16 or AVX512-FP16
    cpu_has.add("AVX512-FP16")
    assert choose("fp16", CPU).dtype == torch.float16
    # float32 asked: float32; auto: bf16 where it is fast
    assert choose("fp32", CPU) == Choice(torch.float32, "fp32")
    assert choose("auto", CPU).dtype == torch.bfloat16


def test_the_choice_does_not_depend_on_timing(cpu_has, monkeypatch):
    """Without a model's shapes a busy machine's clock moves nothing: rft timed one bf16 and float32 matmul per
    process and took bf16 where it ran 1.1x faster, a choice a loaded machine could flip (and with it every number of
    the run). A model's shapes are timed once per machine and kept (the next tests)."""
    cpu_has.add("AVX512-BF16")
    clock = iter(range(0, 10**9, 7919))
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock) * 1e-3)
    assert choose("bf16", CPU).dtype == torch.bfloat16
    cpu_has.clear()
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    assert choose("bf16", CPU).dtype == torch.float32


def test_the_instructions_are_read_from_torch_and_the_cpu_flags(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    assert precision.has_instructions("AVX512-BF16")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    assert not precision.has_instructions("AVX512-BF16")
    monkeypatch.setattr(precision, "cpu_flags", lambda: {"avx2", "avx512_fp16"})  # torch has no probe for it
    assert precision.has_instructions("AVX512-FP16")


def test_a_runs_record_decides_over_this_machine(cpu_has, tmp_path, capsys):
    """A run records what bf16 computes in as it starts (its folder's numerics.json); its resumed half, on a machine
    or under an environment that would choose otherwise, computes as the run did, and says so."""
    record = tmp_path / runtime.RUN_CHOICES_FILE
    with runtime.fix_run_choices(record, precision.run_choices(), fresh=True):
        assert choose("bf16", CPU).dtype == torch.float32
    assert json.loads(record.read_text())["bf16 on the CPU"] == {"value": "fp32", "why": NO_BF16}
    cpu_has.add("AMX-BF16")  # resumed where bf16 is fast
    assert choose("bf16", CPU).dtype == torch.bfloat16  # outside the run: this machine's answer
    with runtime.fix_run_choices(record, precision.run_choices(), fresh=False):
        assert choose("bf16", CPU) == Choice(torch.float32, "bf16", NO_BF16)
    assert (f"rft: bf16 on the CPU: fp32, as the run started ({record}); this process alone would choose bf16 "
            "(this CPU has AMX-BF16 instructions)") in capsys.readouterr().out
    with runtime.fix_run_choices(record, precision.run_choices(), fresh=True):  # a run that starts again
        assert choose("bf16", CPU).dtype == torch.bfloat16


def test_the_mode_overrides_the_instructions(cpu_has, monkeypatch):
    monkeypatch.setenv(precision.MODE_ENV, "requested")
    assert choose("bf16", CPU) == Choice(torch.bfloat16, "bf16", "RFT_CPU_PRECISION=requested")
    monkeypatch.setenv(precision.MODE_ENV, "measure")  # the default's earlier name
    assert choose("bf16", CPU) == Choice(torch.float32, "bf16", NO_BF16)
    cpu_has.add("AMX-BF16")
    monkeypatch.setenv(precision.MODE_ENV, "float32")
    assert choose("bf16", CPU) == Choice(torch.float32, "bf16", "RFT_CPU_PRECISION=float32")
    monkeypatch.setenv(precision.MODE_ENV, "fast")
    with pytest.raises(ValueError, match="RFT_CPU_PRECISION='fast': valid values are auto, requested, float32"):
        choose("bf16", CPU)
    # a GPU computes in what is named
    assert choose("bf16", torch.device("cuda")) == Choice(torch.bfloat16, "bf16")
    assert choose("auto", torch.device("cuda")).dtype == torch.bfloat16


def test_one_line_says_what_runs_and_why():
    line = describe({"rollout": Choice(torch.float32, "bfloat16", NO_BF16), "actor": Choice(torch.float32, "bf16", NO_BF16),
                     "critic": Choice(torch.float32, "fp32")})
    assert line == ("precision: rollout fp32 (bfloat16 asked), actor fp32 (bf16 asked), critic fp32 "
                    f"({NO_BF16})")
    fast = "this CPU has AMX-BF16 instructions"
    assert describe({"rollout": Choice(torch.bfloat16, "bf16", fast), "actor": Choice(torch.bfloat16, "bf16", fast)}) \
        == ("precision: rollout bf16, actor bf16 (this CPU has AMX-BF16 instructions); master weights and optimizer "
            "state fp32")


def test_a_run_that_names_no_precision_gets_a_plain_line(cpu_has):
    """The precision keys default to auto (verl's bf16 default made every CPU run print '(bf16 asked)' and why it
    was not honoured, though nobody asked): on a CPU slow in bf16 auto is float32 with nothing to explain; what a
    config does name and does not get is still told, with the reason."""
    from rft.config.schema import MixedPrecisionConfig, RolloutConfig

    assert MixedPrecisionConfig().param_dtype == "auto" and RolloutConfig().dtype == "auto"
    auto = choose("auto", CPU)
    assert auto == Choice(torch.float32, "auto", NO_BF16)
    assert describe({"rollout": Choice(torch.float32, "float32"), "actor": auto, "ref": auto}) == "precision: fp32"
    assert describe({"rollout": auto, "actor": choose("bf16", CPU), "ref": auto}) == (
        f"precision: rollout fp32, actor fp32 (bf16 asked), ref fp32 ({NO_BF16})")


# ------------------------------------------------------------------------------------------ the model's shapes
def _model_folder(path, hidden: int, intermediate: int, vocab: int):
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": hidden,
                                                  "intermediate_size": intermediate, "vocab_size": vocab}))
    return str(path)


@pytest.fixture
def measured(cpu_has, monkeypatch, tmp_path):
    """{hidden size: bf16's speed over float32's}, what the stubbed `precision.measure` returns; its `calls` list
    each measurement. rft's cache folder is tmp_path / "cache" / "rft"."""
    monkeypatch.setenv("RFT_CACHE_DIR", str(tmp_path / "cache" / "rft"))
    monkeypatch.setattr(precision, "_noted", set())
    speeds: dict = {}
    calls: list = []

    def measure(shapes, dtype):
        calls.append((shapes.hidden, dtype))
        return speeds[shapes.hidden]

    monkeypatch.setattr(precision, "measure", measure)
    return speeds, calls


def test_bf16_is_chosen_by_the_models_shapes_measured_once_per_machine_and_shape(cpu_has, measured, tmp_path):
    """With the instructions, a model whose products bf16 computes faster gets bf16, one whose products are too
    short for it fp32; each shape is timed once on this machine, kept in the user's cache folder and read back."""
    speeds, calls = measured
    speeds.update({896: 2.5, 64: 0.6, 32: 0.95})
    big = _model_folder(tmp_path / "big", 896, 4864, 151936)
    small = _model_folder(tmp_path / "small", 64, 128, 300)
    assert choose("bf16", CPU, big) == Choice(torch.float32, "bf16", NO_BF16)  # no instructions: nothing timed
    assert calls == []
    cpu_has.add("AVX512-BF16")
    shape = "hidden 896, intermediate 4864, vocabulary 151936"
    assert choose("bf16", CPU, big) == Choice(torch.bfloat16, "bf16", "this CPU has AVX512-BF16 instructions; bf16 "
                                              f"measured 2.5x float32's speed at this model's shapes ({shape})")
    assert choose("auto", CPU, small) == Choice(
        torch.float32, "auto", "this CPU has AVX512-BF16 instructions, but bf16 measured 0.6x float32's speed at "
        "this model's shapes (hidden 64, intermediate 128, vocabulary 300)")
    assert choose("bf16", CPU, big).dtype == torch.bfloat16 and choose("auto", CPU, small).dtype == torch.float32
    near = _model_folder(tmp_path / "near", 32, 64, 300)  # near 1x: the instructions' answer stands
    assert choose("bf16", CPU, near).dtype == torch.bfloat16
    assert calls == [(896, torch.bfloat16), (64, torch.bfloat16), (32, torch.bfloat16)]  # once per shape
    cache = tmp_path / "cache" / "rft" / "precision.json"
    assert json.loads(cache.read_text()) == {precision.machine_key(): {
        f"bf16 at {shape}": 2.5, "bf16 at hidden 64, intermediate 128, vocabulary 300": 0.6,
        "bf16 at hidden 32, intermediate 64, vocabulary 300": 0.95}}
    assert sorted(p.name for p in cache.parent.iterdir()) == [".precision.json.lock", "precision.json"]  # no temp
    cache.write_text("{not json")  # a damaged cache is measured again and rewritten
    assert choose("bf16", CPU, big).dtype == torch.bfloat16 and len(calls) == 4
    assert json.loads(cache.read_text())[precision.machine_key()] == {f"bf16 at {shape}": 2.5}
    # a run records the choice at its models' shapes with the others, so its resumed half computes as it did
    record = precision.run_choices((big, small, str(tmp_path / "no-such-model")))
    assert record[f"bf16 on the CPU at {shape}"][0] == "bf16"
    assert record["bf16 on the CPU at hidden 64, intermediate 128, vocabulary 300"][0] == "fp32"


def test_float32_named_where_bf16_measures_several_times_faster_gets_one_line(cpu_has, measured, tmp_path, caplog):
    speeds, calls = measured
    speeds.update({896: 4.7, 64: 2.0})
    big = _model_folder(tmp_path / "big", 896, 4864, 151936)
    small = _model_folder(tmp_path / "small", 64, 128, 300)
    key = "actor_rollout_ref.rollout.dtype"
    with caplog.at_level("INFO", logger="rft"):
        assert choose("float32", CPU, big, key) == Choice(torch.float32, "float32")
        assert calls == []  # no instructions: bf16 is emulated, nothing to time or say
        cpu_has.add("AMX-BF16")
        for _ in range(2):
            assert choose("float32", CPU, big, key) == Choice(torch.float32, "float32")
        assert choose("fp32", CPU, small, "model.dtype").dtype == torch.float32  # 2x: not several times
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert lines == [f"rft: {key} names float32, and bf16 measures 4.7x its speed at this model's shapes on this CPU "
                     "(hidden 896, intermediate 4864, vocabulary 151936): set actor_rollout_ref.rollout.dtype=auto "
                     "to compute in bf16 (master weights and optimizer state stay float32), unless float32 is what "
                     "you need"]
    assert calls == [(896, torch.bfloat16), (64, torch.bfloat16)]


def test_an_override_times_nothing(cpu_has, measured, tmp_path, monkeypatch, caplog):
    speeds, calls = measured
    speeds[896] = 4.7
    cpu_has.add("AMX-BF16")
    big = _model_folder(tmp_path / "big", 896, 4864, 151936)
    for mode in ("requested", "float32"):
        monkeypatch.setenv(precision.MODE_ENV, mode)
        with caplog.at_level("INFO", logger="rft"):
            choose("bf16", CPU, big), choose("float32", CPU, big, "actor_rollout_ref.rollout.dtype")
    assert calls == [] and not caplog.records


def test_the_shapes_are_read_from_config_json(tmp_path):
    vlm = tmp_path / "vlm"
    vlm.mkdir()
    (vlm / "config.json").write_text(json.dumps({"model_type": "idefics3", "text_config": {
        "hidden_size": 64, "intermediate_size": 256, "vocab_size": 500}}))
    assert precision.shapes_of(vlm) == precision.Shapes(64, 256, 500)
    gpt2 = tmp_path / "gpt2"
    gpt2.mkdir()
    (gpt2 / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 32, "vocab_size": 300}))
    assert precision.shapes_of(gpt2) == precision.Shapes(32, 128, 300)
    assert precision.shapes_of(tmp_path / "missing") is None and precision.shapes_of(None) is None


def test_the_measurement_times_both_precisions_at_the_shapes():
    """The real measurement, at a small shape: a positive ratio (its value is this machine's and its load's)."""
    assert precision.measure(precision.Shapes(64, 128, 256), torch.bfloat16) > 0


def test_the_examples_name_auto_unless_a_reason_is_written_beside_the_key():
    """A precision key an example names is `auto`, or carries its reason in a comment on its line: a user copies an
    example, and a float32 written without a reason kept a 0.5B model's rollout in float32 where bf16 ran 4.7x
    faster."""
    import re
    from pathlib import Path

    root = Path(__file__).parent.parent / "examples"
    bare = [f"{path.relative_to(root)}:{n}: {line.strip()}" for path in sorted(root.rglob("*.yaml"))
            for n, line in enumerate(path.read_text().splitlines(), 1)
            if re.match(r"\s*(dtype|param_dtype|model_dtype):\s*(?!auto\b)\w+\s*$", line)]
    assert bare == []


# ------------------------------------------------------------------------------------------------ the passes
class _MP:
    param_dtype, reduce_dtype, buffer_dtype = "bf16", "fp32", "bf16"


def test_mixed_precision_computes_in_bf16_over_float32_weights(monkeypatch):
    monkeypatch.setenv(precision.MODE_ENV, "requested")
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    net.register_buffer("freq", torch.arange(4, dtype=torch.float32))
    precision.set_compute(net, choose("bf16", CPU), _MP(), CPU)
    assert getattr(net, precision.REDUCE_ATTR) == torch.float32
    assert net.freq.dtype == torch.bfloat16  # buffer_dtype while computing in bf16
    x = torch.randn(3, 8)
    with precision.autocast(net):
        y = net(x)
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in net.parameters())
    # the bf16 result is the float32 one to bf16's precision
    assert torch.allclose(y.float(), net(x), rtol=0.05, atol=0.05)
    # float32 compute: no autocast at all
    precision.set_compute(net, Choice(torch.float32, "fp32"))
    assert isinstance(precision.autocast(net), type(precision.contextlib.nullcontext()))


def test_a_bf16_rollout_samples_close_to_float32(monkeypatch, tmp_path):
    """The hf engine under autocast bf16 over float32 weights: its log-probs are the float32 forward's to bf16's
    precision, and the weights are untouched."""
    from transformers import AutoModelForCausalLM

    from rft.batch import Batch
    from rft.models.tiny import init_model
    from rft.rollout import HFRollout, SamplingParams
    from rft.workers.policy import forward_logprobs

    path = init_model("tiny", tmp_path / "m", seed=0)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    before = {n: p.clone() for n, p in model.named_parameters()}
    prompts = torch.randint(0, 250, (3, 5), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(prompts)
    engine = HFRollout(model, [274], 272, dtype=torch.bfloat16)
    out = engine.generate(prompts, mask, SamplingParams(n=2, max_tokens=8, ignore_eos=True),
                          torch.Generator().manual_seed(0))
    batch = Batch(prompt_ids=prompts.repeat_interleave(2, 0), prompt_mask=mask.repeat_interleave(2, 0),
                  response_ids=out.response_ids, response_mask=out.response_mask,
                  group=torch.arange(3).repeat_interleave(2))
    with torch.no_grad():
        fp32, _ = forward_logprobs(model, batch, 1.0)
    gap = (fp32 - out.logprobs).abs().max().item()
    assert 0 < gap < 0.1, gap  # bf16 rounding: not float32's 1e-6, not another distribution
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_a_grpo_step_in_bf16_trains_with_float32_state_and_logs_the_rollout_gap(monkeypatch, tmp_path):
    """RFT_CPU_PRECISION=requested: the actor computes in bf16 (autocast), the rollout in float32 (asked): every
    trainable parameter moves, weights and AdamW moments stay float32, and the old log-probs are recomputed in the
    training precision with the gap to the rollout's logged."""
    from rft.monitor import Timer
    from rft.orchestration.run import SyncRun

    monkeypatch.setenv(precision.MODE_ENV, "requested")
    assets = make_assets(tmp_path / "assets")
    cfg = rl_config(assets, tmp_path / "out", "actor_rollout_ref.rollout.dtype=float32",
                    "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16")
    run = SyncRun(cfg)
    assert describe(run.trainer.precision) == ("precision: rollout fp32, actor bf16 (RFT_CPU_PRECISION=requested); "
                                               "master weights and optimizer state fp32")  # the run's start line
    assert run.trainer.needs_old_logprobs  # rollout and update differ in precision
    before = trainable(run.trainer.model)
    metrics = run.train_step(1, Timer())
    assert_all_moved(before, run.trainer.model)
    assert all(p.dtype == torch.float32 for p in run.trainer.model.parameters())
    state = run.trainer.worker.optimizer.state
    assert state and all(v.dtype == torch.float32 for s in state.values() for v in s.values() if v.dim() > 0)
    gap = metrics["training/rollout_probs_diff_max"]
    assert 0 < gap < 0.5, gap  # bf16 against float32 log-probs of the same tokens


def test_float32_asked_runs_exactly_as_before(monkeypatch, tmp_path):
    """trainer.device cpu with float32 named everywhere: no autocast anywhere, whatever the mode (the numbers of
    earlier releases: the golden tests hold them)."""
    from rft.orchestration.run import SyncRun

    monkeypatch.setenv(precision.MODE_ENV, "requested")
    assets = make_assets(tmp_path / "assets")
    cfg = rl_config(assets, tmp_path / "out", "actor_rollout_ref.rollout.dtype=float32",
                    "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32")
    run = SyncRun(cfg)
    assert {k: c.dtype for k, c in run.trainer.precision.items()} == {"rollout": torch.float32,
                                                                       "actor": torch.float32}
    assert not run.trainer.needs_old_logprobs
    assert isinstance(precision.autocast(run.trainer.model), type(precision.contextlib.nullcontext()))


def test_sft_in_bf16_keeps_float32_weights_and_learns(monkeypatch, tmp_path):
    """rft sft with model.fsdp_config.model_dtype=bf16 (RFT_CPU_PRECISION=requested): the passes in bf16, the
    weights float32, every parameter moved and the loss falls over a few steps on the same rows."""
    from rft.trainer.configure import load_sft_config
    from rft.trainer.sft import SFTTrainer

    monkeypatch.setenv(precision.MODE_ENV, "requested")
    assets = make_assets(tmp_path / "assets")
    cfg = load_sft_config(None, [
        f"model.partial_pretrain={assets / 'model'}", f"data.train_files={assets / 'data' / 'train.parquet'}",
        "data.response_key=extra_info", "data.response_dict_keys=[answer]", "data.train_batch_size=8",
        "data.micro_batch_size_per_gpu=8", "data.max_length=32", "optim.lr=3e-3", "optim.weight_decay=0.0",
        "trainer.total_training_steps=4", "trainer.logger=[]", f"trainer.default_local_dir={tmp_path / 'out'}",
        "model.fsdp_config.model_dtype=bf16"])
    trainer = SFTTrainer(cfg)
    assert describe({"sft": trainer.precision}).startswith("precision: sft bf16 (RFT_CPU_PRECISION=requested)")
    before = trainable(trainer.model)
    rows = trainer.train_set.batch(trainer.sampler.next_batch(), trainer.tokenizer.pad_token_id)
    losses = []
    for step in range(1, 5):
        trainer.global_step = step
        losses.append(trainer.train_step(rows)["train/loss"])
    assert_all_moved(before, trainer.model)
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
    assert losses[-1] < losses[0], losses

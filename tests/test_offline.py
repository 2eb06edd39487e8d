"""rft generate, rft eval, rft merge: pass@k against a hand-computed case and a brute-force count, generate + eval
reproducing the demo's held-out accuracy, merge of one-process and DCP checkpoints (full and LoRA) equal to the
run's own export."""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import math
import os
import random
import shutil
from pathlib import Path

import pytest
import torch
from demo_run import short_demo
from rl_helpers import make_assets
from safetensors.torch import load_file

from rft.cli import main
from rft.data.io import read_rows, write_parquet
from rft.offline.score import default_ks, pass_at_k

os.environ["HF_HUB_OFFLINE"] = "1"


# ------------------------------------------------------------------------------------------------ pass@k
def test_pass_at_k_is_the_unbiased_estimator_by_brute_force():
    """1 - C(n-c, k)/C(n, k) is the share of the k-subsets of n responses that hold a passing one."""
    rng = random.Random(0)
    for _ in range(40):
        n = rng.randint(1, 8)
        c, k = rng.randint(0, n), rng.randint(1, n)
        passing = [True] * c + [False] * (n - c)
        subsets = list(itertools.combinations(range(n), k))
        expected = sum(any(passing[i] for i in s) for s in subsets) / len(subsets)
        assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12), (n, c, k)
    assert default_ks(1) == [1] and default_ks(5) == [1, 2, 4, 5] and default_ks(8) == [1, 2, 4, 8]
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def _row(question: str, truth: str, responses: list[str], source: str = "arithmetic") -> dict:
    return {"data_source": source, "prompt": [{"role": "user", "content": question}],
            "reward_model": {"style": "rule", "ground_truth": truth}, "responses": responses}


def test_rft_eval_on_a_hand_made_parquet_gives_the_hand_computed_pass_at_k(tmp_path, capsys):
    # prompt 1: 1 of 4 responses right (c=1); prompt 2: 2 of 4 (c=2); n = 4
    #   pass@1 = mean(c/n) = (1/4 + 2/4) / 2 = 0.375
    #   pass@2 = mean(1 - C(n-c,2)/C(4,2)) = ((1 - 3/6) + (1 - 1/6)) / 2 = (0.5 + 0.8333...) / 2 = 0.6666...
    #   pass@4 = 1 for both (n - c < 4)
    #   mean@4 = 3 right of 8 = 0.375; best@4 = 1 (each prompt has a right one)
    # gsm8k rows: 1 prompt, 2 responses, none right: every metric 0
    rows = [_row("2+2=", "4", ["4", "5", "3", "22"]), _row("3+5=", "8", ["8", "8", "7", "0"]),
            _row("q", "72", ["#### 71", "72"], source="openai/gsm8k")]
    path = write_parquet(rows, tmp_path / "responses.parquet")
    assert main(["eval", f"data.path={path}", "metrics.k=[1,2,4]"]) == 2  # gsm8k's rows have n = 2: k=4 too big
    assert "k must be at most n" in capsys.readouterr().err
    rows[2]["responses"] = ["#### 71", "72", "#### 70", "x"]
    path = write_parquet(rows, tmp_path / "responses.parquet")
    assert main(["eval", f"data.path={path}", "metrics.k=[1,2,4]"]) == 0
    report = json.loads((tmp_path / "responses.metrics.json").read_text())
    m = report["metrics"]
    assert m["eval/arithmetic/pass@1"] == pytest.approx(0.375)
    assert m["eval/arithmetic/pass@2"] == pytest.approx((0.5 + 5 / 6) / 2)
    assert m["eval/arithmetic/pass@4"] == pytest.approx(1.0)
    assert m["eval/arithmetic/reward/mean@4"] == pytest.approx(0.375)
    assert m["eval/arithmetic/reward/best@4"] == pytest.approx(1.0)
    assert m["eval/openai/gsm8k/pass@4"] == 0.0 and report["rows"] == {"arithmetic": 2, "openai/gsm8k": 1}
    scores = [json.loads(line) for line in (tmp_path / "responses.scores.jsonl").read_text().splitlines()]
    assert scores[0]["scores"] == [1.0, 0.0, 0.0, 0.0] and scores[0]["prompt"][0]["content"] == "2+2="
    assert "arithmetic (2 prompts x 4): reward/mean@4=0.3750" in capsys.readouterr().out


def test_rft_eval_never_writes_over_the_responses_it_scores(tmp_path, capsys):
    """metrics.output_path naming data.path wrote the metrics JSON over the responses (generate's output, gone); a
    folder or a path under a file ended in a raw OS error. Each is one line before anything is scored or written;
    the responses stay, byte for byte."""
    path = write_parquet([_row("2+2=", "4", ["4", "5"])], tmp_path / "responses.parquet")
    jsonl = tmp_path / "r.scores.jsonl"
    jsonl.write_text(json.dumps(_row("2+2=", "4", ["4", "5"])) + "\n")
    (tmp_path / "afile").write_text("mine")
    kept = {p: p.read_bytes() for p in (path, jsonl)}
    for data, out, line in (
            (path, path, f"metrics.output_path={str(path)!r} must be a .json file (the metrics; <name>.scores.jsonl "
                         "goes beside it), or null for <data.path without suffix>.metrics.json"),
            (path, tmp_path, "must be a .json file"),
            (path, tmp_path / "afile" / "m.json", f"metrics.output_path: {str(tmp_path / 'afile')!r} is a file, not "
                                                  "a folder; name another .json file for the metrics"),
            (jsonl, tmp_path / "r.json", f"metrics.output_path (its scores file, r.scores.jsonl): {str(jsonl)!r} is "
                                         "data.path, the responses it scores; name another .json file for the metrics")):
        assert main(["eval", f"data.path={data}", f"metrics.output_path={out}"]) == 2
        err = capsys.readouterr().err
        assert err.splitlines() == [f"rft: error: {err.splitlines()[0].removeprefix('rft: error: ')}"]
        assert line in err, err
    assert {p: p.read_bytes() for p in (path, jsonl)} == kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "r.scores.jsonl", "responses.parquet"]


def test_rft_eval_custom_reward_function_and_its_keys(tmp_path, capsys):
    (tmp_path / "r.py").write_text("def half(data_source, solution_str, ground_truth, extra_info=None):\n"
                                   "    return 0.5 if solution_str == ground_truth else 0.0\n")
    rows = [{"src": "s", "q": "a", "gt": "x", "outs": ["x", "y"]}]
    path = write_parquet(rows, tmp_path / "r.parquet")
    args = ["eval", f"data.path={path}", "data.prompt_key=q", "data.response_key=outs", "data.data_source_key=src",
            "data.reward_model_key=gt", f"custom_reward_function.path={tmp_path / 'r.py'}",
            "custom_reward_function.name=half", f"metrics.output_path={tmp_path / 'out.json'}"]
    assert main([*args, "metrics.pass_threshold=0.5"]) == 0
    m = json.loads((tmp_path / "out.json").read_text())["metrics"]
    assert m == {"eval/s/reward/mean@2": 0.25, "eval/s/reward/best@2": 0.5, "eval/s/pass@1": 0.5, "eval/s/pass@2": 1.0}
    assert main(args) == 0  # pass_threshold 1.0: a 0.5 never passes
    assert json.loads((tmp_path / "out.json").read_text())["metrics"]["eval/s/pass@2"] == 0.0
    assert main([*args, "data.response_key=nope"]) == 2
    err = capsys.readouterr().err
    assert "no column 'nope' (data.response_key)" in err and "set data.response_key=<one of them>" in err
    assert "the rows have the columns " in err and "outs" in err
    assert main([*args, "ray_init.num_cpus=4"]) == 2
    assert "ray_init.num_cpus=4 is not supported" in capsys.readouterr().err


def test_rft_eval_scores_rows_without_data_source_with_your_own_reward_as_rft_train_does(tmp_path, capsys):
    """Rows of a prompt and an answer column, no data_source (rft train reads them as "unknown", and rft generate
    keeps them as they were): with custom_reward_function.path, or a typed reward, rft eval scores them under
    "unknown"; the built-in scorers, chosen by the data source, still need the column."""
    (tmp_path / "r.py").write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                                   "    return float(solution_str == ground_truth)\n")
    path = write_parquet([{"prompt": "1+1=", "answer": "2", "responses": ["2", "3"]},
                          {"prompt": "2+2=", "answer": "4", "responses": ["5", "3"]}], tmp_path / "gen.parquet")
    args = ["eval", f"data.path={path}", "data.reward_model_key=answer"]
    assert main([*args, f"custom_reward_function.path={tmp_path / 'r.py'}"]) == 0
    report = json.loads((tmp_path / "gen.metrics.json").read_text())
    assert report["metrics"]["eval/unknown/reward/mean@2"] == 0.25 and report["rows"] == {"unknown": 2}
    assert main([*args, "custom_reward_function.reward_fn_type=math_boxed_reward"]) == 0  # no box: every score 0
    assert json.loads((tmp_path / "gen.metrics.json").read_text())["metrics"]["eval/unknown/reward/best@2"] == 0.0
    capsys.readouterr()
    # the built-in scorers: the columns the rows have and what those scorers need (the line said to set
    # data.data_source_key to one of answer, prompt, responses: none names a scorer)
    assert main(args) == 2
    needs = ("'data_source' (data.data_source_key: the name of the scorer of each row; built-in: apps, arithmetic, "
             "calculator, codecontests, codeforces, geometry3k, gsm8k, hiyouga/geometry3k, openai/gsm8k, shapes, taco)")
    tail = ("or score these rows with your own function (custom_reward_function.path) or a typed reward "
            "(custom_reward_function.reward_fn_type), with which a row without a data_source column is 'unknown'\n")
    assert capsys.readouterr().err == (f"rft: error: {path} row 0: no column 'data_source'; the rows have the columns "
                                       f"answer, prompt, responses, and the built-in scorers need {needs}: add it, "
                                       + tail)
    assert main(["eval", f"data.path={path}"]) == 2  # and no ground truth column either
    assert capsys.readouterr().err == (
        f"rft: error: {path} row 0: no column 'data_source'; the rows have the columns answer, prompt, responses, "
        f"and the built-in scorers need {needs} and 'reward_model' (data.reward_model_key: {{ground_truth: ...}} or "
        "the ground truth itself): add them, " + tail)
    # your own function, and no ground truth column: the columns the file has, not with the 'unknown' data_source
    assert main(["eval", f"data.path={path}", f"custom_reward_function.path={tmp_path / 'r.py'}"]) == 2
    assert capsys.readouterr().err == (f"rft: error: {path} row 0: no column 'reward_model' (data.reward_model_key); "
                                       "the rows have the columns answer, prompt, responses: set "
                                       "data.reward_model_key=<one of them>\n")


def test_rft_eval_honours_reward_fn_type_reward_kwargs_and_num_workers(tmp_path, capsys):
    """The reward keys rft train takes reach rft eval's reward function: a typed reward (math_boxed_reward: the last
    \\boxed{} against the ground truth, whatever the data source), reward_kwargs passed to path's functions, and the
    judge, which needs rft train's auxiliary models, refused."""
    rows = [_row("2+2=", "4", ["\\boxed{4}", "\\boxed{5}", "4"], source="no_scorer_for_this"),
            _row("3+5=", "8", ["so \\boxed{8}", "\\boxed{8.0}", "\\boxed{9}"], source="no_scorer_for_this")]
    path = write_parquet(rows, tmp_path / "boxed.parquet")
    typed = ["eval", f"data.path={path}", "custom_reward_function.reward_fn_type=math_boxed_reward"]
    assert main([*typed, "custom_reward_function.num_workers=1"]) == 0
    m = json.loads((tmp_path / "boxed.metrics.json").read_text())["metrics"]
    # row 1: 1 of 3 right (the bare "4" has no box); row 2: 2 of 3 (8.0 equals 8): mean@3 = 3/6
    assert m["eval/no_scorer_for_this/reward/mean@3"] == pytest.approx(0.5)
    assert m["eval/no_scorer_for_this/pass@1"] == pytest.approx((1 / 3 + 2 / 3) / 2)
    assert main(["eval", f"data.path={path}"]) == 2  # the built-in scorers have none for this data source
    capsys.readouterr()
    for extra, needle in ((["custom_reward_function.num_workers=0"], "num_workers must be an integer >= 1"),
                          (["custom_reward_function.reward_kwargs={a: 1}"], "the typed rewards take no arguments"),
                          (["custom_reward_function.name=f"], "which a typed reward does not read")):
        assert main([*typed, *extra]) == 2
        assert needle in capsys.readouterr().err, needle
    assert main(["eval", f"data.path={path}", "custom_reward_function.reward_fn_type=llm_judge"]) == 2
    assert "which this command does not serve" in capsys.readouterr().err
    assert main(["eval", f"data.path={path}", "custom_reward_function.reward_kwargs={a: 1}"]) == 2
    assert "the built-in scorers take no arguments" in capsys.readouterr().err

    (tmp_path / "r.py").write_text("def scaled(data_source, solution_str, ground_truth, extra_info=None, scale=1.0):\n"
                                   "    return scale * float(ground_truth in solution_str)\n")
    own = ["eval", f"data.path={path}", f"custom_reward_function.path={tmp_path / 'r.py'}",
           "custom_reward_function.name=scaled", "metrics.pass_threshold=0.5"]
    assert main([*own, "custom_reward_function.reward_kwargs={scale: 0.5}"]) == 0
    m = json.loads((tmp_path / "boxed.metrics.json").read_text())["metrics"]
    # the truth's text is in 2 responses of each row: 4 of 6 score scale = 0.5, the rest 0
    assert m["eval/no_scorer_for_this/reward/mean@3"] == pytest.approx(4 / 6 * 0.5)
    assert m["eval/no_scorer_for_this/reward/best@3"] == pytest.approx(0.5)


# ------------------------------------------------------------------------------------- generate + eval
def test_generate_then_eval_reproduce_the_demos_held_out_accuracy(tmp_path_factory, tmp_path, capsys):
    run = short_demo(tmp_path_factory)
    demo = json.loads((run / "demo.json").read_text())
    out = tmp_path / "val_responses.parquet"
    # the demo's held-out evaluation: greedy, 5 new tokens, every prompt in one batch
    assert main(["generate", f"data.path={run / 'data' / 'val.parquet'}", f"model.path={run / 'grpo' / 'model'}",
                 f"data.output_path={out}", "data.n_samples=1", "rollout.do_sample=false",
                 "rollout.response_length=5", "data.batch_size=256", "trainer.device=cpu"]) == 0
    rows = read_rows(out)
    assert len(rows) == 200 and all(len(r["responses"]) == 1 for r in rows)
    assert rows[0]["prompt"] == read_rows(run / "data" / "val.parquet")[0]["prompt"]  # the input rows, kept
    assert main(["eval", f"data.path={out}"]) == 0
    metrics = json.loads((tmp_path / "val_responses.metrics.json").read_text())["metrics"]
    assert metrics["eval/arithmetic/reward/mean@1"] == pytest.approx(demo["rl_accuracy"], abs=1e-9)
    assert metrics["eval/arithmetic/pass@1"] == pytest.approx(demo["rl_accuracy"], abs=1e-9)
    # and response by response: the demo's own held-out evaluation (rft.orchestration.demo.held_out_accuracy) says the same
    from rft.data.dataset import PromptDataset
    from rft.explorer.evaluate import eos_token_ids, evaluate
    from rft.models.load import load_causal_lm, load_tokenizer
    from rft.rewards import default_compute_score
    from rft.rollout import HFRollout, SamplingParams

    tokenizer = load_tokenizer(str(run / "grpo" / "model"))
    model = load_causal_lm(str(run / "grpo" / "model"), torch.float32, torch.device("cpu"))
    _, samples = evaluate(HFRollout(model, eos_token_ids(model, tokenizer), tokenizer.pad_token_id), tokenizer,
                          PromptDataset(run / "data" / "val.parquet", tokenizer), default_compute_score,
                          SamplingParams(n=1, do_sample=False, temperature=0.0, max_tokens=5))
    assert [r["responses"][0] for r in rows] == [s["response"] for s in samples]
    scores = [json.loads(line)["scores"][0] for line in (tmp_path / "val_responses.scores.jsonl").read_text().splitlines()]
    assert scores == [s["score"] for s in samples]
    capsys.readouterr()
    # sampled: n responses per prompt, reproducible from the seed
    def sampled(name: str) -> list:
        assert main(["generate", f"data.path={run / 'data' / 'val.parquet'}", f"model.path={run / 'grpo' / 'model'}",
                     f"data.output_path={tmp_path / name}", "data.n_samples=3", "rollout.response_length=5",
                     "data.batch_size=64"]) == 0
        return [r["responses"] for r in read_rows(tmp_path / name)]

    first = sampled("sampled.parquet")
    assert first == sampled("again.parquet") and all(len(r) == 3 for r in first)


def test_generate_from_a_bf16_folder_does_not_claim_to_export(tmp_path, caplog):
    """`rft generate` writes responses, not a model: its line about the folder's dtype says what it computes in and
    nothing about exporting (it said "exporting in bfloat16")."""
    from rft.models.families import init_family_model
    from rft.tasks import write_arithmetic

    model = init_family_model("llama", tmp_path / "bf16", dtype=torch.bfloat16)
    files = write_arithmetic(tmp_path / "d", n_train=4, n_val=2, seed=0)
    with caplog.at_level("INFO", logger="rft"):
        assert main(["generate", f"data.path={files['val']}", f"model.path={model}", "trainer.device=cpu",
                     f"data.output_path={tmp_path / 'o.parquet'}", "data.n_samples=1", "rollout.response_length=2",
                     "rollout.dtype=float32"]) == 0
    assert "is saved in bfloat16; computing in float32" in caplog.text
    assert "export" not in caplog.text, caplog.text


def test_generate_past_gpt2s_position_table_is_one_line_with_the_longest_response_that_fits(tmp_path, capsys):
    """A GPT-2 folder (512 learned positions, its n_positions) with rft generate's default response_length (512):
    one line naming the longest prompt and the response_length that fits, before the model loads, not an IndexError
    from the position table in the middle of generation; that response_length then generates."""
    from rft.models.families import init_family_model

    model = init_family_model("gpt2", tmp_path / "gpt2", tokenizer="base")
    assert json.loads((model / "config.json").read_text())["n_positions"] == 512
    (tmp_path / "p.jsonl").write_text('{"prompt": "1+2="}\n{"prompt": "12+34="}\n')
    base = ["generate", f"data.path={tmp_path / 'p.jsonl'}", f"model.path={model}", "data.n_samples=1",
            f"data.output_path={tmp_path / 'o.parquet'}", "rollout.dtype=float32", "rollout.do_sample=false"]
    prompt = len(read_rows(tmp_path / "p.jsonl")[1]["prompt"])  # the base tokenizer: BOS, then a token per byte
    assert main(base) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"rft: error: rollout.response_length=512: the longest prompt ({tmp_path / 'p.jsonl'} row 1, "
                   f"{prompt + 1} tokens) and its response need {prompt + 513} positions, more than the 512 of {model} "
                   f"(a learned position table, which has no position past it): lower rollout.response_length to "
                   f"at most {511 - prompt}"], err
    assert main([*base, f"rollout.response_length={511 - prompt}", "rollout.ignore_eos=true"]) == 0
    assert read_rows(tmp_path / "o.parquet")[1]["responses"]
    # a prompt over rft generate's own limit names that key, and offers no filter or truncation (it has neither)
    assert main([*base, f"rollout.prompt_length={prompt}", f"data.output_path={tmp_path / 'short.parquet'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"rft: error: {tmp_path / 'p.jsonl'} row 1: the prompt has {prompt + 1} tokens > "
                   f"rollout.prompt_length={prompt}; raise it"], err


def test_generate_refuses_what_it_cannot_honour(tmp_path, capsys):
    base = ["generate", "data.path=x.parquet", "model.path=m", f"data.output_path={tmp_path / 'o.parquet'}"]
    for extra, needle in ((["trainer.n_gpus_per_node=8"], "trainer.n_gpus_per_node=8 is not supported"),
                          (["rollout.name=vllm", "rollout.micro_batch_size=4"],
                           "rollout.micro_batch_size=4: rows per pass of the hf engine; vLLM schedules its own"),
                          *([] if importlib.util.find_spec("vllm") else [(["rollout.name=vllm"], "rollout.name=vllm: the vLLM engine needs "
                                                  "the vllm package, which is not installed here")]),
                          (["data.n_samples=0"], "data.n_samples must be a positive integer"),
                          (["data.output_path=o.jsonl"], "must be a .parquet file"),
                          # the prompts file was replaced by the responses
                          (["data.output_path=./x.parquet"], "data.output_path='./x.parquet' is data.path: the prompts "
                           "would be replaced by the responses; name another .parquet file"),
                          ([], "data.path: file 'x.parquet' does not exist")):
        assert main([*base, *extra]) == 2
        assert needle in capsys.readouterr().err, needle


def test_generate_again_says_its_output_is_complete_and_other_inputs_are_refused(tmp_path, capsys):
    """rft generate run again after it finished generated everything again and replaced the file without a word;
    run with another sampling key, other prompts or another model, it replaced the responses of the first inputs.
    Now the same inputs are one line and exit 0, nothing written; other ones are one line naming what changed."""
    from rft.models.tiny import init_model

    model = init_model("tiny", tmp_path / "m", seed=0)
    prompts = write_parquet([{"prompt": [{"role": "user", "content": f"{i}+1="}]} for i in range(3)],
                            tmp_path / "p.parquet")
    out = tmp_path / "o.parquet"
    base = ["generate", f"data.path={prompts}", f"model.path={model}", f"data.output_path={out}",
            "data.n_samples=2", "rollout.response_length=3", "rollout.dtype=float32", "trainer.device=cpu"]
    assert main(base) == 0
    first = (out.read_bytes(), out.stat().st_mtime_ns)
    capsys.readouterr()
    assert main(base) == 0
    said = capsys.readouterr()
    assert said.out == (f"rft generate: data.output_path {str(out)!r} already holds the responses of these inputs "
                        "(3 prompts x 2 responses; the same data.path, model.path and keys): nothing generated "
                        "(remove it to generate again)\n") and said.err == ""
    refused = (f"rft: error: data.output_path {str(out)!r} holds the responses of other inputs ({{}}), which "
               "generating would replace; name another data.output_path, or remove it to generate again\n")
    assert main([*base, "rollout.temperature=0.5"]) == 2
    assert capsys.readouterr().err == refused.format("rollout.temperature was 1.0, now 0.5")
    assert main([*base, "data.n_samples=4", "trainer.seed=1"]) == 2
    assert capsys.readouterr().err == refused.format("trainer.seed was 0, now 1; data.n_samples was 2, now 4")
    write_parquet([{"prompt": [{"role": "user", "content": f"{i}+2="}]} for i in range(3)], prompts)
    assert main(base) == 2
    assert capsys.readouterr().err == refused.format("the contents of data.path changed")
    write_parquet([{"prompt": [{"role": "user", "content": f"{i}+1="}]} for i in range(3)], prompts)
    other = init_model("tiny", tmp_path / "m2", seed=1)
    assert main([*base[:2], f"model.path={other}", *base[3:]]) == 2
    assert capsys.readouterr().err == refused.format(f"model.path was {model.resolve()}, now {other.resolve()}")
    assert (out.read_bytes(), out.stat().st_mtime_ns) == first  # never replaced
    # an output an older rft wrote, before data.apply_chat_template_kwargs existed: its record lacks the key, which
    # is at its default now (the same output), so it is complete; set, the key is a change that names it
    import pyarrow.parquet as pq

    from rft.offline.generate import RECORD_KEY

    table = pq.read_table(out)
    record = json.loads(table.schema.metadata[RECORD_KEY])
    del record["data.apply_chat_template_kwargs"]
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, RECORD_KEY: json.dumps(record).encode()}),
                   out)
    capsys.readouterr()
    assert main(base) == 0
    assert "already holds the responses of these inputs" in capsys.readouterr().out
    assert main([*base, "data.apply_chat_template_kwargs={enable_thinking: false}"]) == 2
    assert capsys.readouterr().err == refused.format(
        'data.apply_chat_template_kwargs was (not recorded), now {"enable_thinking": false}')
    assert main(base) == 0 and "nothing generated" in capsys.readouterr().out  # the same prompts' bytes again
    # a file rft generate recorded nothing in (a user's, an older rft's output) is not replaced either
    mine = write_parquet([{"a": 1}], tmp_path / "mine.parquet")
    assert main([*base[:3], f"data.output_path={mine}", *base[4:]]) == 2
    assert capsys.readouterr().err == (
        f"rft: error: data.output_path {str(mine)!r} exists and holds no record of what rft generate made it from (a "
        "file of yours, or one an older rft wrote), which generating would replace; name another data.output_path, "
        "or remove it to generate again\n")
    assert read_rows(mine) == [{"a": 1}]


# ------------------------------------------------------------------------------------------------- merge
@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    return make_assets(tmp_path_factory.mktemp("merge_assets"))


def _train(assets: Path, out: Path, *extra: str) -> None:
    assert main(["train", f"actor_rollout_ref.model.path={assets / 'model'}",
                 f"data.train_files={assets / 'data' / 'train.parquet'}",
                 f"custom_reward_function.path={assets / 'reward.py'}", "data.max_prompt_length=32",
                 "data.max_response_length=4", "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                 "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.optim.lr=1e-2",
                 "actor_rollout_ref.actor.optim.weight_decay=0", "trainer.total_training_steps=1", "trainer.save_freq=1",
                 "trainer.logger=[]", f"trainer.default_local_dir={out}", *extra]) == 0


def _same_weights(a: Path, b: Path) -> float:
    x, y = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert sorted(x) == sorted(y)
    return max(float((x[k] - y[k]).abs().max()) for k in x)


@pytest.mark.parametrize("lora", [0, 4])
def test_merge_a_checkpoint_equals_the_runs_own_export(assets, tmp_path, lora, capsys):
    run = tmp_path / "run"
    _train(assets, run, f"actor_rollout_ref.model.lora_rank={lora}")
    assert main(["merge", str(run), str(tmp_path / "merged")]) == 0
    assert ("LoRA merged" if lora else "full weights") in capsys.readouterr().out
    assert _same_weights(run / "model", tmp_path / "merged") == 0.0
    assert _same_weights(assets / "model", tmp_path / "merged") > 0  # the step moved the weights
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(tmp_path / "merged")  # a Hugging Face folder

    # the same checkpoint as several processes write it: a DCP folder of the trainable weights
    from rft.models.load import load_trainable_model
    from rft.trainer.checkpoint import load_policy_weights, write_manifest
    from rft.trainer.configure import load_config
    from rft.workers.fsdp import save_sharded

    cfg = load_config(run / "config.yaml", validate_paths=False)
    model = load_trainable_model(str(assets / "model"), cfg.actor_rollout_ref.model, torch.float32,
                                 torch.device("cpu"), key="actor_rollout_ref.model")
    step = run / "checkpoints" / "global_step_1"
    load_policy_weights(step, model)
    dcp = tmp_path / "dcp_run" / "checkpoints" / "global_step_1"
    shutil.copytree(step, dcp, ignore=shutil.ignore_patterns("policy.safetensors", "manifest.json"))
    shutil.copy(run / "config.yaml", tmp_path / "dcp_run" / "config.yaml")
    save_sharded(dcp / "policy_dcp", model, None)
    write_manifest(dcp)
    assert main(["merge", str(dcp), str(tmp_path / "merged_dcp")]) == 0
    assert _same_weights(run / "model", tmp_path / "merged_dcp") == 0.0


def test_merge_needs_the_runs_config(assets, tmp_path, capsys):
    run = tmp_path / "run"
    _train(assets, run)
    (run / "config.yaml").rename(tmp_path / "elsewhere.yaml")
    assert main(["merge", str(run / "checkpoints"), str(tmp_path / "m")]) == 2
    assert "rebuilds the model from the run's config.yaml" in capsys.readouterr().err
    assert main(["merge", str(run), str(tmp_path / "m"), "--config", str(tmp_path / "elsewhere.yaml")]) == 0
    assert math.isclose(_same_weights(run / "model", tmp_path / "m"), 0.0)


def test_merge_again_says_its_output_is_complete_and_other_inputs_are_refused(assets, tmp_path, capsys):
    """rft merge run again after it finished rebuilt and rewrote the model; into a folder merged from another
    checkpoint, it replaced it without a word. Now the same inputs are one line and exit 0, nothing written (the
    record: rft_merge.json in OUT); other ones are one line naming what changed, replaced only with --overwrite."""
    run = tmp_path / "run"
    _train(assets, run, "trainer.total_training_steps=2")
    out = tmp_path / "merged"
    assert main(["merge", str(run), str(out)]) == 0
    step2 = run / "checkpoints" / "global_step_2"
    assert json.loads((out / "rft_merge.json").read_text())["the checkpoint"] == str(step2.resolve())
    weights = (out / "model.safetensors").stat().st_mtime_ns
    capsys.readouterr()
    assert main(["merge", str(run), str(out)]) == 0
    said = capsys.readouterr()
    assert said.out == (f"rft merge: {str(out)!r} already holds this merge of {step2.resolve()} (the same checkpoint, "
                        "config and starting model): nothing written (remove it to merge again)\n") and said.err == ""
    step1 = run / "checkpoints" / "global_step_1"
    assert main(["merge", str(step1), str(out)]) == 2
    assert capsys.readouterr().err == (
        f"rft: error: rft merge: the output {str(out)!r} holds a merge of other inputs (the checkpoint was "
        f"{step2.resolve()}, now {step1.resolve()}), which merging would replace; name another folder, remove it, or "
        "pass --overwrite to replace it\n")
    assert (out / "model.safetensors").stat().st_mtime_ns == weights
    assert main(["merge", str(step1), str(out), "--overwrite"]) == 0
    assert (out / "model.safetensors").stat().st_mtime_ns != weights
    assert json.loads((out / "rft_merge.json").read_text())["the checkpoint"] == str(step1.resolve())
    # a model folder no merge recorded (here the run's own export) is replaced only with --overwrite
    assert main(["merge", str(run), str(run / "model")]) == 2
    assert capsys.readouterr().err == (
        f"rft: error: rft merge: the output {str(run / 'model')!r} holds a model no rft merge recorded (a run's own "
        "model/, a model of yours, or an older rft's merge), which merging would replace; name another folder, "
        "remove it, or pass --overwrite to replace it\n")
    # a second rft merge into a folder one is writing (an flock on it: fsutil.sole_writer) is refused, not raced
    import fcntl

    busy = tmp_path / "busy"
    busy.mkdir()
    held = os.open(busy, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        assert main(["merge", str(run), str(busy)]) == 2
    finally:
        os.close(held)
    assert capsys.readouterr().err == (
        f"rft: error: rft merge: another process is writing {str(busy)!r} now (the same command twice at once: the "
        "last to end would replace the first one's output); wait for it to end, or name another folder\n")
    assert list(busy.iterdir()) == []


def test_merge_of_a_run_without_checkpoints_names_its_model_folder(tmp_path, capsys):
    """`rft merge dpo_out m2` on a run that saved no checkpoint (trainer.save_freq unset, the default) says why, and
    names dpo_out/model, the run's final export, as the model it wants; without one, how to get a checkpoint."""
    run = tmp_path / "dpo_out"
    (run / "model").mkdir(parents=True)
    assert main(["merge", str(run), str(tmp_path / "m2")]) == 2
    why = (f"rft: error: {str(run)!r} is not a checkpoint (global_step_N with trainer_state.json), nor a checkpoints/ "
           "or run folder holding one; runs write checkpoints only with trainer.save_freq set (rft train, sft and dpo: "
           "none by default)")
    assert capsys.readouterr().err == why + "; rerun with trainer.save_freq=N to merge a step's weights\n"
    (run / "model" / "config.json").write_text("{}")
    (run / "model" / "model.safetensors").write_bytes(b"")
    assert main(["merge", str(run), str(tmp_path / "m2")]) == 2
    assert capsys.readouterr().err == (why + f"; {str(run / 'model')!r} is already a Hugging Face model (the run's "
                                       "final export): nothing to merge, use it as it is\n")
    assert not (tmp_path / "m2").exists()


def test_offline_examples_load():
    from rft.trainer.configure import load_eval_config, load_generation_config

    root = Path(__file__).resolve().parents[1] / "examples" / "offline"
    generation = load_generation_config(root / "generate.yaml", validate_paths=False)
    assert generation.data.n_samples == 1 and generation.rollout.do_sample is False
    evaluation = load_eval_config(root / "eval.yaml", validate_paths=False)
    assert evaluation.data.path == generation.data.output_path  # eval reads what generate writes


def test_outputs_are_checked_before_the_work_and_a_users_file_is_never_replaced(assets, tmp_path, capsys):
    """rft merge onto an existing file (it used to delete it), onto a folder of the user's, and rft generate under
    a path whose parent is a file (it used to generate everything first): one line each, nothing touched."""
    run = tmp_path / "run"
    _train(assets, run)
    afile = tmp_path / "afile"
    afile.write_text("mine")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine too")
    for out, needle in ((afile, "is a file; name a new folder"), (mine, "is a folder that holds no model"),
                        (afile / "m", "is a file, not a folder")):
        assert main(["merge", str(run), str(out)]) == 2
        assert needle in capsys.readouterr().err, needle
    assert afile.read_text() == "mine" and (mine / "notes.txt").read_text() == "mine too"
    assert main(["merge", str(run), str(run / "model"), "--overwrite"]) == 0  # a model folder: with --overwrite
    # but not the model the run started from, which its resume and every later merge rebuild the model from
    start = assets / "model"
    weights = (start / "model.safetensors").read_bytes()
    assert main(["merge", str(run), f"{start}/"]) == 2
    assert capsys.readouterr().err == (f"rft: error: rft merge: the output '{start}/' is the model folder the run "
                                       f"started from ({run / 'config.yaml'}), which its resume, and every merge of "
                                       "its checkpoints, rebuild the model from; name a new folder\n")
    assert (start / "model.safetensors").read_bytes() == weights
    with contextlib.chdir(run / "model"):  # '.' of a model folder: 'unexpected ValueError ... a bug in rft'
        assert main(["merge", str(run), "."]) == 2
    assert capsys.readouterr().err == ("rft: error: rft merge: the output '.' is this folder or one that holds it, "
                                       "which writing there would replace; name a new one\n")
    assert main(["generate", f"data.path={assets / 'data' / 'val.parquet'}", f"model.path={assets / 'model'}",
                 f"data.output_path={afile / 'o.parquet'}"]) == 2
    err = capsys.readouterr().err
    assert "data.output_path: " in err and "is a file, not a folder" in err and "prompts" not in err


def test_merge_of_a_folder_that_does_not_exist_says_so(tmp_path, capsys):
    """`rft merge grpo merged` before the run (or with its name misspelt) says the folder does not exist, not that
    runs write no checkpoints without trainer.save_freq."""
    (tmp_path / "grpo_run").mkdir()
    assert main(["merge", str(tmp_path / "grpo_rn"), str(tmp_path / "merged")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rft: error: {str(tmp_path / 'grpo_rn')!r} does not exist"), err
    assert "save_freq" not in err and "'grpo_run'" in err
    assert not (tmp_path / "merged").exists()


def test_merge_of_a_checkpoint_a_live_run_removes_meanwhile_says_so(assets, tmp_path, capsys, monkeypatch):
    """A live run keeping trainer.max_ckpt_to_keep removes a checkpoint after its next save, maybe while rft merge
    reads it: the line was the bare 'No such file or directory: .../policy.safetensors'; now it says what happened
    and what to do, and nothing is written."""
    from rft.trainer import checkpoint

    run = tmp_path / "run"
    _train(assets, run)
    real = checkpoint.load_policy_weights

    def removed_meanwhile(folder, model):
        shutil.rmtree(folder)  # the run's next save replaced it
        return real(folder, model)

    monkeypatch.setattr(checkpoint, "load_policy_weights", removed_meanwhile)
    assert main(["merge", str(run), str(tmp_path / "merged")]) == 2
    step = run / "checkpoints" / "global_step_1"
    assert capsys.readouterr().err == (
        f"rft: error: checkpoint {step} was removed while rft merge read it (the run in {run} replaced it with a newer "
        "one, as trainer.max_ckpt_to_keep has it); run the same command again, or merge once the run has finished\n")
    assert not (tmp_path / "merged").exists()


def test_a_damaged_input_parquet_names_the_key_that_points_at_it(assets, tmp_path, capsys):
    """rft generate / rft eval read data.path; a truncated parquet there said to point data.train_files / val_files
    (rft train's keys) at another file."""
    whole = write_parquet([_row("2+2=", "4", ["4"])], tmp_path / "whole.parquet")
    damaged = tmp_path / "damaged.parquet"
    damaged.write_bytes(whole.read_bytes()[:100])
    for argv in (["eval", f"data.path={damaged}"],
                 ["generate", f"data.path={damaged}", f"model.path={assets / 'model'}",
                  f"data.output_path={tmp_path / 'o.parquet'}"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"rft: error: data file {str(damaged)!r} is not a readable parquet file") and \
            err.endswith("; write it again (e.g. `rft data ...`) or point data.path at another file\n"), err

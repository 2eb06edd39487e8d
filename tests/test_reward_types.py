"""Issue 14 item 3: reward functions by type (custom_reward_function.reward_fn_type, Trinity-RFT's names), math-verify
equivalence on every GSM8K test gold, the countdown and format rules on hand-made cases, the config key's refusals,
parallel scoring equal to the in-process loop, and one `rft train` step with math_reward logging its parts."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from rft.config import ConfigError
from rft.config.schema import CustomRewardConfig
from rft.errors import RewardError
from rft.rewards import (
    REWARD_FN_TYPES,
    accuracy_reward,
    build_reward_fn,
    countdown_reward,
    format_reward,
    math_answers,
    math_boxed_reward,
    math_reward,
    score_responses,
)
from rft.rewards.countdown import countdown_equation, countdown_task, evaluate
from rft.rewards.math_answers import answer_span, gold_text, last_boxed
from rft.rewards.parallel import MIN_ROWS_PER_WORKER, shutdown
from rft.rewards.runner import BudgetExceeded, RewardFunction, call_with_timeout, within_budget
from rft.trainer.configure import load_config
from rft.trainer.validate import validate

GSM8K_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k"


def gsm8k_test() -> list[dict]:
    path = GSM8K_DIR / "test.jsonl"
    if not path.is_file():
        pytest.skip(f"GSM8K not found under {GSM8K_DIR}")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wrong_digit(number: str) -> str:
    """`number` with its first digit changed (never to a leading zero): 72 -> 82, 9 -> 0, 95 -> 15, -3 -> -4."""
    sign, digits = ("-", number[1:]) if number.startswith("-") else ("", number)
    first = (int(digits[0]) + 1) % 10
    if first == 0 and len(digits) > 1:
        first = 1
    return sign + str(first) + digits[1:]


# ------------------------------------------------------------------------------------------ math_reward on GSM8K
def test_math_reward_accepts_every_gsm8k_test_gold_and_rejects_perturbed_answers():
    examples = gsm8k_test()
    assert len(examples) == 1319
    tally = {"#### N": 0, "\\boxed{N}": 0, "int gold": 0, "N+1": 0, "wrong digit": 0, "empty": 0}
    for example in examples:
        solution = example["answer"]  # the reference solution, "... #### N": a ground truth math_reward reads
        gold = solution.rsplit("####", 1)[1].strip().replace(",", "")
        right = [("#### N", f"#### {gold}", solution), ("\\boxed{N}", f"\\boxed{{{gold}}}", gold),
                 ("int gold", f"The answer is {gold}.", int(gold))]
        for case, response, truth in right:
            result = math_reward("openai/gsm8k", response, truth)
            # a bare answer: accuracy 1.0 and Trinity's format_score -0.1 (no think / answer tags)
            assert result == {"score": 0.9, "accuracy": 1.0, "format_score": -0.1, "math_verify_timeout": 0.0}, \
                (case, response, truth, result)
            tally[case] += 1
        wrong = [("N+1", f"#### {int(gold) + 1}"), ("wrong digit", f"\\boxed{{{wrong_digit(gold)}}}"), ("empty", "")]
        for case, response in wrong:
            result = math_reward("openai/gsm8k", response, solution)
            assert result["accuracy"] == 0.0 and result["score"] == -0.1, (case, response, gold, result)
            tally[case] += 1
    assert tally == dict.fromkeys(tally, 1319)  # 1319 / 1319 golds accepted, every perturbation rejected


def test_wrong_digit_changes_the_number():
    assert [wrong_digit(n) for n in ("72", "9", "95", "-3", "105")] == ["82", "0", "15", "-4", "205"]


# ------------------------------------------------------------------------------------------ math rewards, by hand
@pytest.mark.parametrize("response, truth, accuracy, fmt", [
    # Trinity's values: accuracy (math-verify) + format_score (+0.1 with <think>..</think> <answer>..</answer>)
    ("<think>half of 1</think>\n<answer>\\frac{1}{2}</answer>", 0.5, 1.0, 0.1),        # 1.0 + 0.1 = 1.1
    ("<think>half of 1</think> <answer>0.4</answer>", "\\frac{1}{2}", 0.0, 0.1),      # 0.0 + 0.1 = 0.1
    ("so 2/4 of it.\n#### 1/2", "$\\frac{1}{2}$", 1.0, -0.1),                        # 1.0 - 0.1 = 0.9
    ("#### 1,234", "1234", 1.0, -0.1),                                                  # thousands commas
    ("#### 3.50", 3.5, 1.0, -0.1),
    ("The answer is $x^2+2x+1$", "(x+1)^2", 1.0, -0.1),                                 # symbolic equality
    ("#### 12\nwait, no: #### 13", "12", 0.0, -0.1),                                    # the last #### counts
    ("<answer>12</answer> and later 13", "12", 1.0, -0.1),                              # the <answer> counts
    ("", "12", 0.0, -0.1),
])
def test_math_reward_by_hand(response, truth, accuracy, fmt):
    result = math_reward("any", response, truth)
    assert result == {"score": pytest.approx(accuracy + fmt), "accuracy": accuracy, "format_score": fmt,
                      "math_verify_timeout": 0.0}


def test_answer_span_and_gold_text():
    assert answer_span("<think>x</think><answer>\n7\n</answer>") == "\n7\n"  # across lines (Trinity's format puts it)
    assert answer_span("steps 1 2 3\n#### 6") == " 6"
    assert answer_span("it is 6") == "it is 6"
    assert gold_text("He pays 2*600=<<2*600=1200>>1200\n#### 1,200") == "1200"
    assert gold_text(72) == "72" and gold_text(0.5) == "0.5" and gold_text(1e-7) == "0.0000001"
    assert gold_text("  \\frac{1}{2} ") == "\\frac{1}{2}"
    for bad, needle in ((None, "no reward_model.ground_truth"), ("", "holds no answer"), ("#### ", "holds no answer"),
                        (True, "is a bool"), ([1], "is a list"), (float("nan"), "not a finite number")):
        with pytest.raises(ValueError, match=needle):
            gold_text(bad)


def test_an_unparseable_ground_truth_is_an_error_not_a_zero():
    with pytest.raises(ValueError, match="math-verify finds no answer in the ground truth"):
        math_reward("any", "#### 5", "\\frac{")
    fn = build_reward_fn(None, reward_fn_type="math_reward", timeout=10.0)
    with pytest.raises(RewardError, match=r"raised ValueError: math-verify finds no answer .* on row 0"):
        score_responses(fn, ["d"], ["#### 5"], ["\\frac{"], [None])


@pytest.mark.parametrize("response, accuracy", [
    ("so $\\boxed{3}$", 1.0),
    ("The final answer is $3$", 1.0),  # LaTeX after an answer phrase
    ("3", 0.0),                        # open-r1's extraction reads no bare number
    ("#### 3", 0.0),
    ("$\\boxed{4}$", 0.0),
])
def test_accuracy_reward_by_hand(response, accuracy):
    assert accuracy_reward("any", response, "3") == {"score": accuracy, "accuracy": accuracy,
                                                     "math_verify_timeout": 0.0}


@pytest.mark.parametrize("response, boxed, accuracy", [
    ("first \\boxed{4}, then \\boxed{\\frac{6}{2}}", "\\frac{6}{2}", 1.0),  # the last one, nested braces
    ("\\fbox{3}", "3", 1.0),
    ("\\boxed 3$ done", "3", 1.0),
    ("\\boxed{3", None, 0.0),                                                # never closes
    ("3", None, 0.0),                                                        # no box: 0 whatever the number
])
def test_math_boxed_reward_by_hand(response, boxed, accuracy):
    assert last_boxed(response) == boxed
    assert math_boxed_reward("any", response, "3") == {"score": accuracy, "accuracy": accuracy,
                                                       "math_verify_timeout": 0.0}
    assert REWARD_FN_TYPES.get("math_dapo_reward") is REWARD_FN_TYPES.get("math_boxed_reward")


def test_a_math_check_that_runs_out_of_time_counts_as_wrong(monkeypatch):
    def slow(gold, answer_text, kind):
        time.sleep(600)
        return True

    monkeypatch.setattr(math_answers, "_equivalent", slow)
    monkeypatch.setattr(math_answers, "MATH_VERIFY_SECONDS", 0.2)
    start = time.monotonic()
    assert math_reward("any", "#### 5", "5") == {"score": -0.1, "accuracy": 0.0, "format_score": -0.1,
                                                 "math_verify_timeout": 1.0}
    assert time.monotonic() - start < 120  # cut at 0.2 s, not slept out


# ------------------------------------------------------------------------------------------ nested time limits
def test_within_budget_stops_the_function_and_restores_the_timer_it_found():
    start = time.monotonic()
    outer = signal.getitimer(signal.ITIMER_REAL)[0]  # pytest-timeout's alarm, when it runs with signals
    with pytest.raises(BudgetExceeded, match="took longer than 0.2 s"):
        within_budget(0.2, time.sleep, 600)
    assert within_budget(1.0, sum, [1, 2]) == 3
    left = signal.getitimer(signal.ITIMER_REAL)[0]
    elapsed = time.monotonic() - start  # read after the timer: the outer timer ran at most this long since
    assert elapsed < 120  # cut at 0.2 s, not slept out
    assert left == 0 if outer == 0 else outer - elapsed - 0.05 < left <= outer - 0.2


def test_the_outer_limit_survives_an_inner_budget():
    def quick_then_slow():
        within_budget(300.0, sum, [1])  # re-arms the outer timer it found
        time.sleep(600)

    start = time.monotonic()
    with pytest.raises(TimeoutError, match="took longer than 0.4 s"):
        call_with_timeout(quick_then_slow, (), 0.4)
    assert time.monotonic() - start < 120  # the outer 0.4 s, not the sleep

    start = time.monotonic()
    with pytest.raises(TimeoutError, match="took longer than 0.3 s"):  # the outer limit is the shorter: it fires
        call_with_timeout(within_budget, (300.0, time.sleep, 600), 0.3)
    assert time.monotonic() - start < 120


# ------------------------------------------------------------------------------------------ format_reward
@pytest.mark.parametrize("response, score", [
    ("<think>\nadd them\n</think>\n<answer>\n7\n</answer>", 0.1),
    ("<think>\nadd them\n</think>\n<answer>\n7\n</answer>\nthanks", 0.1),  # MULTILINE: later lines are allowed
    ("<think>add them</think>\n<answer>\n7\n</answer>", -0.1),             # the tags on lines of their own
    ("Sure. <think>\nadd them\n</think>\n<answer>\n7\n</answer>", -0.1),   # it must open with <think>
    ("<think>\nadd them\n</think>\n7", -0.1),
    ("", -0.1),
])
def test_format_reward_by_hand(response, score):
    assert format_reward("any", response, None) == {"score": score, "format_score": score}


# ------------------------------------------------------------------------------------------ countdown_reward
TASK = {"target": 24, "numbers": [3, 3, 8, 8]}


@pytest.mark.parametrize("response, score, accuracy, fmt", [
    ("<think>8/(3-8/3) is 8/(1/3)</think>\n<answer>8 / (3 - 8 / 3)</answer>", 1.0, 1.0, 1.0),  # exact: 24
    ("<answer>8/(3-8/3)</answer>\n", 1.0, 1.0, 1.0),       # a trailing newline keeps the answer (rft)
    ("<answer>8*3+3-8+8-8</answer>", 0.1, 0.0, 1.0),       # numbers used more than once
    ("<answer>8*3</answer>", 0.1, 0.0, 1.0),               # not every number
    ("<answer>8+8+3+3</answer>", 0.1, 0.0, 1.0),           # every number once, 22 != 24
    ("<answer>8/(3-3)*8</answer>", 0.1, 0.0, 1.0),         # division by zero
    ("<answer>3**3-8/8</answer>", 0.1, 0.0, 1.0),          # ** is no Countdown operation (eval would give 26)
    ("<answer>8*3+(8-8)//3</answer>", 0.1, 0.0, 1.0),      # nor //, though eval gives 24
    ("<answer>__import__('os')</answer>", 0.1, 0.0, 1.0),  # never evaluated
    ("<answer>8/(3-8/3)</answer>\nDone.", 0.0, 0.0, 0.0),  # the answer must be on the last line
    ("8/(3-8/3)", 0.0, 0.0, 0.0),
])
def test_countdown_reward_by_hand(response, score, accuracy, fmt):
    assert countdown_reward("countdown", response, TASK) == {"score": score, "accuracy": accuracy, "format": fmt}
    # Trinity's form of the ground truth: JSON text
    assert countdown_reward("countdown", response, json.dumps(TASK))["score"] == score


def test_countdown_parts():
    assert countdown_equation("a\n<answer>1+2</answer> <answer> 3+4 </answer>") == "3+4"
    assert evaluate("-(1-3)*4") == 8 and evaluate("7/2") == 3.5 and evaluate("1.5+2") is None
    assert countdown_task('{"target": 0.1, "numbers": [1, 10]}')[0] == evaluate("1/10")
    for bad, needle in (("{oops", "not JSON"), ({"target": 3}, "must be"), ({"target": "3", "numbers": [3]}, "target"),
                        ({"target": 3, "numbers": "12"}, "list of integers"), ({"target": 3, "numbers": [1.5]},
                                                                               "integers"), (None, "no reward_model")):
        with pytest.raises(ValueError, match=needle):
            countdown_task(bad)


# ------------------------------------------------------------------------------------------ the registry and the key
def test_the_schema_lists_the_registered_types():
    from dataclasses import fields

    choices = next(f for f in fields(CustomRewardConfig) if f.name == "reward_fn_type").metadata["choices"]
    assert set(choices) == {None, "llm_judge", *REWARD_FN_TYPES.names()}  # the judge: rft.rewards.judge
    assert REWARD_FN_TYPES.names() == ["accuracy_reward", "bots_math_boxed_reward", "countdown_reward", "format_reward",
                                       "math_boxed_reward", "math_boxed_reward_naive_dapo", "math_dapo_reward",
                                       "math_reward", "math_verify_reward"]


def cfg(tmp_path, *overrides: str):
    data = tmp_path / "rows.jsonl"
    if not data.exists():
        data.write_text(json.dumps({"prompt": "1+1=", "data_source": "d", "reward_model": {"ground_truth": "2"}}) + "\n")
    return load_config(None, [f"data.train_files={data}", "actor_rollout_ref.model.path=m", *overrides],
                       validate_paths=False)


@pytest.mark.parametrize("overrides, needle", [
    (["custom_reward_function.reward_fn_type=math_rewards"],
     "custom_reward_function.reward_fn_type='math_rewards' is not allowed; choose one of ['math_reward', "
     "'accuracy_reward', 'math_boxed_reward', 'math_dapo_reward', 'math_verify_reward', 'bots_math_boxed_reward', "
     "'math_boxed_reward_naive_dapo', 'format_reward', 'countdown_reward', 'llm_judge'] or leave it unset; did you "
     "mean 'math_reward'?"),
    (["custom_reward_function.reward_fn_type=math_reward", "custom_reward_function.path=r.py"],
     "and custom_reward_function.path='r.py' are both set: each chooses the run's reward function"),
    (["custom_reward_function.reward_fn_type=math_reward", "custom_reward_function.name=judge"],
     "name picks a function of custom_reward_function.path, which a typed reward does not read"),
    (["custom_reward_function.reward_fn_type=countdown_reward", "custom_reward_function.reward_weights=[1.0,2.0]"],
     "must hold 1 finite number(s), one per reward function (countdown_reward)"),
    (["custom_reward_function.reward_fn_type=math_reward", "reward_model.enable=true", "reward_model.model.path=m"],
     "with reward_model.enable=true and reward_model.rule_weight=0 the reward function never runs"),
    (["custom_reward_function.num_workers=0"], "num_workers must be an integer >= 1 or null, got 0"),
])
def test_the_key_refuses_what_it_cannot_honour(tmp_path, overrides, needle):
    with pytest.raises(ConfigError) as e:
        cfg(tmp_path, *overrides)
    assert needle in str(e.value)


def test_the_key_loads_with_one_weight_and_workers(tmp_path):
    config = cfg(tmp_path, "custom_reward_function.reward_fn_type=countdown_reward",
                 "custom_reward_function.reward_weights=[2.0]", "custom_reward_function.num_workers=2")
    validate(config, check_paths=False)
    assert config.custom_reward_function.reward_fn_type == "countdown_reward"


def test_a_typed_reward_with_one_weight_scales_it():
    fn = build_reward_fn(None, weights=[2.0], reward_fn_type="countdown_reward")
    result = fn("d", "<answer>8+8+3+3</answer>", TASK)
    assert result == {"score": 0.2, "countdown_reward": 0.1, "countdown_reward/accuracy": 0.0,
                      "countdown_reward/format": 1.0}
    with pytest.raises(RewardError, match="are both set"):
        build_reward_fn("r.py", reward_fn_type="math_reward")
    with pytest.raises(RewardError, match="unknown reward function type .*'nope'; valid: accuracy_reward"):
        build_reward_fn(None, reward_fn_type="nope")


def test_preflight_checks_the_ground_truth_the_type_reads(tmp_path):
    from rft.data.dataset import DataError
    from rft.explorer.preflight import check_reward_inputs

    class Prompt:
        def __init__(self, ground_truth, origin):
            self.ground_truth, self.origin, self.data_source = ground_truth, origin, "no scorer has this"

    class Dataset(list):
        @property
        def prompts(self):
            return self

    def check(kind, *truths):
        config = cfg(tmp_path, f"custom_reward_function.reward_fn_type={kind}")
        check_reward_inputs(config, Dataset(Prompt(t, f"rows.jsonl row {i}") for i, t in enumerate(truths)))

    check("math_reward", "72", 3, "... #### 5")  # any data_source
    check("format_reward", None, None)  # reads no ground truth
    check("countdown_reward", TASK, json.dumps(TASK))
    with pytest.raises(DataError, match=r"1 of 2 rows .*reward_fn_type='math_reward' cannot use \(first: rows.jsonl "
                                        r"row 1: the row has no reward_model.ground_truth\)"):
        check("math_reward", "72", None)
    with pytest.raises(DataError, match=r"2 of 2 rows .*first: rows.jsonl row 0: the countdown ground truth must be"):
        check("countdown_reward", {"target": 3}, "7")


# ------------------------------------------------------------------------------------------ parallel scoring
SLOW_S = 300.0
"""How long sleepy_reward's "slow" row sleeps: far past what a cut at the time limit takes on a loaded machine (one
call of 32 rows took 50 s under a make test beside four other test runs on 2 cores), so the bound below tells a cut
from a sleep without timing the machine."""


def sleepy_reward(data_source, solution_str, ground_truth, extra_info=None):
    """A picklable reward for the worker tests: sleeps on "slow", raises on "boom", exits on "exit", else the
    length."""
    if solution_str == "slow":
        time.sleep(SLOW_S)
    if solution_str == "boom":
        raise ArithmeticError("boom on purpose")
    if solution_str == "exit":
        sys.exit(3)
    return {"score": float(len(solution_str)), "length": float(len(solution_str))}


def rows(n: int) -> tuple[list, list, list, list]:
    examples = gsm8k_test()[:n]
    responses = [e["answer"] if i % 3 else e["answer"].rsplit("####", 1)[0] for i, e in enumerate(examples)]
    responses[5] = "<think>sure</think><answer>" + examples[5]["answer"].rsplit("####", 1)[1] + "</answer>"
    for i in range(0, n, 4):
        responses[i] += "\n#### 100000"  # a wrong final answer
    truths = [e["answer"] for e in examples]
    return ["openai/gsm8k"] * n, responses, truths, [None] * n


def test_workers_give_the_in_process_results_in_order():
    n = 4 * MIN_ROWS_PER_WORKER + 3
    sources, responses, truths, infos = rows(n)
    truths[7] = "\\frac{"  # a row that fails (an unparseable ground truth)
    try:
        for on_error in ("zero", "error"):
            one = build_reward_fn(None, timeout=30.0, on_error=on_error, reward_fn_type="math_reward", num_workers=1)
            two = build_reward_fn(None, timeout=30.0, on_error=on_error, reward_fn_type="math_reward", num_workers=2)
            assert (one.workers, two.workers) == (1, 2)
            if on_error == "zero":
                serial = score_responses(one, sources, responses, truths, infos)
                parallel = score_responses(two, sources, responses, truths, infos)
                assert parallel == serial
                assert serial[1]["reward_failed"][7] == 1.0 and sum(serial[1]["reward_failed"]) == 1.0
                assert sum(serial[1]["accuracy"]) == n - 1 - len(range(0, n, 4))  # the wrong ones and row 7 fail
                assert serial[0][5] == pytest.approx(1.1) and serial[0][4] == -0.1 and serial[0][1] == 0.9
            else:
                messages = []
                for fn in (one, two):
                    with pytest.raises(RewardError) as e:
                        score_responses(fn, sources, responses, truths, infos)
                    messages.append(str(e.value))
                assert messages[0] == messages[1] and "on row 7" in messages[0]
        # a batch too small to pay for the workers is scored in process, with the same results
        few = slice(8, 8 + 2 * MIN_ROWS_PER_WORKER - 1)  # without the failing row 7
        small = (sources[few], responses[few], truths[few], infos[few])
        assert score_responses(two, *small) == score_responses(one, *small)
    finally:
        shutdown()


def test_workers_keep_the_time_limit_and_report_failures_as_in_process():
    n = 2 * MIN_ROWS_PER_WORKER
    responses = ["x" * i for i in range(n)]
    responses[3], responses[20] = "boom", "slow"
    args = (["d"] * n, responses, [None] * n, [None] * n)
    try:
        for on_error in ("zero", "error"):
            outcomes = []
            for workers in (1, 2):
                fn = RewardFunction(sleepy_reward, "the sleepy reward", timeout=0.5, on_error=on_error, workers=workers)
                start = time.monotonic()
                try:
                    outcomes.append(score_responses(fn, *args))
                except RewardError as e:
                    outcomes.append(str(e))
                # the slow row was cut at 0.5 s, not left to sleep SLOW_S (a loaded machine took 50 s to get there)
                assert time.monotonic() - start < SLOW_S * 0.8
            assert outcomes[0] == outcomes[1]
            if on_error == "zero":
                scores, metrics = outcomes[0]
                assert [i for i, f in enumerate(metrics["reward_failed"]) if f] == [3, 20]
                assert scores[4] == 4.0 and metrics["length"][4] == 4.0
            else:
                assert "raised ArithmeticError: boom on purpose on row 3" in outcomes[0]
    finally:
        shutdown()


def test_sys_exit_in_a_reward_function_is_its_failure():
    """sys.exit() in the function is a failure of its row like any exception (it was rft's SystemExit, the run's
    exit status 3 with no error line): in process, in the thread a time limit runs it in off the main thread, and
    in the worker processes."""
    n = 2 * MIN_ROWS_PER_WORKER
    responses = ["x" * i for i in range(n)]
    responses[5] = "exit"
    args = (["d"] * n, responses, [None] * n, [None] * n)

    def off_the_main_thread(fn):
        box = {}

        def score():
            try:
                box["out"] = score_responses(fn, *args)
            except BaseException as e:
                box["out"] = e

        thread = threading.Thread(target=score)
        thread.start()
        thread.join()
        return box["out"]

    try:
        for workers in (1, 2):
            fn = RewardFunction(sleepy_reward, "the exiting reward", timeout=30.0, on_error="error", workers=workers)
            with pytest.raises(RewardError) as e:
                score_responses(fn, *args)
            assert str(e.value).startswith("the exiting reward called sys.exit(3) on row 5 (data_source 'd'")
            assert "custom_reward_function.on_error=zero" in str(e.value)
            threaded = off_the_main_thread(fn)
            assert isinstance(threaded, RewardError) and str(threaded) == str(e.value)
            zero = RewardFunction(sleepy_reward, "the exiting reward", timeout=30.0, on_error="zero", workers=workers)
            scores, metrics = score_responses(zero, *args)
            assert [i for i, f in enumerate(metrics["reward_failed"]) if f] == [5] and scores[5] == 0.0
        with pytest.raises(KeyboardInterrupt):  # Ctrl-C is still the user's, not a reward failure
            score_responses(RewardFunction(interrupted_reward, "r"), ["d"], ["x"], [None], [None])
    finally:
        shutdown()


def interrupted_reward(data_source, solution_str, ground_truth, extra_info=None):
    raise KeyboardInterrupt


# ------------------------------------------------------------------------------------------ rft train
def test_one_rl_step_with_math_reward_logs_its_parts(tmp_path, capsys):
    from rft.cli import main
    from rft.models.tiny import init_model
    from rft.tasks import gsm8k_rows

    examples = gsm8k_test()[:8]
    source = tmp_path / "test.jsonl"
    source.write_text("".join(json.dumps(e) + "\n" for e in examples))
    data = tmp_path / "gsm8k.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in gsm8k_rows(source, "test")))
    init_model("tiny", tmp_path / "m", seed=0)
    out = tmp_path / "out"
    code = main(["train", f"actor_rollout_ref.model.path={tmp_path / 'm'}", f"data.train_files={data}",
                 "data.max_prompt_length=64", "data.truncation=left", "data.max_response_length=8", "data.train_batch_size=2",
                 "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=2",
                 "trainer.total_training_steps=1", "trainer.val_before_train=false", "trainer.logger=[]",
                 f"trainer.default_local_dir={out}", "custom_reward_function.reward_fn_type=math_reward"])
    assert code == 0, capsys.readouterr().err
    line = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    # the tiny model writes neither tags nor the answer: every row scores 0 - 0.1
    assert line["reward_extra/accuracy/mean"] == 0.0
    assert line["reward_extra/format_score/mean"] == pytest.approx(-0.1)
    assert line["reward_extra/math_verify_timeout/mean"] == 0.0
    assert line["critic/score/mean"] == pytest.approx(-0.1)

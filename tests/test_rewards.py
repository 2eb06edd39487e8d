"""Rewards: gsm8k extraction (verl's semantics), arithmetic exact match, dispatch, custom reward files,
batch scoring."""

from __future__ import annotations

import json
import math
import textwrap

import pytest

from rft.rewards import (
    SCORERS,
    arithmetic_score,
    build_reward_fn,
    default_compute_score,
    gsm8k_extract,
    gsm8k_score,
    load_custom_reward,
    score_responses,
    weighted_reward,
)

# --- gsm8k ---


@pytest.mark.parametrize(
    "text, strict, flexible",
    [
        ("so she has 72 clips.\n#### 72", "72", "72"),
        ("#### 1,234", "1234", "1234"),
        ("costs $5 each, so #### -12 dollars", "-12", "-12"),
        ("#### 3.50", "3.50", "3.50"),
        # several "####": the last one wins, in both methods
        ("#### 5\nwait, recompute\n#### 7", "7", "7"),
        # no "#### " (strict needs the space after ####): strict finds nothing, flexible the last number
        ("the answer is 1,000.", None, "1000."),  # a trailing "." is part of the number, as in verl
        ("####42", None, "42"),
        ("The total is $18.", None, "18."),
        ("no numbers here", None, None),
        # flexible skips a lone "." and takes the last real number
        ("12 apples. Done .", None, "12"),
    ],
)
def test_gsm8k_extract_strict_and_flexible(text, strict, flexible):
    assert gsm8k_extract(text, "strict") == strict
    assert gsm8k_extract(text, "flexible") == flexible


def test_gsm8k_only_the_last_300_characters_count():
    answer_then_padding = "#### 72" + "x" * 300
    assert gsm8k_extract(answer_then_padding) is None
    assert gsm8k_extract(answer_then_padding, "flexible") is None
    # exactly 300 characters from the end still counts; one more does not
    assert gsm8k_extract("#### 72" + "x" * 293) == "72"
    assert gsm8k_extract("#### 72" + "x" * 294) is None
    # an early answer is ignored, the one at the end is taken
    assert gsm8k_extract("#### 1" + "y" * 400 + "#### 2") == "2"


def test_gsm8k_score_values():
    assert gsm8k_score("#### 1,234", "1234") == 1.0
    assert gsm8k_score("#### 1,234", 1234) == 1.0  # ground truth compared as str
    assert gsm8k_score("#### 72.0", "72") == 0.0  # string match, as verl: no numeric equivalence
    assert gsm8k_score("#### 71", "72", format_score=0.1) == 0.1
    assert gsm8k_score("the answer is 72", "72", format_score=0.1) == 0.0  # strict: no answer found
    assert gsm8k_score("the answer is 72", "72", method="flexible") == 1.0
    assert gsm8k_score("#### 72", "72", score=2.0) == 2.0
    with pytest.raises(ValueError, match="unknown gsm8k extraction method 'loose'.*strict, flexible"):
        gsm8k_extract("#### 1", "loose")


def test_gsm8k_registered_under_both_names_and_strict():
    assert "openai/gsm8k" in SCORERS and "gsm8k" in SCORERS
    assert default_compute_score("openai/gsm8k", "#### 18", "18") == 1.0
    assert default_compute_score("gsm8k", "#### 18", "18", {"split": "test"}) == 1.0
    assert default_compute_score("openai/gsm8k", "the answer is 18", "18") == 0.0


# --- arithmetic ---


@pytest.mark.parametrize(
    "response, truth, expected",
    [("12", "12", 1.0), ("  12\n", "12", 1.0), ("12", 12, 1.0), ("-3", "-3", 1.0), ("12.0", "12", 0.0),
     ("012", "12", 0.0), ("12 apples", "12", 0.0), ("", "12", 0.0), ("1 2", "12", 0.0)],
)
def test_arithmetic_exact_match(response, truth, expected):
    assert arithmetic_score(response, truth) == expected
    assert default_compute_score("arithmetic", response, truth) == expected


@pytest.mark.parametrize(
    "response, truth, expected",
    [("1776", "1776", 1.0), ("#### 1776", "1776", 1.0), (" 1776\n", "#### 1776", 1.0), ("#### 1776", "#### 1776", 1.0),
     ("####1776", "1776", 0.0), ("## 1776", "1776", 0.0), ("1776 ", 1776, 1.0), ("17760", "1776", 0.0),
     ("#### #### 1776", "1776", 0.0), ("the answer is 1776", "1776", 0.0), ("", "1776", 0.0)],
)
def test_calculator_takes_the_product_bare_or_on_the_answer_line(response, truth, expected):
    """After the tool the calculator task's answer is the bare number, from memory GSM8K's answer line."""
    assert default_compute_score("calculator", response, truth) == expected


def test_unknown_data_source_names_it_and_the_known_ones():
    expected = (r"'my/task'; built-in: apps, arithmetic, calculator, codecontests, codeforces, geometry3k, gsm8k, "
                r"hiyouga/geometry3k, openai/gsm8k, shapes, taco.*set custom_reward_function\.path")
    with pytest.raises(KeyError, match=expected):
        default_compute_score("my/task", "1", "1")
    # a misspelt one: the closest first, and said
    with pytest.raises(KeyError, match=r"'openai/gsm8kk'; did you mean 'openai/gsm8k'\? built-in: openai/gsm8k, "):
        default_compute_score("openai/gsm8kk", "1", "1")


# --- custom reward files ---


def _write(tmp_path, name, source):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def test_custom_reward_returning_float(tmp_path):
    path = _write(
        tmp_path,
        "reward.py",
        """
        def compute_score(data_source, solution_str, ground_truth, extra_info):
            return float(solution_str == ground_truth) + (0.5 if extra_info else 0.0)
        """,
    )
    fn = load_custom_reward(str(path))
    scores, metrics = score_responses(
        fn, ["a", "a", "b"], ["1", "2", "3"], ["1", "1", "3"], [None, None, {"k": 1}]
    )
    assert scores == [1.0, 0.0, 1.5]
    assert metrics == {}


def test_custom_reward_returning_dict_collects_numeric_metrics(tmp_path):
    path = _write(
        tmp_path,
        "reward_dict.py",
        """
        def my_reward(data_source, solution_str, ground_truth, extra_info):
            correct = solution_str == ground_truth
            return {"score": 2.0 * correct, "acc": correct, "length": len(solution_str), "pred": solution_str}
        """,
    )
    fn = load_custom_reward(path, name="my_reward")
    scores, metrics = score_responses(fn, ["t", "t"], ["72", "7"], ["72", "72"], [None, None])
    assert scores == [2.0, 0.0]
    # "pred" is text, so not a metric; the bool "acc" becomes 1.0 / 0.0
    assert metrics == {"acc": [1.0, 0.0], "length": [2.0, 1.0]}


def test_custom_reward_files_with_the_same_name_do_not_collide(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = _write(tmp_path / "a", "reward.py", "def compute_score(*args):\n    return 1.0\n")
    second = _write(tmp_path / "b", "reward.py", "def compute_score(*args):\n    return 2.0\n")
    assert load_custom_reward(first)("x", "", "", None) == 1.0
    assert load_custom_reward(second)("x", "", "", None) == 2.0


def test_custom_reward_errors(tmp_path):
    with pytest.raises(ValueError, match=r"custom_reward_function\.path.*nope\.py.*does not exist"):
        load_custom_reward(tmp_path / "nope.py")
    text_file = _write(tmp_path, "reward.txt", "def compute_score(*a): return 1.0\n")
    with pytest.raises(ValueError, match=r"custom_reward_function\.path.*reward\.txt.*not a \.py file"):
        load_custom_reward(text_file)
    with pytest.raises(ValueError, match=r"custom_reward_function\.path.*not a \.py file"):
        load_custom_reward(tmp_path)

    path = _write(
        tmp_path,
        "helpers.py",
        """
        from math import sqrt
        THRESHOLD = 0.5
        def reward_a(*args):
            return 1.0
        class Scorer:
            pass
        def _private(*args):
            return 0.0
        """,
    )
    # only callables the file itself defines are listed: not the imported sqrt, the constant or _private
    with pytest.raises(
        ValueError,
        match=r"custom_reward_function\.name.*helpers\.py.*no 'compute_score'.*defines: Scorer, reward_a: "
              r"set custom_reward_function\.name to one of them \(or a list of them\)$",
    ):
        load_custom_reward(path)
    not_callable = r"custom_reward_function\.name.*'THRESHOLD'.*helpers\.py.*float, not a callable"
    with pytest.raises(ValueError, match=not_callable):
        load_custom_reward(path, name="THRESHOLD")
    assert load_custom_reward(path, name="reward_a")() == 1.0


# --- score_responses errors ---


def test_score_responses_dict_without_score():
    def fn(data_source, solution_str, ground_truth, extra_info):
        return {"reward": 1.0, "acc": 1.0}

    with pytest.raises(ValueError, match=r"returned a dict without 'score'.*'acc', 'reward'"):
        score_responses(fn, ["t"], ["1"], ["1"], [None])


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_score_responses_non_finite_score_names_data_source(bad):
    def fn(data_source, solution_str, ground_truth, extra_info):
        return bad if data_source == "bad/source" else 1.0

    with pytest.raises(ValueError, match=r"row 1 \(data_source 'bad/source'\)"):
        score_responses(fn, ["ok", "bad/source"], ["1", "2"], ["1", "2"], [None, None])
    with pytest.raises(ValueError, match=r"data_source 'bad/source'"):
        score_responses(lambda *a: {"score": bad}, ["bad/source"], ["1"], ["1"], [None])


def test_score_responses_metric_on_some_rows_only():
    def fn(data_source, solution_str, ground_truth, extra_info):
        return {"score": 1.0, "acc": 1.0} if solution_str == "1" else {"score": 0.0}

    with pytest.raises(ValueError, match=r"metric 'acc' for some rows but not for rows \[1\]"):
        score_responses(fn, ["t", "t"], ["1", "2"], ["1", "1"], [None, None])
    # a plain float on one row also lacks the metric
    mixed = lambda ds, s, gt, ei: {"score": 1.0, "acc": 1.0} if s == "1" else 0.0
    with pytest.raises(ValueError, match=r"metric 'acc'"):
        score_responses(mixed, ["t", "t"], ["1", "2"], ["1", "1"], [None, None])


def test_score_responses_type_and_length_errors():
    with pytest.raises(TypeError, match=r"score of type str \('1.0'\) for row 0 \(data_source 't'\)"):
        score_responses(lambda *a: "1.0", ["t"], ["1"], ["1"], [None])
    with pytest.raises(ValueError, match=r"lists of one length.*'responses': 1.*'ground_truths': 2"):
        score_responses(lambda *a: 1.0, ["t"], ["1"], ["1", "2"], [None])
    assert score_responses(lambda *a: 1.0, [], [], [], []) == ([], {})


def test_score_responses_accepts_bool_int_and_builtin_dispatch():
    scores, metrics = score_responses(
        default_compute_score,
        ["arithmetic", "openai/gsm8k", "gsm8k"],
        ["12", "so #### 1,000", "#### 5"],
        ["12", "1000", "6"],
        [None, {"split": "test"}, None],
    )
    assert scores == [1.0, 1.0, 0.0] and metrics == {}
    assert score_responses(lambda *a: True, ["t"], ["1"], ["1"], [None])[0] == [1.0]
    assert score_responses(lambda *a: 3, ["t"], ["1"], ["1"], [None])[0] == [3.0]


# --- several reward functions with weights (TRL's reward_funcs + reward_weights) ---


def test_weighted_reward_sums_scores_and_reports_each_function():
    exact = lambda ds, sol, gt, info=None: {"score": float(sol == gt), "hit": sol == gt, "pred": sol}
    length = lambda ds, sol, gt, info=None: len(sol)
    fn = weighted_reward([("exact", exact), ("length", length)], [2.0, -0.5])
    scores, metrics = score_responses(fn, ["t", "t"], ["12", "7"], ["12", "12"], [None, None])
    # row 0: 2 * 1 - 0.5 * 2 = 1.0; row 1: 2 * 0 - 0.5 * 1 = -0.5
    assert scores == [1.0, -0.5]
    # each function's own score (unweighted) and its numeric extras under its name; text is dropped
    assert metrics == {"exact": [1.0, 0.0], "exact/hit": [1.0, 0.0], "length": [2.0, 1.0]}


def test_weighted_reward_errors():
    with pytest.raises(ValueError, match="2 reward functions but 1 weights"):
        weighted_reward([("a", len), ("b", len)], [1.0])
    no_score = weighted_reward([("bad", lambda *a: {"acc": 1.0})], [1.0])
    with pytest.raises(ValueError, match="'bad' returned a dict without 'score'"):
        no_score("t", "x", "x", None)
    text = weighted_reward([("txt", lambda *a: "1")], [1.0])
    with pytest.raises(TypeError, match="'txt' returned a score of type str"):
        text("t", "x", "x", None)


def test_build_reward_fn(tmp_path):
    path = _write(
        tmp_path,
        "two.py",
        """
        def exact(data_source, solution_str, ground_truth, extra_info):
            return float(solution_str == ground_truth)

        def length(data_source, solution_str, ground_truth, extra_info):
            return float(len(solution_str))
        """,
    )
    assert build_reward_fn(None) is default_compute_score
    single = build_reward_fn(path, "exact")
    assert single("t", "1", "1", None) == 1.0  # one function, no weights: the function itself
    both = build_reward_fn(path, ["exact", "length"], [1.0, 0.25])
    assert both("t", "12", "12", None) == {"exact": 1.0, "length": 2.0, "score": 1.0 + 0.25 * 2.0}
    unweighted = build_reward_fn(path, ["exact", "length"])
    assert unweighted("t", "1", "2", None)["score"] == 0.0 + 1.0
    scaled_builtin = build_reward_fn(None, "compute_score", [3.0])
    assert scaled_builtin("arithmetic", "12", "12", None) == {"default_compute_score": 1.0, "score": 3.0}
    with pytest.raises(ValueError, match="defines no 'missing'.*exact, length"):
        build_reward_fn(path, ["exact", "missing"])


def test_reward_kwargs_reach_every_function_of_the_file(tmp_path):
    """verl's custom_reward_function.reward_kwargs: keyword arguments of each call, winning over the call's own."""
    path = _write(
        tmp_path,
        "kw.py",
        """
        def exact(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
            return float(solution_str == ground_truth) + bonus

        def length(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0, scale=1.0):
            return scale * len(solution_str) + bonus
        """,
    )
    single = build_reward_fn(path, "exact", reward_kwargs={"bonus": 0.5})
    assert single("t", "1", "1", None) == 1.5 and single("t", "1", "2", None, bonus=9.0) == 0.5
    both = build_reward_fn(path, ["exact", "length"], [1.0, 1.0], reward_kwargs={"bonus": 1.0})
    assert both("t", "12", "12", None) == {"exact": 2.0, "length": 3.0, "score": 5.0}


VERL_CALL = "compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=...)"


@pytest.mark.parametrize("source", [
    "async def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n",
    "class Scorer:\n    async def __call__(self, data_source, solution_str, ground_truth, extra_info=None):\n"
    "        return 1.0\ncompute_score = Scorer()\n",
])
def test_an_async_reward_function_is_refused(tmp_path, source):
    """rft's reward call is synchronous: an async def (or an object with an async __call__) returned a coroutine on
    every row instead of a score."""
    from rft.errors import RewardError

    path = _write(tmp_path, "r.py", source)
    with pytest.raises(RewardError) as refused:
        build_reward_fn(path, on_error="zero")
    message = str(refused.value)
    assert f"'compute_score' in {str(path)!r} is an async function" in message and "\n" not in message
    assert "rft calls reward functions synchronously" in message and "make it a plain def compute_score(" in message


@pytest.mark.parametrize("source, reward_kwargs, taken", [
    # taken: rft's call binds to each
    ("def compute_score(data_source, solution_str, ground_truth, extra_info):", None, True),
    ("def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):", None, True),
    ("def compute_score(**kwargs):", None, True),
    ("def compute_score(*args, **kwargs):", None, True),
    ("def compute_score(solution_str, ground_truth, data_source=None, extra_info=None):", None, True),
    ("def compute_score(data_source, solution_str, ground_truth, extra_info, *, scale=1.0):", None, True),
    ("def compute_score(data_source, solution_str, ground_truth, extra_info, *, scale):", {"scale": 2.0}, True),
    ("class Scorer:\n    def __call__(self, data_source, solution_str, ground_truth, extra_info=None):\n"
     "        return 1.0\ncompute_score = Scorer()\ndef unused():", None, True),
    ("import functools\ndef _score(bonus, data_source, solution_str, ground_truth, extra_info):\n        return 1.0\n"
     "compute_score = functools.partial(_score, 0.5)\ndef unused():", None, True),
    # refused: each fails on every row
    ("def compute_score(text):", None, False),
    ("def compute_score(solution_str, ground_truth):", None, False),
    ("def compute_score(data_source, solution_str, ground_truth, extra_info, *, scale):", None, False),
    ("def compute_score(data_source, solution_str, ground_truth, extra_info=None):", {"bonus": 1.0}, False),
    ("def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw):", {"ground_truth": "7"}, True),
    ("def compute_score(*args):", None, False),
    ("def compute_score(source, text, truth, info=None):", None, False),
    ("class Scorer:\n    def __call__(self, text):\n        return 1.0\ncompute_score = Scorer()\ndef unused():",
     None, False),
])
def test_a_function_is_refused_exactly_when_rfts_call_cannot_reach_it(tmp_path, source, reward_kwargs, taken):
    """The signature check (before any model loads) against the call itself: every convention that scores today
    (positional, defaults, *args / **kwargs, keyword-only filled by reward_kwargs, a callable object, a partial)
    passes, and a function the call raises TypeError on is refused naming the file, the function, its signature and
    the call."""
    from rft.errors import RewardError
    from rft.rewards.combine import VerlCall

    path = _write(tmp_path, "r.py", source + "\n    return 1.0\n")
    fn = load_custom_reward(path)  # not checked: what rft called before the check existed
    try:
        score_responses(VerlCall(fn, reward_kwargs), ["a"], ["1"], ["1"], [None])
        works = True
    except RewardError as e:
        assert "raised TypeError" in str(e)
        works = False
    assert works == taken
    if works:
        assert build_reward_fn(path, reward_kwargs=reward_kwargs, on_error="zero") is not None
        return
    with pytest.raises(RewardError) as refused:
        build_reward_fn(path, reward_kwargs=reward_kwargs, on_error="zero")
    message = str(refused.value)
    assert f"'compute_score' in {str(path)!r} has the signature compute_score(" in message, message
    assert f"cannot take rft's call {VERL_CALL}" in message, message
    if reward_kwargs:
        assert f"keyword arguments {', '.join(reward_kwargs)} (custom_reward_function.reward_kwargs)" in message


@pytest.mark.parametrize("source, column", [
    ("def reward(completions, answer, **kwargs):", "data.response_key=answer for the 'answer' this function reads"),
    ("def reward(prompts, completions, **kwargs):", "data.response_key names)"),
    ("def reward(completions, **kwargs):", "data.response_key names)"),
])
def test_a_reward_function_written_for_trl_is_refused_with_the_function_to_write(tmp_path, source, column):
    """TRL's GRPOTrainer reward, f(completions, **columns) -> list[float]: one line (the config check's, before any
    model loads) saying that rft calls once per response and the verl-signature function to write, with the
    data.response_key that hands it the column it reads; a file without compute_score names the one function it
    defines."""
    from rft.errors import RewardError

    path = _write(tmp_path, "trl_reward.py", source + "\n    return [1.0 for c in kwargs.get('x', [])]\n")
    with pytest.raises(RewardError) as refused:
        build_reward_fn(path)
    assert str(refused.value) == (
        f"custom_reward_function.name: {str(path.resolve())!r} defines no 'compute_score'; callables it defines: "
        "reward: set custom_reward_function.name=reward")
    with pytest.raises(RewardError) as refused:
        build_reward_fn(path, "reward")
    err = [str(refused.value)]
    signature = source.removeprefix("def ").removesuffix(":")
    assert "\n" not in err[0] and err[0].startswith(
        f"custom_reward_function.name: 'reward' in {str(path)!r} has TRL's batched signature reward{signature[6:]} "
        "(lists of completions in, a list of floats out); rft calls a reward function once per response, as verl "
        "does: write def reward(data_source, solution_str, ground_truth, extra_info=None, **kwargs) returning a "
        "float"), err
    assert column in err[0], err


@pytest.mark.parametrize(
    "overrides, needles",
    [
        (["custom_reward_function.name=[a,b]"], ["custom_reward_function.name lists 2 functions", ".path"]),
        (["custom_reward_function.name=my_score"], ["name='my_score' picks a function of", "path", "not set"]),
        (["custom_reward_function.path=r.py", "custom_reward_function.name=[a,a]"], ["lists a function twice"]),
        (["custom_reward_function.path=r.py", "custom_reward_function.name=[]"], ["non-empty list"]),
        (["custom_reward_function.path=r.py", "custom_reward_function.name=[a,b]",
          "custom_reward_function.reward_weights=[1.0]"], ["reward_weights=[1.0]", "2 finite number(s)"]),
        (["custom_reward_function.reward_weights=[1.0,2.0]"], ["1 finite number(s)", "built-in scorer"]),
        (["custom_reward_function.reward_kwargs={bonus: 1}"], ["reward_kwargs={'bonus': 1}", "built-in scorers take"]),
        (["custom_reward_function.reward_fn_type=math_reward", "custom_reward_function.reward_kwargs={x: 1}"],
         ["typed rewards take no arguments"]),
        (["custom_reward_function.reward_fn_type=llm_judge"], ["needs a judge model", "workflow.auxiliary_models"]),
        (["custom_reward_function.reward_fn_type=llm_judge", "workflow.auxiliary_models=[{model_path: j}]",
          "custom_reward_function.reward_kwargs={model: 1}"], ["reward_kwargs.model=1", "from 0 to 0"]),
        (["custom_reward_function.reward_fn_type=llm_judge", "workflow.auxiliary_models=[{model_path: j}]",
          "reward_model.enable=true", "reward_model.model.path=rm"], ["with reward_model.enable=true"]),
    ],
)
def test_reward_function_config_errors(overrides, needles):
    from rft.config import ConfigError
    from rft.trainer.configure import load_config

    base = ["actor_rollout_ref.model.path=model", "data.train_files=train.parquet"]
    with pytest.raises(ConfigError) as err:
        load_config(None, [*base, *overrides], validate_paths=False)
    for needle in needles:
        assert needle in str(err.value), (needle, str(err.value))


def test_reward_function_config_accepts_a_list_with_weights():
    from rft.trainer.configure import load_config

    cfg = load_config(None, ["actor_rollout_ref.model.path=model", "data.train_files=train.parquet",
                             "custom_reward_function.path=r.py", "custom_reward_function.name=[a,b]",
                             "custom_reward_function.reward_weights=[1.0,0.5]"], validate_paths=False)
    assert cfg.custom_reward_function.name == ["a", "b"]
    assert cfg.custom_reward_function.reward_weights == [1.0, 0.5]


def test_a_function_written_for_verl_gets_each_value_by_its_name(tmp_path):
    """verl's reward managers call compute_score(data_source=..., solution_str=..., ground_truth=...,
    extra_info=...): a function whose parameters come in another order gets each value under its own name (a
    positional call gave it the data source as the response, the response as the ground truth)."""
    seen = tmp_path / "seen.jsonl"
    path = _write(tmp_path, "r.py", "import json\n"
                  "def compute_score(solution_str, ground_truth, data_source=None, extra_info=None):\n"
                  f"    with open({str(seen)!r}, 'a') as f:\n"
                  "        f.write(json.dumps([solution_str, ground_truth, data_source, extra_info]) + '\\n')\n"
                  "    return float(solution_str == ground_truth)\n")
    fn = build_reward_fn(path, on_error="error")
    scores, _ = score_responses(fn, ["arithmetic", "arithmetic"], ["12", "13"], ["12", "12"], [{"i": 0}, {"i": 1}])
    assert list(scores) == [1.0, 0.0]
    assert [json.loads(line) for line in seen.read_text().splitlines()] == [
        ["12", "12", "arithmetic", {"i": 0}], ["13", "12", "arithmetic", {"i": 1}]]


def test_the_prime_reward_manager_scores_a_failing_row_zero(tmp_path):
    """verl's reward_manager=prime: a row whose function raises scores 0 (whatever on_error says), counted as
    failed; naive with on_error=error stops on it."""
    from types import SimpleNamespace

    import torch
    from test_config import load

    from rft.rewards.pipeline import RewardPipeline
    from rft.rewards.scoring import FAILED

    path = tmp_path / "reward.py"
    path.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                    "    if solution_str == 'boom':\n        raise ValueError('boom')\n"
                    "    return float(solution_str == ground_truth)\n")
    batch = SimpleNamespace(data_source=["d"] * 3, response_text=["7", "boom", "8"], ground_truth=["7"] * 3,
                            extra_info=[{}] * 3, raw_prompt=[[]] * 3)
    prime = RewardPipeline.from_config(
        load(f"custom_reward_function.path={path}", "reward_model.reward_manager=prime"), None, torch.float32,
        torch.device("cpu"))
    failures: list[str] = []
    scores, extras = prime.score_rows(batch, failures)
    assert list(scores) == [1.0, 0.0, 0.0] and list(extras[FAILED]) == [0.0, 1.0, 0.0] and len(failures) == 1
    naive = RewardPipeline.from_config(load(f"custom_reward_function.path={path}"), None, torch.float32,
                                       torch.device("cpu"))
    with pytest.raises(Exception, match="boom"):
        naive.score_rows(batch, [])

"""Issue 65: a served generative judge (`reward_kwargs.base_url`: an OpenAI-compatible endpoint, `rft serve`'s or
a scripted one on 127.0.0.1) plus the built-in rule reward, each part weighted and logged; a judge call past
`reward_kwargs.timeout` is cut, scored 0 and counted in judge_timeout while the step goes on."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from http_helpers import send_json
from rl_helpers import make_assets, rl_config

from rft.config import ConfigError
from rft.rewards.judge import LLMJudge, ServedJudge
from rft.rewards.scorers import default_compute_score


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return make_assets(tmp_path_factory.mktemp("judge"))


class ScriptedJudge:
    """An OpenAI-compatible endpoint on 127.0.0.1 whose judge says yes when the graded answer starts with the
    reference's first character, no otherwise, and never replies (until closed) when the answer holds `hang`."""

    def __init__(self, hang: str | None = None, resets: int = 0):
        """`resets`: the first calls, each dropped with a reset connection and no reply."""
        self.prompts: list[str] = []
        self.resets = resets
        self.released = threading.Event()
        judge, lock = self, threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, body: dict) -> None:
                send_json(self, body)

            def do_GET(self):
                self._send({"object": "list", "data": [{"id": "scripted-judge", "object": "model"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    reset, judge.resets = judge.resets > 0, judge.resets - 1
                if reset:  # SO_LINGER 0: the close sends RST, as a server that drops the connection does
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                    self.close_connection = True
                    return
                assert body["model"] == "scripted-judge" and body["temperature"] == 0.0
                prompt = body["messages"][0]["content"]
                judge.prompts.append(prompt)
                answer = prompt.split("Answer to grade: ")[1].split("\n")[0]
                reference = prompt.split("Reference answer: ")[1].split("\n")[0]
                if hang is not None and hang in answer:
                    judge.released.wait(60)
                    return
                verdict = "Yes." if answer[:1] == reference[:1] else "No."
                self._send({"choices": [{"index": 0, "message": {"role": "assistant", "content": verdict}}]})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.released.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def scripted():
    servers: list[ScriptedJudge] = []

    def start(hang: str | None = None, resets: int = 0) -> ScriptedJudge:
        servers.append(ScriptedJudge(hang, resets))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_a_served_judges_verdicts_and_the_rule_are_weighted_and_a_hanging_call_is_cut(scripted):
    """4 rows: a right answer, a wrong one, one whose first digit is right (the judge says yes, the rule no) and
    one the judge never answers, cut at the 1 s limit: score = 0.25 x judge + 0.75 x rule, each part per row."""
    server = scripted(hang="hang")
    judge = LLMJudge(ServedJudge(server.url, timeout=1.0), judge_weight=0.25, rule_weight=0.75)
    responses = ["12", "7", "19", "hang 12"]
    started = time.monotonic()
    scores, extra = judge.score_batch(["3+9?"] * 4, responses, ["12"] * 4, ["arithmetic"] * 4)
    assert time.monotonic() - started < 30  # the hanging call waits 60 s; the judge left it at its limit
    rule = [float(default_compute_score("arithmetic", r, "12")) for r in responses]
    assert rule == [1.0, 0.0, 0.0, 0.0]
    assert extra["judge_score"] == [1.0, 0.0, 1.0, 0.0]
    assert extra["rule_score"] == rule
    assert extra["judge_timeout"] == [0.0, 0.0, 0.0, 1.0]
    assert extra["judge_parsed"] == [1.0, 1.0, 1.0, 0.0]
    assert scores == [1.0, 0.0, 0.25, 0.0]
    assert len(server.prompts) == 4 and server.prompts[0].startswith("Grade an answer against the reference.\n"
                                                                       "Question: 3+9?\nReference answer: 12\n")


def test_a_judge_call_whose_connection_is_reset_is_asked_again(scripted, caplog):
    """A server that drops a connection without a reply (seen from rft serve under a vLLM run's load): the call is
    repeated (a greedy call is safe to repeat), with one warning per call, not the run's error."""
    server = scripted(resets=2)
    asks = [[{"role": "user", "content": f"Reference answer: 12\nAnswer to grade: {a}\nIs it right?"}]
            for a in ("12", "7")]
    replies = ServedJudge(server.url, timeout=30).replies(asks)
    assert replies == ["Yes.", "No."] and server.resets < 0
    assert "failed" in caplog.text and "retrying" in caplog.text


def test_a_grpo_run_with_a_judge_served_by_rft_serve_and_a_rule_runs_4_steps_with_each_part_logged(assets, tmp_path):
    """The judge a tiny model built offline, served by rft serve's engine server on 127.0.0.1 and rubric-prompted
    (a template of its own, scale scoring); the run's 4 steps each log the judge's part, the rule's, the share
    parsed and the share cut, and the score is their weighted sum."""
    from rft.explorer.engine_server import EngineServer
    from rft.orchestration.run import SyncRun

    server = EngineServer(str(assets / "model"), name="judge", port=0)
    try:
        template = ("Rubric: 10 for the right number, 0 otherwise. Question: {question} "
                    "Reference: {reference} Answer: {response} Score (0-10):")
        cfg = rl_config(assets, tmp_path / "out", "custom_reward_function.path=null",
                        "custom_reward_function.reward_fn_type=llm_judge",
                        f"custom_reward_function.reward_kwargs={{base_url: '{server.url}/v1', timeout: 120, "
                        f"max_tokens: 4, scoring: scale, judge_weight: 0.5, rule_weight: 1.0, "
                        f"template: '{template}'}}",
                        "trainer.total_training_steps=4")
        SyncRun(cfg).fit()
    finally:
        server.close()
    rows = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for r in rows:
        judge, rule = r["reward_extra/judge_score/mean"], r["reward_extra/rule_score/mean"]
        assert r["reward_extra/judge_timeout/mean"] == 0.0 and 0.0 <= r["reward_extra/judge_parsed/mean"] <= 1.0
        assert r["critic/score/mean"] == pytest.approx(0.5 * judge + 1.0 * rule, abs=1e-6)


def test_a_grpo_step_goes_on_when_every_judge_call_hangs_and_counts_them(assets, tmp_path, scripted):
    """Every call hangs: each is cut at the 0.5 s limit, judge_timeout/mean is 1 and the rows score their rule
    part alone; the run finishes its 2 steps."""
    from rft.orchestration.run import SyncRun

    server = scripted(hang="")  # every answer holds the empty string
    cfg = rl_config(assets, tmp_path / "out", "custom_reward_function.path=null",
                    "custom_reward_function.reward_fn_type=llm_judge",
                    f"custom_reward_function.reward_kwargs={{base_url: '{server.url}', timeout: 0.5, "
                    "rule_weight: 1.0}", "trainer.total_training_steps=2")
    SyncRun(cfg).fit()
    rows = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["reward_extra/judge_timeout/mean"] == 1.0 and r["reward_extra/judge_score/mean"] == 0.0
        assert r["critic/score/mean"] == pytest.approx(r["reward_extra/rule_score/mean"], abs=1e-6)


@pytest.mark.parametrize("kwargs, needle", [
    ("{timeout: 5}", "['timeout'] are settings of a served judge; set custom_reward_function.reward_kwargs.base_url"),
    ("{base_url: 'localhost:8000'}", "base_url='localhost:8000': the judge's OpenAI-compatible endpoint"),
    ("{base_url: 'http://127.0.0.1:1/v1', model: 0}", "model (an auxiliary model's index) and base_url"),
    ("{base_url: 'http://127.0.0.1:1/v1', timeout: 0}", "timeout=0: it must be a number > 0"),
    ("{base_url: 'http://127.0.0.1:1/v1', rule_weight: -1}", "rule_weight=-1: it must be a number >= 0"),
])
def test_a_served_judges_bad_settings_are_one_line_before_any_model_loads(kwargs, needle):
    from rft.trainer.configure import load_config

    with pytest.raises(ConfigError) as err:
        load_config(None, ["actor_rollout_ref.model.path=model", "data.train_files=train.parquet",
                           "custom_reward_function.reward_fn_type=llm_judge",
                           f"custom_reward_function.reward_kwargs={kwargs}"], validate_paths=False)
    assert needle in str(err.value), str(err.value)

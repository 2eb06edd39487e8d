"""The built-in code scorer (verl's codecontests / apps / codeforces / taco data sources, rft.rewards.code): the
program read from the response, the share of the first 10 stdin / stdout cases it passes, run on this machine or
through a SandboxFusion service (reward_model.sandbox_fusion, a real HTTP server on 127.0.0.1 here), and a verl
launch with the sandbox keys training two steps."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from http_helpers import send_json

from rft.config.load import ConfigError
from rft.rewards.code import (
    CONTINUOUS_CASES,
    LocalRunner,
    SandboxRunner,
    code_cases,
    code_score,
    extract_code,
)
from rft.rewards.scorers import SCORERS, default_compute_score

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
CASES = {"inputs": ["1 2\n", "3 4\n", "5 5\n"], "outputs": ["3\n", "7", "10\n\n"]}


@pytest.mark.parametrize("completion, code", [
    ("Here:\n```python\nprint(1)\n```\nand better:\n```python\nprint(2)\n```", "\nprint(2)\n"),  # the last python
    ("```\nprint(3)\n```", "\nprint(3)\n"),  # a bare block: its empty first line kept
    ("```py\nprint(4)\n```", "print(4)\n"),  # a language line dropped
    ("```x = 1; print(x)```", "x = 1; print(x)"),  # one line: no language line to drop
    ("print(5)", "print(5)"),  # no block: all of it
])
def test_the_program_is_read_from_the_response_as_verl_reads_it(completion, code):
    assert extract_code(completion) == code


@pytest.mark.parametrize("truth, needle", [
    ("not json", "does not parse"),
    ({"inputs": ["1"]}, "holds its test cases as"),
    ({"inputs": ["1"], "outputs": ["1", "2"]}, "1 inputs and 2 outputs"),
    ({"inputs": [[1]], "outputs": [1], "fn_name": "solve"}, "fn_name='solve'"),
])
def test_bad_test_cases_say_what_is_wrong(truth, needle):
    with pytest.raises(ValueError, match=needle):
        code_cases(truth)


@pytest.mark.parametrize("program, score", [
    (ADD, 1.0),  # trailing newlines of either side do not count
    ("a, b = map(int, input().split())\nprint(a * b if a == 1 else a + b)\n", 2 / 3),  # 1 x 2 = 2, not 3
    ("print(int(input().split()[0]) + 1 / 0)", 0.0),  # a runtime error fails every case
    ("print('7')", 1 / 3),
])
def test_the_score_is_the_share_of_cases_passed_on_this_machine(program, score):
    parts = code_score(f"```python\n{program}```", json.dumps(CASES))  # JSON text or a mapping
    assert parts["score"] == pytest.approx(score) and parts["code_pass_rate"] == pytest.approx(score)
    assert parts["code_cases"] == 3.0 and parts["code_sandbox_error"] == 0.0


def test_only_the_first_ten_cases_count_as_in_verl():
    n = CONTINUOUS_CASES + 2  # cases 11 and 12 would fail: they are not run
    cases = {"inputs": [str(i) for i in range(n)], "outputs": [str(i) for i in range(CONTINUOUS_CASES)] + ["x", "y"]}
    assert code_score("print(input())", cases) == {"score": 1.0, "code_pass_rate": 1.0, "code_cases": 10.0,
                                                   "code_sandbox_error": 0.0}


def test_a_local_case_is_held_to_its_time_and_memory():
    spin = code_score("while True: pass", {"inputs": [""], "outputs": [""]}, LocalRunner(seconds=1))
    assert spin["score"] == 0.0
    big = LocalRunner(memory_limit_mb=200).run("x = bytearray(400 * 1024 * 1024)\nprint(1)", "")
    assert big.status == "runtime_error"  # a MemoryError in the child
    assert LocalRunner(memory_limit_mb=200).run("x = bytearray(20 * 1024 * 1024)\nprint(1)", "").stdout == "1\n"


def test_the_code_sources_are_built_in_scorers():
    assert {"codecontests", "apps", "codeforces", "taco"} <= set(SCORERS.names())
    assert default_compute_score("apps", f"```python\n{ADD}```", CASES)["score"] == 1.0


class Sandbox:
    """A SandboxFusion stand-in on 127.0.0.1: run_code runs the code on this machine (LocalRunner) and answers in
    SandboxFusion's shape; `script` holds canned answers (an HTTP status, or a JSON body) served first. Records
    every request and the most requests it had in flight at once."""

    def __init__(self, delay: float = 0.0):
        self.requests, self.script, self.in_flight, self.most = [], [], 0, 0
        self.lock, self.delay = threading.Lock(), delay
        sandbox = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with sandbox.lock:
                    sandbox.requests.append(body)
                    canned = sandbox.script.pop(0) if sandbox.script else None
                    sandbox.in_flight += 1
                    sandbox.most = max(sandbox.most, sandbox.in_flight)
                try:
                    time.sleep(sandbox.delay)
                    answer = None if isinstance(canned, int) else canned or sandbox.answer(body)
                finally:  # out of flight before the answer goes: the client's next request can only come after
                    with sandbox.lock:
                        sandbox.in_flight -= 1
                if isinstance(canned, int):
                    self.send_response(canned)
                    self.end_headers()
                    return
                send_json(self, answer)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/run_code"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @staticmethod
    def answer(body: dict) -> dict:
        result = LocalRunner(body["memory_limit_MB"], body["run_timeout"]).run(body["code"], body["stdin"])
        if result.status == "timeout":
            return {"status": "Failed", "run_result": {"status": "TimeLimitExceeded"}}
        return {"status": "Success" if result.status == "finished" else "Failed",
                "run_result": {"status": "Finished", "stdout": result.stdout,
                               "return_code": 0 if result.status == "finished" else 1}}

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def test_the_sandbox_runs_each_case_and_its_answers_are_read_as_verl_reads_them():
    with Sandbox() as box:
        runner = SandboxRunner(box.url, max_concurrent=4, memory_limit_mb=300)
        assert code_score(f"```python\n{ADD}```", CASES, runner)["score"] == 1.0
        assert {(r["language"], r["memory_limit_MB"], r["stdin"]) for r in box.requests} == {
            ("python", 300, "1 2\n"), ("python", 300, "3 4\n"), ("python", 300, "5 5\n")}
        assert all(r["code"] == "\n" + ADD for r in box.requests)  # the block after ```python
        box.script = [{"status": "Failed", "run_result": {"status": "TimeLimitExceeded"}},
                      {"status": "Failed", "compile_result": {"status": "Error"}},
                      {"status": "SandboxError", "message": "no worker"}]
        verdicts = sorted(runner.run(ADD, "1 2\n").status for _ in range(3))
        assert verdicts == ["compile_error", "sandbox_error", "timeout"]


def test_a_gateway_timeout_is_retried_and_a_refusal_counts_as_a_sandbox_error():
    with Sandbox() as box:
        runner = SandboxRunner(box.url)
        box.script = [504, 504]  # two gateway timeouts, then the real answer (verl retries twice)
        assert runner.run(ADD, "1 2\n").stdout == "3\n" and len(box.requests) == 3
        box.script = [500]
        parts = code_score(ADD, {"inputs": ["1 2"], "outputs": ["3"]}, runner)
        assert parts == {"score": 0.0, "code_pass_rate": 0.0, "code_cases": 1.0, "code_sandbox_error": 1.0}


def test_max_concurrent_bounds_the_requests_in_flight():
    with Sandbox(delay=0.3) as box:
        runner = SandboxRunner(box.url, max_concurrent=2)
        cases = {"inputs": ["1 1"] * 8, "outputs": ["2"] * 8}
        assert code_score(ADD, cases, runner)["score"] == 1.0
        assert box.most == 2


@pytest.mark.parametrize("overrides, needle", [
    (["reward_model.sandbox_fusion.url=ftp://box/run_code"], "must be an http:// or https:// URL"),
    (["reward_model.sandbox_fusion.max_concurrent=0"], "max_concurrent=0 must be an integer >= 1"),
])
def test_sandbox_keys_out_of_range_are_refused(overrides, needle):
    from test_config import load

    with pytest.raises(ConfigError) as err:
        load(*overrides)
    assert needle in str(err.value), str(err.value)


@pytest.mark.parametrize("overrides, needle", [
    (["reward_model.sandbox_fusion.max_concurrent=8"],
     "reward_model.sandbox_fusion.url is null: the code runs on this machine"),
    (["reward_model.sandbox_fusion.url=http://127.0.0.1:1/run_code",
      "custom_reward_function.reward_fn_type=math_reward"], "the only reader of the sandbox settings"),
])
def test_sandbox_keys_without_effect_are_said_to_have_none(caplog, overrides, needle):
    from test_config import load

    with caplog.at_level("WARNING", logger="rft"):
        load(*overrides)
    assert needle in caplog.text and "have no effect" in caplog.text, caplog.text


def test_a_verl_launch_with_the_sandbox_trains_two_steps_scoring_through_it(tmp_path):
    """verl's sandbox example's keys (reward_model.sandbox_fusion.url / max_concurrent) on code rows: every response
    scored through the sandbox, the pass rate logged, two steps trained."""
    from rl_helpers import make_assets, rl_config

    from rft.data.io import write_parquet
    from rft.orchestration.run import SyncRun

    assets = make_assets(tmp_path / "assets")
    rows = [{"prompt": [{"role": "user", "content": f"Print {i} + 1."}], "data_source": "codecontests",
             "reward_model": {"ground_truth": json.dumps({"inputs": [""], "outputs": [str(i + 1)]})}}
            for i in range(8)]
    write_parquet(rows, tmp_path / "code.parquet")
    with Sandbox() as box:
        cfg = rl_config(assets, tmp_path / "out", f"data.train_files={tmp_path / 'code.parquet'}",
                        "custom_reward_function.path=null", f"reward_model.sandbox_fusion.url={box.url}",
                        "reward_model.sandbox_fusion.max_concurrent=3", "trainer.total_training_steps=2")
        metrics = SyncRun(cfg).fit()
        assert len(box.requests) == 2 * 4 * 4  # 2 steps x 4 prompts x 4 responses, one case each
    assert metrics["training/global_step"] == 2
    assert metrics["reward_extra/code_cases/mean"] == 1.0
    assert metrics["reward_extra/code_sandbox_error/mean"] == 0.0


def test_a_code_row_whose_test_cases_cannot_run_is_refused_before_the_model_loads(tmp_path):
    from cli_helpers import rft_here

    from rft.data.io import write_parquet
    from rft.models.tiny import init_model

    init_model("tiny", tmp_path / "m", seed=0)
    rows = [{"prompt": "Print 1.", "data_source": "apps", "reward_model": {"ground_truth": '{"inputs": ["1"]}'}}]
    write_parquet(rows, tmp_path / "code.parquet")
    proc = rft_here("train", f"actor_rollout_ref.model.path={tmp_path / 'm'}",
                    f"data.train_files={tmp_path / 'code.parquet'}", "data.train_batch_size=1",
                    "actor_rollout_ref.actor.ppo_mini_batch_size=1", "trainer.total_training_steps=1",
                    f"trainer.default_local_dir={tmp_path / 'out'}", cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert "code.parquet row 0 (data_source 'apps', scored by running the response's program): a code row's " \
           "ground truth holds its test cases as" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr

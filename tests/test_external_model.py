"""external_model (Trinity-RFT's model.external_model): mode bench evaluates a model behind an OpenAI-compatible API,
here a scripted one on 127.0.0.1 that answers through the real openai client's requests: the replies scored by the
workflow as a local model's (a hand-counted accuracy), the request's model, sampling and messages as configured,
an API that answers one choice at a time asked again for the rest; what it cannot run refused in one line; Trinity's
example resolves to it."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cli_helpers import rft_here
from http_helpers import send_json

from rft.explorer.workflow import R1_SYSTEM_PROMPT

SUMS = [(2, 3), (4, 5), (7, 1), (8, 8), (9, 9), (6, 0)]
"""The tasks a+b=; the scripted model adds right when a is even (4 of the 6) and says a+b+1 otherwise."""


class ScriptedApi:
    """An OpenAI-compatible chat completions endpoint answering one choice per request, whatever `n` asks."""

    def __init__(self):
        self.requests: list[dict] = []
        self.failing: set[int] = set()  # the a's of the tasks it answers with HTTP 500
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                api.requests.append(body)
                a, b = map(int, re.match(r"(\d+)\+(\d+)=", body["messages"][-1]["content"]).groups())
                if a in api.failing:
                    self.send_response(500)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                answer = a + b if a % 2 == 0 else a + b + 1
                reply = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": str(answer)}}],
                         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
                send_json(self, reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api(monkeypatch):
    server = ScriptedApi()
    monkeypatch.setenv("MY_API_URL", server.url)
    yield server
    server.close()


def _rows(folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / "val.jsonl"
    path.write_text("".join(json.dumps({"data_source": "arithmetic", "prompt": [{"role": "user", "content": f"{a}+{b}="}],
                                        "reward_model": {"ground_truth": str(a + b)}}) + "\n" for a, b in SUMS))
    return path


def _bench(tmp_path: Path, *more: str, check: bool = True):
    return rft_here("train", "trainer.mode=bench", "external_model.enable=true", "external_model.model_name=api-model",
                    "external_model.base_url_env=MY_API_URL", f"data.val_files={_rows(tmp_path / 'data')}",
                    "data.max_response_length=7", "actor_rollout_ref.rollout.val_kwargs.n=3",
                    "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
                    "actor_rollout_ref.rollout.val_kwargs.temperature=0.7", f"trainer.default_local_dir={tmp_path / 'out'}",
                    "trainer.logger=[console]", *more, cwd=tmp_path, check=check)


def test_an_api_model_is_scored_by_the_workflow_as_configured(tmp_path, api):
    proc = _bench(tmp_path, "workflow.type=math_workflow")
    (line,) = (tmp_path / "out" / "bench" / "metrics.jsonl").read_text().splitlines()
    row = json.loads(line)
    assert row["checkpoint"] == "external:api-model" and row["bench/external/failed_tasks"] == 0.0
    assert row["bench/arithmetic/reward/mean@3"] == pytest.approx(4 / 6)  # the even a's, every sample
    assert "bench/arithmetic/reward/mean@3=0.6667" in proc.stdout
    # each task asked for 3 replies; one came per answer, so 3 requests a task, asking for 3, then 2, then 1
    assert len(api.requests) == 3 * len(SUMS)
    assert sorted(r["n"] for r in api.requests) == sorted([3, 2, 1] * len(SUMS))
    first = api.requests[0]
    assert first["model"] == "api-model" and first["max_tokens"] == 7 and first["temperature"] == 0.7
    assert first["messages"][0] == {"role": "system", "content": R1_SYSTEM_PROMPT}  # math_workflow's prompt


def test_a_task_the_api_keeps_failing_scores_zero_and_a_run_that_gets_nothing_stops(tmp_path, api, caplog):
    api.failing = {2}  # the first task (2+3, which it would answer right): 500 at every try
    _bench(tmp_path, "workflow.max_retry_times=1")
    row = json.loads((tmp_path / "out" / "bench" / "metrics.jsonl").read_text())
    assert row["bench/external/failed_tasks"] == 1.0 and row["bench/arithmetic/reward/mean@3"] == pytest.approx(3 / 6)
    assert "1 of 6 tasks failed after 2 tries each and score 0; the first, " in caplog.text
    api.failing = {a for a, _ in SUMS}
    proc = _bench(tmp_path, "workflow.max_retry_times=0", check=False)
    assert proc.returncode == 2 and "rft: error: external model: every task failed after 1 try each" in proc.stderr


@pytest.mark.parametrize("overrides, message", [
    (["trainer.mode=both", "data.train_files=DATA"], "external_model.enable: a model behind an API is evaluated in "
                                                     "trainer.mode=bench only, not both"),
    (["workflow.type=tool_call_workflow"], "workflow.type=tool_call_workflow is not a single-turn workflow an API "
                                           "model can run"),
    (["external_model.base_url_env=NO_SUCH_VARIABLE"], "external_model.base_url_env=NO_SUCH_VARIABLE: that environment "
                                                       "variable is not set"),
    (["reward_model.overlong_buffer.enable=true", "reward_model.overlong_buffer.len=4"],
     "external_model.enable: reward_model.overlong_buffer counts a reply's tokens"),
])
def test_what_an_api_model_cannot_run_is_refused_in_one_line(tmp_path, api, overrides, message):
    data = _rows(tmp_path / "data")
    proc = rft_here("train", "trainer.mode=bench", "external_model.enable=true", "external_model.model_name=api-model",
                    "external_model.base_url_env=MY_API_URL", f"data.val_files={data}",
                    f"trainer.default_local_dir={tmp_path / 'out'}", *[o.replace("DATA", str(data)) for o in overrides],
                    cwd=tmp_path, check=False)
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("rft: error:") == 1
    assert not api.requests


def test_trinitys_external_model_example_lands_on_it(tmp_path, api, monkeypatch):
    """Trinity's examples/bench/external_model.yaml (its GSM8K eval set swapped for the rows above, its math_workflow
    and API variables kept), through the Trinity dialect: evaluated on the scripted API."""
    import yaml

    from rft.dialects.trinity import translate

    tree = yaml.safe_load((Path(__file__).resolve().parents[2] / "shared" / "peer-configs" / "trinity" / "examples" /
                           "bench" / "external_model.yaml").read_text())
    taskset = tree["buffer"]["explorer_input"]["eval_tasksets"][0]
    taskset.update(path=str(_rows(tmp_path / "data")), format={"prompt_key": "prompt"})
    taskset.pop("subset_name"), taskset.pop("split")
    tree["checkpoint_root_dir"] = str(tmp_path / "ckpt")
    monkeypatch.setenv("OPENAI_BASE_URL", api.url)
    out = translate(tree, "external_model.yaml")
    assert out["external_model"] == {"enable": True, "model_name": "qwen3-max", "base_url_env": "OPENAI_BASE_URL",
                                     "api_key_env": "OPENAI_API_KEY"}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(tree))
    rft_here("train", "t.yaml", cwd=tmp_path)
    (line,) = next((tmp_path / "ckpt").rglob("bench/metrics.jsonl")).read_text().splitlines()
    # Trinity's math_workflow scores with its math_reward: the answer, less 0.1 for a reply without its think format
    assert json.loads(line)["bench/arithmetic/reward/mean@1"] == pytest.approx(4 / 6 - 0.1)
    assert {r["model"] for r in api.requests} == {"qwen3-max"} and api.requests[0]["max_tokens"] == 1024

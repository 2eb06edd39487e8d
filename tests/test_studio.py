"""rft studio without a browser: the forms are the schema, the validation is rft train's, the YAML it writes is the
config it validated, the run view reads what a run folder holds; and the real server (started here on 127.0.0.1)
serves both pages, writes a config, starts a run and shows its failure."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from rl_helpers import make_assets
from studio_server import TOKENS, get, post, studio, wait_for

from rft.config import ConfigError, to_yaml
from rft.config.schema import RFTConfig
from rft.config.sft_schema import SFTConfig
from rft.config.validate import walk
from rft.studio import forms, runs
from rft.trainer.configure import load_config

os.environ["HF_HUB_OFFLINE"] = "1"


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    return make_assets(tmp_path_factory.mktemp("studio_assets"))


def _valid(assets: Path) -> dict:
    return {"actor_rollout_ref.model.path": str(assets / "model"),
            "data.train_files": str(assets / "data" / "train.parquet"), "data.train_batch_size": 4,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 4, "actor_rollout_ref.rollout.n": 2,
            "data.max_prompt_length": 32, "data.max_response_length": 4, "trainer.logger": "[console]",
            "trainer.total_training_steps": 1}


# ------------------------------------------------------------------------------------------------- forms
@pytest.mark.parametrize("kind, schema", [("rl", RFTConfig), ("sft", SFTConfig)])
def test_every_field_comes_from_the_schema(kind, schema):
    form = forms.form(kind)
    by_key = {f["key"]: f for f in form["fields"]}
    leaves = list(walk(schema()))
    assert list(by_key) == [key for key, _, _ in leaves]  # every leaf once, in schema order
    for key, f, default in leaves:
        field = by_key[key]
        assert field["help"] == f.metadata["help"] and field["default"] == json.loads(json.dumps(default, default=str))
        if "choices" in f.metadata:
            assert field["choices"] == json.loads(json.dumps(list(f.metadata["choices"])))
        else:  # a nullable bool is a choice of null, true, false; other fields have no list
            assert field["choices"] == ([None, True, False] if str(f.type) == "Optional[bool]" else None), key
        assert field["unsupported"] == f.metadata.get("unsupported")
    assert {k for k, f in by_key.items() if f["beginner"]} == set(forms.BEGINNER[kind])
    assert by_key[next(iter(forms.BEGINNER[kind]))]["beginner"]
    types = {f["type"] for f in form["fields"]}
    assert types == {"bool", "int", "float", "str", "choice", "yaml"}


def test_validation_is_rft_trains_and_the_yaml_is_what_it_validated(assets, tmp_path):
    values = _valid(assets)
    result = forms.check("rl", values)
    assert result["ok"], result["error"]
    cfg = load_config(None, result["overrides"])
    path = tmp_path / "c.yaml"
    path.write_text(result["yaml"])
    assert to_yaml(load_config(path)) == to_yaml(cfg)
    assert yaml.safe_load(result["yaml"])["data"]["train_batch_size"] == 4  # typed, as the command line parses
    for key, value in (("data.train_batch_size", 3), ("actor_rollout_ref.rollout.n", "two"),
                       ("trainer.logger", "[console, swanlab]"), ("data.val_files", str(tmp_path / "none.parquet"))):
        bad = forms.check("rl", {**values, key: value})
        with pytest.raises(ConfigError) as err:
            load_config(None, bad["overrides"])
        assert not bad["ok"] and bad["error"] == str(err.value) and key.split(".")[-1] in bad["error"]
    sft = forms.check("sft", {"model.partial_pretrain": str(assets / "model"), "data.train_files": "x.jsonl"})
    assert not sft["ok"] and "x.jsonl" in sft["error"]


@pytest.mark.parametrize("kind, key, expected", [
    ("rl", "trainer.total_training_step", "unknown config key 'trainer.total_training_step'; did you mean "
                                          "'trainer.total_training_steps'? Allowed keys under 'trainer': "
                                          "total_training_steps, total_epochs, "),
    ("rl", "trainr.total_training_steps", "unknown config key 'trainr.total_training_steps'; did you mean 'trainer'? "
                                          "Allowed keys at the top level: trainer, data, "),
    ("sft", "optim.lrr", "unknown config key 'optim.lrr'; did you mean 'optim.lr'? Allowed keys under 'optim': lr, "
                         "betas, eps, weight_decay, warmup_steps_ratio, clip_grad, lr_scheduler, min_lr_ratio"),
])
def test_live_check_of_an_unknown_key_names_the_nearest_and_the_allowed_keys(kind, key, expected):
    """Issue 42: the live check named the unknown key only."""
    result = forms.check(kind, {key: 1})
    assert not result["ok"] and result["error"].startswith(expected), result["error"]


# ------------------------------------------------------------------------------------------------- runs
def test_run_view_reads_a_run_folder(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints" / "global_step_2").mkdir(parents=True)
    (run / "checkpoints" / "global_step_2" / "policy.safetensors").write_bytes(b"x" * 1000)
    (run / "checkpoints" / "latest").write_text("global_step_2\n")
    (run / "config.yaml").write_text("trainer:\n  total_training_steps: 3\n")
    lines = [{"step": 1, "critic/score/mean": 0.1, "response_length/mean": 4.0, "actor/kl_loss": 0.01,
              "val-core/arithmetic/reward/mean@1": 0.2, "timing_s/step": 2.0, "timing_s/gen": 1.5},
             {"step": 2, "critic/score/mean": 0.3, "response_length/mean": "nan", "timing_s/step": 4.0,
              "timing_s/gen": 2.5}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"step": 3, "crit')
    (run / "val_before_train.json").write_text(json.dumps({"val-core/arithmetic/reward/mean@1": 0.1}))
    (run / "val_generations.jsonl").write_text(json.dumps({"step": 2, "samples": [{"prompt": "p", "response": "r",
                                                                                    "score": 1.0}]}) + "\n")
    view = runs.read_run(run)
    assert view["status"] == "stopped" and [p["name"] for p in view["parts"]] == ["run"]
    part = view["parts"][0]
    assert part["last_step"] == 2 and part["total_steps"] == 3  # the half-written line is left for later
    charts = part["charts"]
    assert charts["reward"] == {"reward (critic/score/mean)": [[1, 0.1], [2, 0.3]]}
    assert charts["accuracy"] == {"arithmetic": [[0, 0.1], [1, 0.2]]}  # with the step-0 validation
    assert charts["length"] == {"response length (mean)": [[1, 4.0]]}  # nan left out
    assert charts["kl"] == {"actor/kl_loss": [[1, 0.01]]}
    assert part["timings"] == [{"phase": "step", "last": 4.0, "mean": 3.0}, {"phase": "gen", "last": 2.5, "mean": 2.0}]
    assert part["generations"]["samples"][0]["response"] == "r"
    assert part["checkpoints"] == [{"name": "global_step_2", "step": 2, "bytes": 1000, "latest": True,
                                    "damaged": False}]
    (run / ".rft.lock").write_text(json.dumps({"pid": os.getpid()}) + "\n")  # a live process holds the lock
    assert runs.read_run(run)["status"] == "running"
    (run / ".rft.lock").write_text(json.dumps({"pid": 0}) + "\n")  # no process: not os.kill(0, 0)'s own group
    assert runs.read_run(run)["status"] == "stopped"
    (run / "failed.json").write_text(json.dumps({"error": "reward function 'f' raised ValueError"}))
    view = runs.read_run(run)
    assert view["status"] == "failed" and view["error"] == "reward function 'f' raised ValueError"
    assert runs.read_run(tmp_path / "nope")["status"] == "missing"
    assert runs.list_runs(tmp_path) == [str(run)]


# ------------------------------------------------------------------------------------------------ server
def test_the_server_serves_both_pages_writes_starts_and_shows_a_failed_run(assets, tmp_path):
    (tmp_path / "bad_reward.py").write_text("def compute_score(data_source, solution_str, ground_truth, extra_info):\n"
                                            "    raise ValueError('no score today')\n")
    values = {**_valid(assets), "trainer.default_local_dir": str(tmp_path / "runs" / "bad"),
              "custom_reward_function.path": str(tmp_path / "bad_reward.py")}
    with studio(tmp_path / "runs", tmp_path) as url:
        import urllib.request

        for page in ("/config", "/run"):
            html = urllib.request.urlopen(f"{url}{page}?token={TOKENS[url]}", timeout=60).read().decode()
            assert "rft studio" in html and "/static/studio.js" in html
        assert "function renderRun" in urllib.request.urlopen(url + "/static/studio.js", timeout=60).read().decode()
        assert get(url + "/api/form?kind=sft")["command"] == "rft sft"
        status, result = post(url + "/api/validate", {"kind": "rl", "values": {**values, "data.train_batch_size": 0}})
        assert status == 200 and not result["ok"] and "data.train_batch_size" in result["error"]
        status, result = post(url + "/api/write", {"kind": "rl", "values": {**values, "data.train_batch_size": 0},
                                                   "path": str(tmp_path / "bad.yaml")})
        assert status == 400 and "not written" in result["error"] and not (tmp_path / "bad.yaml").exists()
        path = tmp_path / "configs" / "run.yaml"
        status, result = post(url + "/api/write", {"kind": "rl", "values": values, "path": str(path)})
        assert status == 200 and path.read_text().startswith("# written by rft studio; run it with: rft train")
        status, started = post(url + "/api/start", {"kind": "rl", "path": str(path)})
        assert status == 200 and Path(started["run_dir"]) == tmp_path / "runs" / "bad"
        view = wait_for(lambda: (v := get(f"{url}/api/run?dir={started['run_dir']}"))["status"] == "failed"
                        and v["process"]["exit_code"] is not None and v)
        assert "no score today" in view["error"] and view["process"]["exit_code"] == 2
        assert any("rft: error:" in line for line in view["log"])
        assert (tmp_path / "runs" / "bad" / "failed.json").is_file()
        assert get(url + "/api/runs")["runs"] == [started["run_dir"]]



def test_a_run_whose_lock_is_held_on_another_host_is_running_elsewhere(tmp_path):
    """A lock names its holder's host (`host_id`: machine and PID namespace). A pid of another host or container
    cannot be tested here, so its lock, while held (not emptied), reads "running elsewhere" with the host: it read
    as stopped (the pid not alive here), or as running when the number was a pid of this machine. A lock of this
    host is tested as before."""
    import subprocess
    import sys

    from rft.fsutil import host_id

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "critic/score/mean": 0.1}) + "\n")
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # a pid no process has here
    elsewhere = "node7/pid:[4026531836]"
    (run / ".rft.lock").write_text(json.dumps({"pid": proc.pid, "host": elsewhere}) + "\n")
    view = runs.read_run(run)
    assert view["status"] == "running elsewhere" and view["running_on"] == elsewhere
    (run / ".rft.lock").write_text(json.dumps({"pid": proc.pid, "host": host_id()}) + "\n")
    assert runs.read_run(run)["status"] == "stopped"
    (run / ".rft.lock").write_text(json.dumps({"pid": os.getpid(), "host": host_id()}) + "\n")
    assert runs.read_run(run)["status"] == "running"
    (run / ".rft.lock").write_text("")  # released by the run on the other host
    view = runs.read_run(run)
    assert view["status"] == "stopped" and view["running_on"] is None

def _raw(url: str, method: str = "GET", body: bytes | None = None, headers: dict | None = None) -> tuple[int, str]:
    """One request with exactly these headers (urllib adds Host from the URL unless given)."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, body, headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_the_studio_refuses_what_another_web_page_could_send(assets, tmp_path):
    """Each attack a page the user opens could make on a server on 127.0.0.1 (issue: a text/plain POST from
    Origin evil.example wrote a YAML and started rft train), refused; the studio's own requests still work."""
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    values = {**_valid(assets), "trainer.default_local_dir": str(tmp_path / "runs" / "r")}
    good_yaml = tmp_path / "ok.yaml"
    with studio(tmp_path / "runs", tmp_path) as url:
        token = TOKENS[url]
        auth = {"Authorization": f"token {token}"}
        body = json.dumps({"kind": "rl", "values": values, "path": str(good_yaml)}).encode()
        as_json = {"Content-Type": "application/json"}
        # no token, a wrong one: pages and API alike
        wrong = token[:-1] + ("y" if token.endswith("x") else "x")  # (a token ending in x made it the right one)
        for path in ("/config", "/run", "/api/runs", f"/api/form?kind=rl&token={wrong}"):
            assert _raw(url + path)[0] == 403, path
        assert _raw(url + "/api/write", "POST", body, as_json)[0] == 403 and not good_yaml.exists()
        # the simple cross-origin POST a page can send without a preflight: text/plain, foreign Origin
        status, _ = _raw(url + "/api/write", "POST", body, {"Content-Type": "text/plain", "Origin": "http://evil.example"})
        assert status == 403 and not good_yaml.exists()
        status, _ = _raw(url + "/api/write", "POST", body, {"Content-Type": "text/plain", **auth})  # token, not JSON
        assert status == 415 and not good_yaml.exists()
        status, _ = _raw(url + "/api/start", "POST", body, {**as_json, **auth, "Origin": "http://evil.example"})
        assert status == 403
        # DNS rebinding: the right token even, under a foreign Host
        assert _raw(url + "/api/runs", headers={**auth, "Host": "evil.example"})[0] == 403
        assert _raw(f"{url}/config?token={token}", headers={"Host": "evil.example:80"})[0] == 403
        # writes only under the studio's folder, runs and run views only under --runs
        for path in (outside / "x.yaml", tmp_path / ".." / f"{tmp_path.name}-outside" / "x.yaml"):
            status, text = post(url + "/api/write", {"kind": "rl", "values": values, "path": str(path)})
            assert status == 403 and "outside" in text["error"] and not outside.exists()
        status, text = post(url + "/api/write", {"kind": "rl", "values": {
            **values, "trainer.default_local_dir": str(outside / "run")}, "path": str(tmp_path / "elsewhere.yaml")})
        assert status == 200  # a valid config may name any folder; starting it is what is refused
        status, text = post(url + "/api/start", {"kind": "rl", "path": str(tmp_path / "elsewhere.yaml")})
        assert status == 403 and "outside" in text["error"] and not outside.exists()
        assert _raw(f"{url}/api/run?dir={tmp_path}", headers=auth)[0] == 403
        # malformed JSON: a 400 with its reason, not a bug report
        status, text = _raw(url + "/api/validate", "POST", b"{not json", {**as_json, **auth})
        assert status == 400 and "not JSON" in text
        # the studio's own: the printed URL sets the cookie the page's calls carry; same-origin POST with Origin
        status, _ = _raw(f"{url}/config?token={token}")
        assert status == 200
        cookie = {"Cookie": f"rft_studio_token={token}"}
        assert _raw(url + "/api/runs", headers=cookie)[0] == 200
        status, _ = _raw(url + "/api/write", "POST", body, {**as_json, **cookie, "Origin": url})
        assert status == 200 and good_yaml.is_file()
        assert _raw(url + "/static/studio.js")[0] == 200  # the script holds nothing secret


def test_a_malformed_request_is_a_plain_400_not_a_bug_report(tmp_path, monkeypatch):
    """A body that is not JSON, not an object, of an unknown kind or with a path that is no YAML file: the
    client's fault, answered 400 with what is wrong (it read "unexpected ValueError ... a bug in rft")."""
    import threading

    from rft.studio.server import make_server

    monkeypatch.chdir(tmp_path)
    server = make_server("127.0.0.1", 0, tmp_path / "runs")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    headers = {"Content-Type": "application/json", "Authorization": f"token {server.studio.token}"}
    try:
        for path, body, needle in [("/api/validate", b"{not json", "not JSON"),
                                   ("/api/write", b"\xff\xfe", "not JSON"),
                                   ("/api/validate", b"[1, 2]", "must be a JSON object"),
                                   ("/api/validate", b'{"kind": "dpo"}', "unknown config kind 'dpo'"),
                                   ("/api/start", b'{"kind": "rl", "path": 3}', "'path' a string"),
                                   ("/api/write", b'{"kind": "rl", "path": "x.txt"}', "must end in .yaml")]:
            status, text = _raw(url + path, "POST", body, headers)
            assert status == 400 and needle in json.loads(text)["error"], (path, body, text)
            assert "bug" not in text and "unexpected" not in text, text
    finally:
        server.shutdown()
        server.server_close()


def test_serving_every_interface_is_said_at_start_and_the_token_still_required(tmp_path):
    """`--host 0.0.0.0`: one line at start says that the studio serves every interface and that every request needs
    the token; a request without it is still refused (403)."""
    import queue
    import re
    import subprocess
    import sys
    import threading
    import urllib.error
    import urllib.request

    process = subprocess.Popen([sys.executable, "-m", "rft", "studio", "--host", "0.0.0.0", "--port", "0",
                                "--runs", str(tmp_path / "runs")], cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    printed: queue.Queue = queue.Queue()  # the server runs on: its output has no end to wait for
    threading.Thread(target=lambda: [printed.put(line) for line in process.stdout], daemon=True).start()
    try:
        urls = printed.get(timeout=120)
        port, token = re.search(r"http://0\.0\.0\.0:(\d+)/config\?token=([\w-]+)", urls).groups()
        reach = printed.get(timeout=60)
        assert reach.rstrip("\n") == (
            f"rft studio: serving every interface (0.0.0.0) on port {port}: other machines that reach it can connect, "
            "and every request needs the token in the URLs above (keep them private)")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs", timeout=60)
        assert refused.value.code == 403
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/runs",
                                         headers={"Authorization": f"token {token}"})
        assert json.loads(urllib.request.urlopen(request, timeout=60).read())["runs"] == []
    finally:
        process.terminate()
        process.wait(timeout=30)
        process.stdout.close()


@pytest.mark.parametrize("host, said", [("127.0.0.1", None), ("localhost", None), ("::1", None),
                                        ("::", "every interface (::)"), ("10.1.2.3", "10.1.2.3")])
def test_how_far_a_host_reaches_beyond_this_machine(host, said):
    from rft.studio.server import beyond_this_machine

    assert beyond_this_machine(host) == said

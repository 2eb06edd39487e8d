"""Engine servers (issue 62, item 4): `rft serve` runs the hf engine in a process of its own, every HTTP request's
samples in one stream; `RemoteRollout` is the `RolloutEngine` over one or several of them. Each server here is a
real `python -m rft serve` subprocess on 127.0.0.1 over a tiny model folder, stopped by the test."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from rft.data.dataset import left_pad
from rft.rollout import HFRollout, SamplingParams
from rft.rollout.remote import EngineServerError, RemoteRollout

PROMPTS = [[5, 17, 30, 2], [40, 41], [100, 3, 9, 81, 64, 7, 12], [8, 200, 31]]
GREEDY = SamplingParams(do_sample=False, temperature=0, max_tokens=12)
START_S = 120  # a loaded 2-core machine imports torch and loads the model in ~10 s; bounded all the same


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """`rft init-model --preset tiny`, its weights drawn at initialiser scale 0.2 (the tiny preset's 0.02 leaves
    greedy choices coin flips between near-equal logits, which a batch of another shape may flip)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from rft.cli import main

    path = tmp_path_factory.mktemp("serve") / "tiny"
    assert main(["init-model", "--preset", "tiny", str(path)]) == 0
    config = AutoConfig.from_pretrained(path)
    config.initializer_range = 0.2
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(path)
    return path


@contextmanager
def served(path: Path, *args: str):
    """`rft serve path` as a subprocess: (its base URL, the process); killed and reaped on the way out."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "rft", "serve", str(path), "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    found = threading.Event()

    def read() -> None:  # the whole output, so a full pipe never blocks the server
        for line in proc.stdout:
            lines.append(line)
            if "/health" in line:
                found.set()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        found.wait(START_S)
        match = re.search(r"on (http://127\.0\.0\.1:\d+)/v1", "".join(lines))
        assert match, f"rft serve did not start within {START_S} s:\n{''.join(lines)}"
        yield match.group(1), proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
        reader.join(10)


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def in_process(path: Path, weights: dict | None = None):
    """`generate()` of the hf engine in this process on the model folder (float32), greedy."""
    from rft.models.load import load_causal_lm, load_tokenizer
    from rft.rollout.base import eos_token_ids

    tokenizer = load_tokenizer(str(path))
    model = load_causal_lm(str(path), torch.float32, torch.device("cpu")).eval()
    engine = HFRollout(model, eos_token_ids(model, tokenizer), tokenizer.pad_token_id)
    if weights is not None:
        engine.update_weights(weights, 1)
    ids, mask = left_pad(PROMPTS, tokenizer.pad_token_id)
    return engine.generate(ids, mask, GREEDY), engine


def rows(out) -> list[list[int]]:
    return [ids[mask.bool()].tolist() for ids, mask in zip(out.response_ids, out.response_mask)]


def shifted(model_dir: Path) -> dict[str, torch.Tensor]:
    """New weights for the output head: the starting ones plus noise, so the greedy tokens change."""
    from safetensors.torch import load_file

    weights = load_file(str(model_dir / "model.safetensors"))
    name = next(n for n in weights if "embed_tokens" in n or "lm_head" in n)
    torch.manual_seed(1)
    return {name: weights[name] + 0.5 * torch.randn_like(weights[name])}


def test_remote_greedy_equals_in_process_generate_and_a_weight_update_applies_in_place(model_dir, tmp_path):
    from safetensors.torch import save_file

    expected, engine = in_process(model_dir)
    with served(model_dir) as (url, _):
        client = RemoteRollout([url], model="tiny", connect_timeout=30)
        assert client.version == 0 and client.eos_ids.tolist() == engine.eos_ids.tolist()
        ids, mask = left_pad(PROMPTS, 0)
        out = client.generate(ids, mask, GREEDY)
        assert rows(out) == rows(expected)
        assert torch.allclose(out.logprobs * out.response_mask, expected.logprobs, atol=1e-5)
        assert out.versions[out.response_mask.bool()].eq(0).all()

        # in place, no restart: the outputs change to the new weights', every token recorded at version 1
        new = shifted(model_dir)
        client.update_weights(new, 1)
        assert get(f"{url}/health")["version"] == 1 and client.version == 1
        after = client.generate(ids, mask, GREEDY)
        updated, _ = in_process(model_dir, new)
        assert rows(after) == rows(updated) != rows(expected)
        assert after.versions[after.response_mask.bool()].eq(1).all()

        # rejected updates: HTTP 400 naming the tensor, nothing applied (the version stays 1)
        name = next(iter(new))
        bad = tmp_path / "bad.safetensors"
        save_file({name: torch.zeros(3, 3)}, str(bad))
        status, reply = post(f"{url}/update_weights", {"path": str(bad), "version": 2})
        assert status == 400 and f"tensor {name!r}: shape [3, 3]" in reply["error"]["message"]
        save_file({"no.such.weight": torch.zeros(2)}, str(bad))
        with pytest.raises(EngineServerError, match=r"refused POST /update_weights \(HTTP 400\).*'no.such.weight'"):
            client.update_weights({"no.such.weight": torch.zeros(2)}, 2)
        nan = {name: torch.full_like(new[name], float("nan"))}
        with pytest.raises(EngineServerError, match="NaN or infinite.*nothing was loaded"):
            client.update_weights(nan, 2)
        status, reply = post(f"{url}/update_weights", {"path": str(tmp_path / "missing.safetensors"), "version": 2})
        assert status == 400 and "does not load as a safetensors file" in reply["error"]["message"]
        assert get(f"{url}/health")["version"] == 1 and client.version == 1
        assert rows(client.generate(ids, mask, GREEDY)) == rows(after)

        # an update while a response is in flight reaches it at a decode-step boundary: its tokens' versions are
        # 1 up to some token and 2 from there on
        long: list = []
        thread = threading.Thread(target=lambda: long.append(client.generate(
            *left_pad(PROMPTS[:1], 0), SamplingParams(max_tokens=2000, ignore_eos=True))))  # of 2048 positions
        thread.start()
        deadline = time.monotonic() + 60
        while get(f"{url}/health")["running"] == 0 and time.monotonic() < deadline:  # its first token drawn
            time.sleep(0.05)
        client.update_weights(shifted(model_dir), 2)
        thread.join(120)
        versions = long[0].versions[0].tolist()
        switch = versions.index(2)
        assert switch > 0 and versions == [1] * switch + [2] * (2000 - switch)


def test_two_servers_share_the_requests_and_the_openai_client_gets_the_token_details(model_dir):
    import openai

    expected, _ = in_process(model_dir)
    with served(model_dir, "--max-num-seqs", "2") as (a, _), served(model_dir, "--name", "tiny") as (b, _):
        health = get(f"{a}/health")
        assert health["model"] == "tiny" and health["max_num_seqs"] == 2 and health["pending"] == 0
        assert get(f"{a}/v1/models")["data"][0]["id"] == "tiny"
        client = RemoteRollout([a, b], model="tiny", fingerprint=health["fingerprint"])
        served_by = []
        call = client.servers[0].call.__func__

        def counting(server, *args, **kwargs):
            served_by.append(server.url)
            return call(server, *args, **kwargs)
        for server in client.servers:
            server.call = counting.__get__(server)
        ids, mask = left_pad(PROMPTS, 0)
        assert rows(client.generate(ids, mask, GREEDY)) == rows(expected)
        assert {a, b} <= set(served_by)  # least-loaded: the four requests went to both servers
        # sampled with a generator: one seeded request per server (/seed, then its share of the prompts), so the
        # same seed gives the same samples whatever the timing, and another seed others
        sampled = dataclasses.replace(GREEDY, do_sample=True, temperature=1.0, n=2)
        draw = lambda seed: rows(client.generate(ids, mask, sampled, torch.Generator().manual_seed(seed)))
        first = draw(0)
        assert draw(0) == first and draw(1) != first and len(first) == 2 * len(PROMPTS)
        assert post(f"{a}/seed", {"seed": -1})[0] == 400 and post(f"{a}/seed", {"seed": 3, "x": 1})[0] == 400

        oa = openai.OpenAI(base_url=f"{a}/v1", api_key="none", max_retries=0, timeout=60)
        completion = oa.completions.create(model="tiny", prompt=PROMPTS[0], max_tokens=12, temperature=0)
        details = completion.choices[0].model_extra["rft"]
        assert details["prompt_token_ids"] == PROMPTS[0]
        assert details["token_ids"] == rows(expected)[0] and details["versions"] == [0] * len(details["token_ids"])
        assert len(details["logprobs"]) == len(details["token_ids"])
        chat = oa.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=5,
                                          temperature=0, n=2)
        assert [len(c.model_extra["rft"]["token_ids"]) for c in chat.choices] == [
            len(c.model_extra["rft"]["versions"]) for c in chat.choices]
        with pytest.raises(openai.NotFoundError, match="does not exist"):
            oa.completions.create(model="other", prompt="x", max_tokens=2)


def test_a_request_joins_the_rows_in_flight_and_a_silent_foreign_or_dying_server_is_named(model_dir):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(EngineServerError, match=rf"engine server http://127.0.0.1:{port} did not answer within 1 s"):
        RemoteRollout([f"127.0.0.1:{port}"], model="tiny", connect_timeout=1)
    assert time.monotonic() - start < 30

    with served(model_dir) as (url, proc):
        with pytest.raises(EngineServerError, match=rf"{url} serves model 'tiny', not 'qwen'"):
            RemoteRollout([url], model="qwen")
        with pytest.raises(EngineServerError, match="with config fingerprint .*, not 0123: another model"):
            RemoteRollout([url], model="tiny", fingerprint="0123")

        client = RemoteRollout([url], model="tiny")
        errors: list[BaseException] = []

        def long_generation() -> None:
            ids, mask = left_pad(PROMPTS, 0)
            try:
                client.generate(ids, mask, SamplingParams(max_tokens=2000, ignore_eos=True))  # of 2048 positions
            except BaseException as e:
                errors.append(e)
        thread = threading.Thread(target=long_generation)
        thread.start()
        deadline = time.monotonic() + 60
        while get(f"{url}/health")["pending"] == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        # continuous batching across HTTP requests: a short request sent now joins the stream in flight and comes
        # back (greedy: generate()'s tokens) while the long one still runs
        expected, _ = in_process(model_dir)
        short = client.generate(*left_pad(PROMPTS[:1], 0), GREEDY)
        assert rows(short) == rows(expected)[:1]
        assert thread.is_alive() and get(f"{url}/health")["pending"] == len(PROMPTS)
        proc.kill()  # mid-request
        thread.join(60)
        assert not thread.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], EngineServerError)
        assert f"engine server {url} closed the connection during POST /v1/completions" in str(errors[0])


def test_a_server_dying_behind_a_client_of_two_leaves_its_requests_to_the_other(model_dir, caplog):
    long = SamplingParams(do_sample=False, temperature=0, max_tokens=600, ignore_eos=True)
    with served(model_dir) as (a, proc_a), served(model_dir) as (b, proc_b):
        client = RemoteRollout([a, b], model="tiny")
        out: list = []
        thread = threading.Thread(target=lambda: out.append(client.generate(*left_pad(PROMPTS, 0), long)))
        with caplog.at_level("WARNING", logger="rft"):
            thread.start()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (get(f"{a}/health")["running"] and get(f"{b}/health")["running"]):
                time.sleep(0.05)
            proc_a.kill()  # mid-request: its rows are generated again by b
            thread.join(120)
        assert out and out[0].response_mask.sum(-1).tolist() == [600] * len(PROMPTS)
        said = [r.getMessage() for r in caplog.records if a in r.getMessage()]  # once, however many requests died
        assert len(said) == 1 and re.fullmatch(
            rf"rft: engine server {a} closed the connection during POST /v1/completions \(\w+: .*\): did it die\? "
            r"its log says why; restart it or leave it out of the URLs; its requests go to the other 1 engine "
            r"server\(s\)", said[0]), said
        client.update_weights(shifted(model_dir), 1)  # b only
        assert get(f"{b}/health")["version"] == 1 and client.version == 1
        proc_b.kill()
        proc_b.wait(30)
        with pytest.raises(EngineServerError, match=f"engine server {b} took no connection"):
            client.generate(*left_pad(PROMPTS[:1], 0), GREEDY)
        with pytest.raises(EngineServerError, match=rf"every engine server of this client is gone \({a}, {b}\)"):
            client.generate(*left_pad(PROMPTS[:1], 0), GREEDY)


def test_rft_serve_refuses_bad_input_in_one_line(tmp_path, model_dir):
    from tests.cli_helpers import rft_here

    missing = rft_here("serve", str(tmp_path / "nowhere"), cwd=tmp_path, check=False)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        f"rft: error: rft serve: MODEL {str(tmp_path / 'nowhere')!r} is not a folder; name a Hugging Face model "
        "folder (e.g. one `rft init-model --preset tiny DIR` wrote)"]
    seqs = rft_here("serve", str(model_dir), "--max-num-seqs", "0", cwd=tmp_path, check=False)
    assert seqs.returncode == 2 and "--max-num-seqs 0: it must be 1 or more" in seqs.stderr
    hf = rft_here("serve", str(model_dir), "--vllm-options", "{}", cwd=tmp_path, check=False)
    assert hf.stderr.strip().splitlines() == [
        "rft: error: rft serve --vllm-options: it configures --engine vllm, not --engine hf"]
    unknown = rft_here("serve", str(model_dir), "--engine", "vllm", "--vllm-options", '{"max_len": 8}', cwd=tmp_path,
                       check=False)
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1
    assert "rft serve --vllm-options: ['max_len'] are not vLLM options; the fields are [" in unknown.stderr
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = rft_here("serve", str(model_dir), "--port", str(port), cwd=tmp_path, check=False)
    assert busy.returncode == 2
    assert busy.stderr.strip().splitlines() == [
        f"rft: error: rft serve --port={port}: port {port} on 127.0.0.1 is in use by another program (another run's "
        "endpoint?); set rft serve --port=0 to pick a free port, or another port"]


class _DrainingEngine:
    """An engine whose stream, as vLLM's (`rft.rollout.vllm_stream`), takes weights only with nothing in flight:
    each request runs 3 steps, a token a step tagged with the version, and records what each step ran."""

    def __init__(self):
        self.version, self.log = 0, []

    def update_weights(self, weights, version):
        self.log.append(("update", version, len(self.current.rows)))  # rows running (queued ones wait)
        self.version = version

    def stream(self, max_num_seqs, generator=None):
        from rft.rollout.base import StreamResponse

        engine = self

        class Stream:
            drains_for_updates = True

            def __init__(self):
                self.max_num_seqs, self.generator, self.waiting, self.rows = max_num_seqs, generator, [], []

            @property
            def pending(self):
                return len(self.waiting) + len(self.rows)

            def submit(self, request):
                self.waiting.append(request)

            def step(self):
                self.rows += [dataclasses.make_dataclass("Row", ["request", "versions"])(r, []) for r in self.waiting]
                self.waiting.clear()
                done = []
                for row in self.rows:
                    row.versions.append(engine.version)
                    if len(row.versions) == 3:
                        done.append(StreamResponse(row.request.request_id, torch.tensor(row.request.prompt_ids),
                                                   torch.tensor([1, 2, 3]), torch.zeros(3),
                                                   torch.tensor(row.versions), "length"))
                self.rows = [r for r in self.rows if len(r.versions) < 3]
                time.sleep(0.05)
                return done

        self.current = Stream()
        return self.current


def test_a_stream_that_drains_for_updates_finishes_the_rows_in_flight_first_and_admits_none_meanwhile():
    """vLLM's stream in the engine server: an update sent while a request runs waits until it finished (its tokens
    all of the old version), and a request sent after the update runs wholly on the new one."""
    from rft.explorer.engine_server import StreamServer

    class Tokens:
        def decode(self, tokens, skip_special_tokens=True):
            return ""

    engine = _DrainingEngine()
    server = StreamServer(engine, Tokens(), 4)
    try:
        out: dict = {}
        first = threading.Thread(target=lambda: out.setdefault("first", server.submit("a", [[7]], SamplingParams())))
        first.start()
        while not engine.current.rows:  # the request is running
            time.sleep(0.01)
        update = threading.Thread(target=server.update_weights, args=({}, 1))
        update.start()
        time.sleep(0.02)
        second = threading.Thread(target=lambda: out.setdefault("second", server.submit("b", [[8]], SamplingParams())))
        second.start()
        for t in (first, update, second):
            t.join(30)
        assert engine.log == [("update", 1, 0)]  # applied with nothing in flight
        assert out["first"][0][0].versions == [0, 0, 0] and out["second"][0][0].versions == [1, 1, 1]
    finally:
        server.close_stream()

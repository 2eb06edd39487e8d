"""`RemoteRollout`: a `RolloutEngine` whose engines are `rft serve` processes, reached over HTTP on their URLs.

Each prompt of a `generate` call is one `/v1/completions` request (its token ids as the prompt, `n` samples), sent
at once from a pool of threads to the server with the fewest requests of this client in flight (ties: the first
listed), so every server's stream batches them with the others. Its choices' `rft` field gives the response token
ids, behaviour log-probs and per-token weight versions (`RolloutOutput.versions`). `update_weights` writes the
tensors to a safetensors file and has every server load it in place (`POST /update_weights`), one after another.

A server that dies (refuses connections, or closes one before its reply) is left out from then on, the log naming
it, and its requests are sent again to the others (a request is answered whole or not at all, so nothing is half
received); once none is left, the call fails naming the last one. No server is probed again after that.

`generate` with a `generator` (a training step's, a validation's) is reproducible: it draws one seed from it, splits
the prompts into one contiguous share per live server, and sends each share as ONE request after re-seeding that
server's stream with the seed plus the share's index (`POST /seed`): the share's rows enter the stream together, in
prompt order, so what they sample depends on the seed and the weights only, not on timing (a server serving one
client; with nothing else in flight, as a run's own servers are). Without a generator each prompt is one request.

`start_server` runs `rft serve` as a child process of this one (a run's `actor_rollout_ref.rollout.mode=async`), which
ends with it; `RemoteRollout.close` stops the servers it owns.

At construction every server must answer `/health` within `connect_timeout` seconds and serve the model asked for
(its name and, when given, its config fingerprint: `rft.explorer.engine_server.model_fingerprint`), at one weight
version; the failures a caller can fix are `EngineServerError`s (`rft: error: ...`), each naming the server.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Hashable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from urllib.parse import urlsplit

import torch

from rft.errors import RftError
from rft.rollout.base import RolloutOutput, SamplingParams

log = logging.getLogger("rft")


class EngineServerError(RftError):
    """An engine server that does not answer, serves another model, died mid-request or refused a call."""


class EngineServerTimeout(EngineServerError):
    """An engine server that took a request and did not answer it in time."""


class EngineServerGone(EngineServerError):
    """Nothing listens at an engine server's address, or it closed the connection before answering: it died or
    was stopped."""


class _Server:
    """One server's address and this client's requests in flight to it."""

    def __init__(self, url: str):
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise EngineServerError(f"engine server URL {url!r}: give http://HOST:PORT (as `rft serve` prints it)")
        self.url = f"http://{parts.hostname}:{parts.port}"
        self.host, self.port = parts.hostname, parts.port
        self.in_flight = 0
        self.gone = False  # it died during this client's requests: they go to the others from then on

    def call(self, method: str, path: str, body: dict | None, timeout: float) -> dict:
        """The JSON reply of `method path`; every failure an `EngineServerError` naming this server."""
        connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        data = json.dumps(body).encode() if body is not None else None
        try:
            try:
                connection.connect()
            except OSError as e:
                raise EngineServerGone(f"engine server {self.url} took no connection ({type(e).__name__}: {e}): "
                                       "is it running?") from None
            try:
                connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
                response = connection.getresponse()
                raw = response.read()
            except TimeoutError:
                raise EngineServerTimeout(f"engine server {self.url} did not answer {method} {path} within "
                                        f"{timeout:g} s; raise the client's request_timeout, or check the "
                                        "server's log") from None
            except (http.client.HTTPException, OSError) as e:  # reset, closed without a reply: it died
                raise EngineServerGone(f"engine server {self.url} closed the connection during {method} {path} "
                                        f"({type(e).__name__}: {e}): did it die? its log says why; restart it "
                                        "or leave it out of the URLs") from None
        finally:
            connection.close()
        try:
            reply = json.loads(raw)
        except ValueError:
            raise EngineServerError(f"engine server {self.url}: {method} {path} answered HTTP {response.status} "
                                    "with a body that is not JSON: is it an `rft serve` server?") from None
        if response.status != 200:
            message = (reply.get("error") or {}).get("message") if isinstance(reply, dict) else None
            raise EngineServerError(f"engine server {self.url} refused {method} {path} (HTTP {response.status}): "
                                    f"{message or reply}")
        return reply


class RemoteRollout:
    """A `RolloutEngine` over the `rft serve` servers at `urls` (see the module docstring). `model`: the model
    name they must serve; `fingerprint`: their config fingerprint, where given."""

    def __init__(self, urls: str | Sequence[str], model: str, fingerprint: str | None = None,
                 connect_timeout: float = 30.0, request_timeout: float = 600.0, max_concurrency: int = 64):
        urls = [urls] if isinstance(urls, str) else list(urls)
        if not urls:
            raise EngineServerError("RemoteRollout: no engine server URL given")
        self.servers = [_Server(u) for u in urls]
        self.model, self.request_timeout, self.max_concurrency = model, request_timeout, max_concurrency
        self.owned: list[subprocess.Popen] = []  # server processes this client stops on close (`start_server`)
        self._lock = threading.Lock()
        infos = [self._connect(s, model, fingerprint, connect_timeout) for s in self.servers]
        first = infos[0]
        for server, info in zip(self.servers, infos):
            for key, what in (("version", "weight version"), ("eos_token_ids", "EOS ids"),
                              ("pad_token_id", "pad id")):
                if info[key] != first[key]:
                    raise EngineServerError(
                        f"engine servers {self.servers[0].url} and {server.url} differ in their {what} "
                        f"({first[key]} and {info[key]}); serve one model at one version behind one client")
        self.version: int = first["version"]
        self.eos_ids = torch.as_tensor(sorted(first["eos_token_ids"]), dtype=torch.long)
        self.pad_token_id: int = first["pad_token_id"]

    @staticmethod
    def _connect(server: _Server, model: str, fingerprint: str | None, timeout: float) -> dict:
        """The server's /health, asked until it answers or `timeout` seconds pass; refused if it serves another
        model."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                info = server.call("GET", "/health", None, timeout=max(0.1, min(5.0, deadline - time.monotonic())))
                break
            except (EngineServerGone, EngineServerTimeout) as e:  # not started yet, or busy: asked again
                if time.monotonic() >= deadline:
                    cause = str(e).removeprefix(f"engine server {server.url} ")
                    raise EngineServerError(f"engine server {server.url} did not answer within {timeout:g} s "
                                            f"(last: {cause}); start it with `rft serve MODEL --port "
                                            f"{server.port}`, or fix the URL") from None
                time.sleep(0.2)
        if not isinstance(info, dict) or "fingerprint" not in info:
            raise EngineServerError(f"engine server {server.url}: its /health is not an `rft serve` server's")
        if info.get("model") != model:
            raise EngineServerError(f"engine server {server.url} serves model {info.get('model')!r}, not "
                                    f"{model!r}; point the client at a server of {model!r} (rft serve --name)")
        if fingerprint is not None and info["fingerprint"] != fingerprint:
            raise EngineServerError(f"engine server {server.url} serves {model!r} with config fingerprint "
                                    f"{info['fingerprint']}, not {fingerprint}: another model under the same "
                                    "name (its shape or tokenizer differs); serve the model this client trains")
        return info

    # ------------------------------------------------------------------------------------------ protocol
    def generate(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, params: SamplingParams,
                 generator: torch.Generator | None = None) -> RolloutOutput:
        """`params.n` responses to each prompt row (rows of a prompt adjacent), right-padded as `HFRollout`'s."""
        prompts = [ids[mask.bool()].tolist() for ids, mask in zip(prompt_ids, prompt_mask)]
        body = self.request_body(params)
        if generator is not None:  # reproducible: one seeded request per server, its share of the prompts in order
            seed = int(torch.randint(0, 2**62, (1,), generator=generator))
            shares = torch.tensor_split(torch.arange(len(prompts)), max(1, min(len(self._live()), len(prompts))))
            jobs = [({**body, "prompt": [prompts[i] for i in share]}, seed + k) for k, share in enumerate(shares)]
        else:
            jobs = [({**body, "prompt": p}, None) for p in prompts]
        with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), self.max_concurrency))) as pool:
            replies = list(pool.map(lambda job: self._complete(*job), jobs))
        return self.padded([row for reply in replies for row in reply_rows(reply)])

    def request_body(self, params: SamplingParams) -> dict:
        """A `/v1/completions` body asking for `params` (its prompt to be added)."""
        return {"model": self.model, "n": params.n, "max_tokens": params.max_tokens,
                "temperature": 0 if params.greedy else params.temperature, "top_p": params.top_p,
                "ignore_eos": params.ignore_eos, **({"top_k": params.top_k} if params.top_k > 0 else {})}

    def padded(self, rows: list[dict]) -> RolloutOutput:
        """Choices' `rft` rows (token ids, log-probs, versions) as one right-padded `RolloutOutput`."""
        width = max(len(r["token_ids"]) for r in rows)
        out = RolloutOutput(torch.full((len(rows), width), self.pad_token_id, dtype=torch.long),
                            torch.zeros(len(rows), width, dtype=torch.long), torch.zeros(len(rows), width),
                            torch.zeros(len(rows), width, dtype=torch.long))
        for i, r in enumerate(rows):
            k = len(r["token_ids"])
            out.response_ids[i, :k] = torch.tensor(r["token_ids"])
            out.response_mask[i, :k] = 1
            out.logprobs[i, :k] = torch.tensor(r["logprobs"])
            out.versions[i, :k] = torch.tensor(r["versions"])
        return out

    def _complete(self, body: dict, seed: int | None = None) -> dict:
        """`body`'s reply from the least loaded server (ties: the first listed), its stream re-seeded with `seed`
        first where given; a server that dies is left out from then on, its request sent again to another (the log
        names it), until none is left."""
        while True:
            with self._lock:
                live = self._live()
                if not live:
                    raise EngineServerGone(f"every engine server of this client is gone ("
                                           f"{', '.join(s.url for s in self.servers)}): their logs say why")
                server = min(live, key=lambda s: s.in_flight)
                server.in_flight += 1
            try:
                if seed is not None:
                    server.call("POST", "/seed", {"seed": seed}, self.request_timeout)
                return server.call("POST", "/v1/completions", body, self.request_timeout)
            except EngineServerGone as e:
                self._leave_out(server, e)
            finally:
                with self._lock:
                    server.in_flight -= 1

    def _live(self) -> list[_Server]:
        return [s for s in self.servers if not s.gone]

    def _leave_out(self, server: _Server, error: EngineServerGone) -> None:
        """`server` is gone: raise `error` if it was the last one, else log it once and go on with the others."""
        with self._lock:
            first = not server.gone
            server.gone = True
            left = len(self._live())
        if not left:
            raise error
        if first:
            log.warning("rft: %s; its requests go to the other %d engine server(s)", error, left)

    def update_weights(self, weights: Mapping[str, torch.Tensor] | None, version: int) -> None:
        """Every server loads `weights` (name -> tensor, the model's parameter names) in place and takes `version`;
        the tensors travel as a safetensors file in the system's temporary folder (the servers share this machine's
        file system), removed once every server has loaded it."""
        if weights is None:
            raise EngineServerError("RemoteRollout.update_weights: an engine server shares no model with the "
                                    "trainer; pass the weights (name -> tensor)")
        from safetensors.torch import save_file

        handle, path = tempfile.mkstemp(prefix="rft-weights-", suffix=".safetensors")
        os.close(handle)
        try:
            save_file({name: t.detach().to("cpu", copy=True).contiguous() for name, t in weights.items()}, path)
            for server in self._live():
                try:
                    server.call("POST", "/update_weights", {"path": path, "version": int(version)},
                                self.request_timeout)
                except EngineServerGone as e:
                    self._leave_out(server, e)
        finally:
            os.unlink(path)
        self.version = int(version)

    def close(self) -> None:
        """Stop the server processes this client started (`start_server`); servers given by URL go on."""
        for process in self.owned:
            stop_process(process)
        self.owned.clear()


def reply_rows(reply: dict) -> list[dict]:
    """A completions reply's rows (each choice's `rft` field) in choice order: a prompt's `n` samples adjacent."""
    return [choice["rft"] for choice in sorted(reply["choices"], key=lambda c: c["index"])]


class GroupStream:
    """Groups in flight on a `RemoteRollout`'s servers, each handed out once its request is answered (streaming in
    training, `rft.explorer.streaming`). A group is one task's `n` samples; a request carries one group or several
    (`submit`), and is answered whole, so a group is never half received. The server's stream interleaves the rows
    of every request in flight, so a long group holds its own slots only: the others' finish and free theirs."""

    def __init__(self, engine: RemoteRollout, params: SamplingParams):
        self.engine, self.body, self.n = engine, engine.request_body(params), params.n
        self._pool = ThreadPoolExecutor(max_workers=engine.max_concurrency, thread_name_prefix="rft-groups")
        # each group's request (its rows, once answered) and its place in it, in the order submitted
        self._requests: dict[Hashable, tuple[Future, int]] = {}

    def submit(self, keys: Sequence[Hashable], prompts: Sequence[Sequence[int]], seed: int | None = None) -> None:
        """One request of `prompts` (`n` samples each), the groups `keys`; `seed`: the server's stream re-seeded
        first (`RemoteRollout._complete`: with nothing else in flight, its samples depend on the seed and the
        weights only)."""
        body = {**self.body, "prompt": [list(p) for p in prompts] if len(prompts) > 1 else list(prompts[0])}
        future = self._pool.submit(lambda: reply_rows(self.engine._complete(body, seed)))
        for i, key in enumerate(keys):
            self._requests[key] = (future, i)

    @property
    def outstanding(self) -> int:
        """Groups submitted and not yet taken (in flight or answered)."""
        return len(self._requests)

    def take(self, count: int, in_order: bool) -> list[tuple[Hashable, list[dict]]]:
        """`count` answered groups, (key, rows), taken out: the first ones submitted (`in_order`: waiting for each in
        turn) or the first answered (each in the order submitted among those answered by then). An engine server's
        error is raised here."""
        if count > len(self._requests):
            raise ValueError(f"GroupStream.take({count}): only {len(self._requests)} groups are in flight")
        keys = list(self._requests)
        if in_order:
            chosen = keys[:count]
        else:
            while True:
                chosen = [k for k in keys if self._requests[k][0].done()][:count]
                if len(chosen) == count:
                    break
                wait({f for f, _ in self._requests.values() if not f.done()}, return_when=FIRST_COMPLETED)
        return [(key, self._rows(*self._requests.pop(key))) for key in chosen]

    def _rows(self, future: Future, index: int) -> list[dict]:
        return future.result()[index * self.n:(index + 1) * self.n]

    def drain(self) -> None:
        """Wait until every request in flight is answered (before weights change without partial rollouts, before
        a checkpoint or a validation)."""
        for future, _ in list(self._requests.values()):
            future.result()

    def answered(self) -> dict[Hashable, list[dict]]:
        """The groups answered and not taken, in the order submitted (after `drain`: every outstanding one)."""
        return {key: self._rows(f, i) for key, (f, i) in self._requests.items() if f.done()}

    def put(self, key: Hashable, rows: list[dict]) -> None:
        """A group answered before (a checkpoint's), outstanding again as if just answered."""
        future: Future = Future()
        future.set_result(rows)
        self._requests[key] = (future, 0)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def start_server(model_path: str, *, seed: int, max_num_seqs: int, dtype: str, log_path: str,
                 timeout: float = 300.0, engine: str = "hf",
                 vllm_options: dict | None = None) -> tuple[subprocess.Popen, str]:
    """`rft serve model_path` as a child process (its output in `log_path`) and its URL, once it printed it
    (`vllm_options`: `engine="vllm"`'s `VLLMOptions` fields, the run's rollout keys); a child
    that ends first or says nothing within `timeout` seconds is an `EngineServerError` quoting its log's last line.
    The child gets SIGTERM when this process ends (Linux: PR_SET_PDEATHSIG), so a killed run leaves no server."""
    command = [sys.executable, "-m", "rft", "serve", str(model_path), "--port", "0", "--seed", str(seed),
               "--max-num-seqs", str(max_num_seqs), "--dtype", dtype, "--engine", engine]
    if vllm_options is not None:
        command += ["--vllm-options", json.dumps(vllm_options)]
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log_file, stdin=subprocess.DEVNULL,
                                   preexec_fn=_ends_with_parent if sys.platform == "linux" else None)
    found: list[str] = []  # the URL line, once printed
    ready = threading.Event()

    def read() -> None:
        """The server's output: the URL line, and every other line (vLLM logs to stdout) into its log, read until it
        ends so that a full pipe never stops it."""
        with open(log_path, "ab") as log_file:
            for line in iter(process.stdout.readline, b""):
                text = line.decode(errors="replace")
                if not found and text.startswith("rft serve: ") and " on http://" in text:
                    found.append(text)
                    ready.set()
                else:
                    log_file.write(line)
                    log_file.flush()
        process.stdout.close()
        ready.set()

    threading.Thread(target=read, name="rft-engine-server-output", daemon=True).start()
    ready.wait(timeout)
    url = found[0].split(" on ", 1)[1].split("/v1", 1)[0] if found else None
    if url is None:
        ended = ready.is_set()  # its output ended without the URL
        stop_process(process)
        with open(log_path, errors="replace") as f:
            last = next((line.strip() for line in reversed(f.read().splitlines()) if line.strip()), "(empty)")
        said = "did not start" if ended else f"printed no URL within {timeout:g} s"
        raise EngineServerError(f"the engine server of {model_path} (rft serve) {said}: {last} (its log: {log_path})")
    return process, url


def _ends_with_parent() -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def stop_process(process: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds (its output pipe is its reader's to close: `start_server`)."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


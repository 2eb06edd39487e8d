"""`rft serve`: the hf engine (or vLLM, `--engine vllm`) in a process of its own, behind the OpenAI-compatible endpoint
(`server.Endpoint`).

Every HTTP request's samples go into ONE stream (`HFRollout.stream`, continuous batching; with vLLM
`VLLMRollout.stream`, its request-level API, whose updates wait for the rows in flight: `drains_for_updates`,
`rft.rollout.vllm_stream`), driven by a thread of its
own: a request's rows join the rows of the others in flight at the next decode step, and each HTTP reply leaves when
its last row finishes. `StreamServer` gives the stream the calls of the explorer's `GenerationServer` (`open`,
`submit`, `close`), so the endpoint's `ModelHandle` and request parsing serve it unchanged. Each choice carries
`rft`: its prompt and response token ids, behaviour log-probs and the weight version of each token.

Routes besides the endpoint's: `GET /health` (model name, config fingerprint, weight version, EOS and pad ids, rows
waiting or running, rows running) and `POST /update_weights` {"path": a safetensors file, "version": int}: the
tensors are checked whole (`rollout.hf.check_weights`; a bad one is HTTP 400 naming it, nothing applied), then
loaded by the stream's thread between two decode steps: the rows in flight take them from their next token on
(partial rollouts, docs/rollout.md). `POST /seed` {"seed": int}: the stream's sampling generator re-seeded at the next
decode-step boundary, before the requests that arrive after the reply are admitted (a client that sends one request
after it, as `RemoteRollout.generate` does with a generator, gets samples that depend on the seed and the weights
only). The client is `rft.rollout.remote.RemoteRollout`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import threading
from collections import deque
from pathlib import Path

import torch

from rft.explorer.model import Completion, WorkflowError
from rft.explorer.server import ApiError, Endpoint
from rft.rollout.base import SamplingParams, StreamRequest, StreamResponse

log = logging.getLogger("rft")


@dataclasses.dataclass
class _Update:
    weights: dict | None
    version: int | None
    seed: int | None = None  # a re-seed of the stream's generator instead of weights
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    error: BaseException | None = None


class StreamServer:
    """`GenerationServer`'s calls over one `RolloutStream` of `engine` (`max_num_seqs` rows in flight). Only the
    stream's thread touches the stream and the engine; callers hand it requests and weight updates through inboxes
    and wait for their results."""

    def __init__(self, engine, tokenizer, max_num_seqs: int, generator: torch.Generator | None = None):
        self.engine, self.tokenizer = engine, tokenizer
        self.stream = engine.stream(max_num_seqs, generator)
        self._cond = threading.Condition()
        self._inbox: deque[StreamRequest] = deque()
        self._updates: deque[_Update] = deque()
        self._done: dict[int, StreamResponse | BaseException] = {}
        self._ids = itertools.count()
        self._closed = False
        self._thread = threading.Thread(target=self._drive, name="rft-engine-stream", daemon=True)
        self._thread.start()

    # the GenerationServer calls a ModelHandle makes: a client is a name only (nothing waits for a batch)
    def open(self, order: tuple = (), expected: bool = False) -> str:
        return f"c{next(self._ids)}"

    def close(self, client: str, cancelled: bool = False, expect_another: bool = False) -> None:
        pass

    @property
    def pending(self) -> int:
        """Rows waiting or running (an estimate: read without the stream's thread)."""
        return len(self._inbox) + self.stream.pending

    def submit(self, client: str, prompts: list[list[int]], params: SamplingParams,
               images: list[list[bytes]] | None = None) -> list[list[Completion]]:
        """`params.n` completions of each prompt, each sample one request of the stream."""
        if images and any(images):
            raise WorkflowError("the engine server's stream takes text only: no images")
        one = dataclasses.replace(params, n=1)
        keys = [(i, next(self._ids)) for i in range(len(prompts)) for _ in range(params.n)]
        with self._cond:
            if self._closed:
                raise RuntimeError("the engine server is stopping")
            self._inbox.extend(StreamRequest(key, prompts[i], one) for i, key in keys)
            self._cond.notify_all()
            while not all(key in self._done for _, key in keys):
                if not self._thread.is_alive():
                    raise RuntimeError("the engine server's stream thread ended")
                self._cond.wait(1.0)
            results = [self._done.pop(key) for _, key in keys]
        error = next((r for r in results if isinstance(r, BaseException)), None)
        if error is not None:
            raise error
        out: list[list[Completion]] = [[] for _ in prompts]
        for (i, _), r in zip(keys, results):
            out[i].append(self._completion(r))
        return out

    def update_weights(self, weights: dict, version: int) -> None:
        """Load `weights` at the next decode-step boundary and take `version`; returns once applied."""
        self._at_boundary(_Update(weights, version))

    def reseed(self, seed: int) -> None:
        """Seed the stream's generator at the next decode-step boundary; returns once done."""
        self._at_boundary(_Update(None, None, seed))

    def _at_boundary(self, update: _Update) -> None:
        """Hand `update` to the stream's thread and wait until it applied it (its error raised here)."""
        with self._cond:
            self._updates.append(update)
            self._cond.notify_all()
        update.done.wait()
        if update.error is not None:
            raise update.error

    def close_stream(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=30)

    def _completion(self, r: StreamResponse) -> Completion:
        tokens = r.response_ids.tolist()
        return Completion(text=self.tokenizer.decode(tokens, skip_special_tokens=True),
                          prompt_ids=r.prompt_ids.tolist(), token_ids=tokens, logprobs=r.logprobs.tolist(),
                          finish_reason=r.finish_reason, versions=r.versions.tolist())

    def _drive(self) -> None:
        """The stream's thread: weight updates, then new requests, then one step, until closed."""
        while True:
            with self._cond:
                while not (self._closed or self._inbox or self._updates or self.stream.pending):
                    self._cond.wait()
                if self._closed:
                    self._fail_all(RuntimeError("the engine server stopped"))
                    return
                if self._updates and getattr(self.stream, "drains_for_updates", False) and self.stream.pending:
                    updates = []  # vLLM's: the rows in flight finish first, nothing new admitted meanwhile
                else:
                    updates, self._updates = list(self._updates), deque()
                    for request in self._inbox:
                        self.stream.submit(request)
                    self._inbox.clear()
            for update in updates:  # between two decode steps: the boundary the stream's rows take them at
                try:
                    if update.seed is not None:
                        self.stream.generator.manual_seed(update.seed)
                    else:
                        self.engine.update_weights(update.weights, update.version)
                except BaseException as e:
                    update.error = e
                update.done.set()
            try:
                done = self.stream.step()
            except BaseException as e:  # a bug or an out-of-memory: every row in flight hears it, the server goes on
                log.exception("rft serve: a decode step failed")
                with self._cond:
                    self._fail_all(e)
                continue
            if done:
                with self._cond:
                    self._done.update((r.request_id, r) for r in done)
                    self._cond.notify_all()

    def _fail_all(self, error: BaseException) -> None:
        """Every request waiting or running ends with `error`; the stream starts afresh (caller holds the lock)."""
        ids = [r.request_id for r in self.stream.waiting] + [row.request.request_id for row in self.stream.rows]
        ids += [r.request_id for r in self._inbox]
        self._inbox.clear()
        self._done.update((i, error) for i in ids)
        self.stream = self.engine.stream(self.stream.max_num_seqs, self.stream.generator)
        for update in self._updates:
            update.error = error
            update.done.set()
        self._updates.clear()
        self._cond.notify_all()


def model_fingerprint(path: str, tokenizer) -> str:
    """A short hash of what the responses depend on in a model folder besides its weights (`model_identity`: its
    shape and its tokenizer's vocabulary): a client names the model it expects by it."""
    from rft.models.load import model_identity

    identity = model_identity(path, tokenizer)
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def load_weights_file(path, model) -> dict[str, torch.Tensor]:
    """The tensors of the safetensors file `path`, checked against `model` (`check_weights`); a file that does not
    load or a bad tensor is an `ApiError` 400 naming it."""
    from safetensors.torch import load_file

    from rft.rollout.hf import check_weights

    if not isinstance(path, str) or not path:
        raise ApiError(400, "update_weights: 'path' must name a safetensors file on the server's machine")
    try:
        weights = load_file(path)
    except Exception as e:  # missing, unreadable, not safetensors
        raise ApiError(400, f"update_weights: {path!r} does not load as a safetensors file ({type(e).__name__}: "
                            f"{e})") from None
    try:
        check_weights(model, weights)
    except ValueError as e:
        raise ApiError(400, f"update_weights: {path!r}: {e}; nothing was loaded") from None
    return weights


class EngineServer:
    """The endpoint, its stream and the routes above for one model folder; `close` stops them."""

    def __init__(self, model_path: str, name: str | None = None, port: int = 0, max_num_seqs: int = 16,
                 seed: int = 0, dtype: str = "float32", device: str = "cpu", engine: str = "hf",
                 vllm_options: dict | None = None):
        from rft.explorer.model import ModelHandle
        from rft.models.load import compute_dtype, load_causal_lm, load_tokenizer, resolve_device
        from rft.rollout import HFRollout
        from rft.rollout.base import eos_token_ids

        where = resolve_device(device)
        self.tokenizer = load_tokenizer(model_path)
        model = load_causal_lm(model_path, compute_dtype(dtype, where), where, key="model",
                               tokenizer=self.tokenizer).eval()
        eos = eos_token_ids(model, self.tokenizer)
        if engine == "vllm":  # beside the model it reloads from on every update, as the in-process vLLM engine
            from rft.rollout.vllm_engine import VLLMOptions, VLLMRollout

            positions = getattr(model.config, "max_position_embeddings", None) or 32768
            options = VLLMOptions(**{"max_model_len": positions, "kv_cache_tokens": 64 * positions,
                                     **(vllm_options or {}), "dtype": dtype, "seed": seed,
                                     "max_num_seqs": max_num_seqs, "distributed": False})
            self.engine = VLLMRollout(model, model_path, eos, self.tokenizer.pad_token_id, options)
        else:
            self.engine = HFRollout(model, eos, self.tokenizer.pad_token_id)
        self.name = name or Path(model_path).expanduser().resolve().name
        self.fingerprint = model_fingerprint(model_path, self.tokenizer)
        default = SamplingParams()
        # the port first: one it cannot have leaves no stream thread behind
        self.endpoint = Endpoint(lambda: ModelHandle(self.server, self.tokenizer, default), self.name, port=port,
                                 routes={("GET", "/health"): self.health, ("POST", "/update_weights"): self.update,
                                         ("POST", "/seed"): self.seed},
                                 token_details=True, port_key="rft serve --port")
        try:
            self.server = StreamServer(self.engine, self.tokenizer, max_num_seqs, torch.Generator().manual_seed(seed))
        except BaseException:  # the stream refuses the model: no endpoint left listening
            self.endpoint.close()
            raise
        self.url = f"http://127.0.0.1:{self.endpoint.port}"

    def health(self, _body=None) -> dict:
        return {"status": "ok", "model": self.name, "fingerprint": self.fingerprint, "version": self.engine.version,
                "eos_token_ids": self.engine.eos_ids.tolist(), "pad_token_id": self.engine.pad_token_id,
                "max_num_seqs": self.server.stream.max_num_seqs, "pending": self.server.pending,
                "running": len(self.server.stream.rows)}

    def update(self, body: dict) -> dict:
        version = body.get("version")
        if isinstance(version, bool) or not isinstance(version, int):
            raise ApiError(400, f"update_weights: 'version' must be an integer, got {version!r}")
        unknown = set(body) - {"path", "version"}
        if unknown:
            raise ApiError(400, f"update_weights: unknown keys {sorted(unknown)}; it takes 'path' and 'version'")
        weights = load_weights_file(body.get("path"), self.engine.model)
        self.server.update_weights(weights, version)
        log.info("rft serve: weights of version %d loaded from %s (%d tensors)", version, body["path"], len(weights))
        return {"version": self.engine.version, "tensors": len(weights)}

    def seed(self, body: dict) -> dict:
        seed = body.get("seed")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63 or set(body) != {"seed"}:
            raise ApiError(400, f"seed: give {{'seed': an integer from 0 to 2**63 - 1}}, got {body!r}")
        self.server.reseed(seed)
        return {"seed": seed}

    def close(self) -> None:
        self.endpoint.close()
        self.server.close_stream()


def serve(model_path: str, name: str | None, port: int, max_num_seqs: int, seed: int, dtype: str,
          engine: str = "hf", vllm_options: str | None = None) -> None:
    """`rft serve`: until Ctrl-C / SIGTERM (the command line reports the stop; the requests in flight end with a
    closed connection, and the server holds nothing to resume)."""
    from rft.errors import RftError

    if max_num_seqs < 1:
        raise RftError(f"rft serve --max-num-seqs {max_num_seqs}: it must be 1 or more")
    options = None
    if vllm_options is not None:
        options = _vllm_options(engine, vllm_options)
    if engine == "vllm":
        from rft.rollout.vllm_engine import require_vllm

        require_vllm("rft serve --engine vllm")
    if not Path(model_path).expanduser().is_dir():
        raise RftError(f"rft serve: MODEL {model_path!r} is not a folder; name a Hugging Face model folder (e.g. "
                       "one `rft init-model --preset tiny DIR` wrote)")
    try:
        server = EngineServer(model_path, name, port, max_num_seqs, seed, dtype, engine=engine,
                              vllm_options=options)
    except ValueError as e:  # the stream refuses the model (not attention-only, ...)
        if isinstance(e, RftError):
            raise
        raise RftError(f"rft serve: {model_path!r}: {e}") from None
    print(f"rft serve: {server.name} (fingerprint {server.fingerprint}) on {server.url}/v1, health at "
          f"{server.url}/health; Ctrl-C stops it", flush=True)
    try:
        threading.Event().wait()
    finally:
        server.close()


def _vllm_options(engine: str, text: str) -> dict:
    """`rft serve --vllm-options JSON`: fields of `rft.rollout.vllm_engine.VLLMOptions` (what a run passes: its rollout
    keys, `rft.rollout.engines.vllm_options`); anything else is an error naming it."""
    import dataclasses

    from rft.errors import RftError
    from rft.rollout.vllm_engine import VLLMOptions

    if engine != "vllm":
        raise RftError(f"rft serve --vllm-options: it configures --engine vllm, not --engine {engine}")
    try:
        options = json.loads(text)
    except ValueError as e:
        raise RftError(f"rft serve --vllm-options: not JSON ({e})") from None
    fields = {f.name for f in dataclasses.fields(VLLMOptions)}
    if not isinstance(options, dict) or set(options) - fields:
        unknown = sorted(set(options) - fields) if isinstance(options, dict) else options
        raise RftError(f"rft serve --vllm-options: {unknown!r} are not vLLM options; the fields are {sorted(fields)}")
    return options

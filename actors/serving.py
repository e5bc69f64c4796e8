"""The selection service's replica: an HTTP front (FastAPI) over the trainer's own `RolloutWorker`.

One replica = one `RolloutWorker` (actors/rollout.py) in the replica's process: the same vLLM engine
settings, chat formatting (driver/models/chat.py, through `RolloutWorker.encode_prompt`), admission gate and
weight-update path the trainer uses, with the GenSelect prompt builder and `Judgment:` parser of
driver/algo/genselect.py and the knockout rules of driver/algo/knockout.py. Nothing here re-implements them.

Endpoints (docs/serving.md has a curl example for each):
    POST /v1/select          problem + N candidates -> chosen index, votes, judgments, policy_version, rounds
    POST /v1/completions     OpenAI completions (vLLM's own request/response types), raw generation
    GET  /healthz            replica health, policy version and model served
    POST /admin/reload       swap the weights of every replica to a model folder, without a restart

Live weights. Every replica follows a `WeightBoard` (a small named Ray actor): the board holds the latest
(version, source) the service should serve, where a source is a model folder or an ObjectRef of exported
arrays (the trainer's weight sync publishes each new policy version there). Each replica long-polls the
board and loads a newer version through `RolloutWorker.update_weights_from_object_store`, which waits for
the requests in flight to finish on the old weights, loads, and resumes: no request fails during a swap, and
every answer names the version it ran on. A replica started later (autoscaling, or Serve replacing a dead
one) catches up from the board at start-up.

Errors. Bad requests get a 4xx whose JSON body names the field: {"error": {"message", "field", "type"}}
(400 malformed JSON, 413 over a size limit, 422 invalid field, 401 admin without the token); a request that
outlives `request_timeout_s` gets 504; an engine failure 503.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from driver.algo.genselect import build_prompt, parse_judgment, strip_thinking
from driver.algo.knockout import DoesNotFit, majority, plan_round
from driver.algo.sample import SelectionTask

log = logging.getLogger("genselect.serving")
BOARD_NAMESPACE = "genselect"


@dataclass
class SelectorSettings:
    """Everything a replica needs, resolved by driver/serve.py (plain values: travels as Serve init args)."""
    model: str
    rollout: Any                      # driver.config.RolloutConfig of the engine
    dtype: str = "float32"
    seed: int = 0
    policy_version: int = 0           # version of the weights in `model`
    board: str = ""                   # WeightBoard actor name ('' = no live weights)
    window: int = 8                   # most candidates per selection prompt (the trained N)
    max_prompt_tokens: int = 2048
    max_response_tokens: int = 48
    temperature: float = 1.0          # sampling temperature when samples > 1 (samples == 1: greedy)
    max_candidates: int = 256
    max_candidate_chars: int = 4000
    max_problem_chars: int = 16000
    max_samples: int = 16
    max_body_bytes: int = 4 << 20
    max_completion_tokens: int = 512
    request_timeout_s: float = 120.0
    admin_token: str = ""
    extra: dict = field(default_factory=dict)


class RequestError(Exception):
    """A client error: HTTP `status`, the offending `field`, a message."""

    def __init__(self, status: int, field: str, message: str):
        super().__init__(message)
        self.status, self.field, self.message = status, field, message


def error_response(status: int, field: str, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "field": field, "type": kind}}, status_code=status)


# ---- request validation (pure, no engine) ---------------------------------------------------------------
_SELECT_FIELDS = {"problem", "candidates", "domain", "samples", "temperature"}


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_select(body: bytes, s: SelectorSettings) -> dict:
    """Validate a /v1/select body; return {problem, candidates, domain, samples, temperature}.
    Raises RequestError naming the field (JSON paths such as `candidates[3]`)."""
    data = parse_json(body, s.max_body_bytes)
    unknown = sorted(set(data) - _SELECT_FIELDS)
    if unknown:
        raise RequestError(422, unknown[0], f"unknown field {unknown[0]!r}; allowed: {sorted(_SELECT_FIELDS)}")
    problem = data.get("problem")
    if not isinstance(problem, str):
        raise RequestError(422, "problem", "required, a string" if problem is None else "must be a string")
    if not problem.strip():
        raise RequestError(422, "problem", "must not be empty")
    if len(problem) > s.max_problem_chars:
        raise RequestError(413, "problem", f"{len(problem)} characters; the limit is {s.max_problem_chars}")
    candidates = data.get("candidates")
    if not isinstance(candidates, list):
        raise RequestError(422, "candidates", "required, a list of strings" if candidates is None
                           else "must be a list of strings")
    if len(candidates) < 2:
        raise RequestError(422, "candidates", f"needs at least 2 candidates, got {len(candidates)}")
    if len(candidates) > s.max_candidates:
        raise RequestError(413, "candidates", f"{len(candidates)} candidates; the limit is {s.max_candidates}")
    for i, c in enumerate(candidates):
        if not isinstance(c, str):
            raise RequestError(422, f"candidates[{i}]", f"must be a string, got {type(c).__name__}")
        body_text = strip_thinking(c)
        if not body_text.strip():
            raise RequestError(422, f"candidates[{i}]", "is empty (after removing any <think> trace)")
        if len(body_text) > s.max_candidate_chars:
            raise RequestError(413, f"candidates[{i}]", f"{len(body_text)} characters; the limit is "
                                                        f"{s.max_candidate_chars}")
    domain = data.get("domain", "math")
    if domain not in ("math", "code"):
        raise RequestError(422, "domain", f"must be 'math' or 'code', got {domain!r}")
    samples = data.get("samples", 1)
    if not _is_int(samples):
        raise RequestError(422, "samples", "must be an integer")
    if not 1 <= samples <= s.max_samples:
        raise RequestError(422, "samples", f"must be in 1..{s.max_samples}, got {samples}")
    temperature = data.get("temperature")
    if temperature is not None:
        if not isinstance(temperature, (int, float)) or isinstance(temperature, bool):
            raise RequestError(422, "temperature", "must be a number")
        if not 0.0 <= float(temperature) <= 2.0:
            raise RequestError(422, "temperature", f"must be in [0, 2], got {temperature}")
        if temperature == 0 and samples > 1:
            raise RequestError(422, "temperature", "0 (greedy) makes every sample identical; use samples=1")
    else:
        temperature = 0.0 if samples == 1 else s.temperature
    return {"problem": problem, "candidates": candidates, "domain": domain, "samples": samples,
            "temperature": float(temperature)}


def parse_json(body: bytes, max_bytes: int) -> dict:
    """The body as a JSON object, or RequestError (413 too large, 400 not JSON / not an object)."""
    if len(body) > max_bytes:
        raise RequestError(413, "body", f"{len(body)} bytes; the limit is {max_bytes}")
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(400, "body", f"malformed JSON: {e}") from None
    if not isinstance(data, dict):
        raise RequestError(400, "body", f"must be a JSON object, got {type(data).__name__}")
    return data


def _field_of(loc: tuple) -> str:
    """A pydantic error location as a JSON path (`prompt[0]`), without pydantic's union-branch labels."""
    if not loc:
        return "body"
    path = str(loc[0])
    for part in loc[1:]:
        if isinstance(part, int):
            path += f"[{part}]"
    return path


def _client_errors() -> tuple:
    try:
        from vllm.exceptions import VLLMClientError

        return (VLLMClientError,)
    except ImportError:
        return ()


# ---- the weight board ----------------------------------------------------------------------------------
class WeightBoard:
    """The weights the service should serve: the latest (version, source). A named Ray actor.

    source: {"kind": "path", "path": model folder} or {"kind": "object_ref", "ref": [ObjectRef of the
    exported name -> numpy dict]} (the ref inside a list, so Ray does not resolve it on the way). Only the
    latest entry is kept (one copy of the weights pinned in the object store).
    """

    def __init__(self):
        self.version: Optional[int] = None
        self.source: Optional[dict] = None
        self.published_at = 0.0
        self._cond: Optional[asyncio.Condition] = None

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    async def publish(self, version: int, source: dict) -> int:
        """Set the latest weights (a version not above the current one is refused: ValueError)."""
        cond = self._condition()
        async with cond:
            if self.version is not None and version < self.version:
                raise ValueError(f"version {version} is older than the served version {self.version}")
            if version == self.version:  # a repeated sync (a restarted rollout actor): nothing new
                return self.version
            self.version, self.source, self.published_at = int(version), source, time.time()
            cond.notify_all()
        return self.version

    async def latest(self) -> tuple:
        return self.version, self.source

    async def wait_newer(self, version: Optional[int], timeout_s: float) -> tuple:
        """(version, source) as soon as the board holds a version newer than `version`, else after
        `timeout_s` (None, None)."""
        cond = self._condition()
        newer = lambda: self.version is not None and (version is None or self.version > version)  # noqa: E731
        async with cond:
            try:
                await asyncio.wait_for(cond.wait_for(newer), timeout_s)
            except asyncio.TimeoutError:
                return None, None
            return self.version, self.source


def read_model_weights(path: str) -> dict:
    """A model folder's safetensors weights as name -> numpy array (bf16 as marked uint16, unwidened)."""
    from safetensors.torch import load_file

    from actors.checkpoint_io import to_numpy

    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {path}")
    state = {}
    for f in files:
        state.update(load_file(str(f)))
    return to_numpy(state, widen=False)


_SHAPE_KEYS = ("architectures", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
               "intermediate_size", "vocab_size", "tie_word_embeddings")


def check_same_shape(current: str, new: str) -> None:
    """ValueError unless the model folder `new` has the architecture of `current` (a different model needs a
    new deployment, not a weight swap)."""
    def shape(p):
        try:
            cfg = json.loads((Path(p) / "config.json").read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot read {p}/config.json: {e}") from None
        return {k: cfg.get(k) for k in _SHAPE_KEYS}

    a, b = shape(current), shape(new)
    diff = [k for k in _SHAPE_KEYS if a[k] != b[k]]
    if diff:
        raise ValueError(f"{new} is another architecture ({', '.join(f'{k}: {a[k]} -> {b[k]}' for k in diff)})")
    if not list(Path(new).glob("*.safetensors")):
        raise ValueError(f"no *.safetensors in {new}")


# ---- the replica ---------------------------------------------------------------------------------------
app = FastAPI(title="GenSelect selector", docs_url=None, redoc_url=None)


class SelectorServer:
    """Serve replica: one RolloutWorker, the HTTP API, and a follower of the weight board.

    A plain class: driver/serve.py applies `serve.ingress(app)` and `serve.deployment(...)` at launch.
    """

    def __init__(self, settings: SelectorSettings, worker=None):
        """worker: an already-built RolloutWorker (tests); default: a new one on `settings.model`."""
        from actors.rollout import RolloutWorker

        self.s = settings
        self.worker = worker or RolloutWorker(settings.rollout, settings.model, dtype=settings.dtype,
                                              seed=settings.seed)
        self.worker.version = settings.policy_version
        self.model_path = settings.model
        self.started = time.time()
        self.counters = {"select": 0, "completions": 0, "client_errors": 0, "server_errors": 0, "swaps": 0,
                         "swap_failures": 0, "board_errors": 0, "knockout_fallbacks": 0}
        self.last_swap: dict = {}
        self._follower: Optional[asyncio.Task] = None
        self._swap_lock: Optional[asyncio.Lock] = None

    async def _ready(self) -> None:
        """Awaited by every call. The first one, on the replica's event loop, catches up with the weight board
        (a replica started after a swap, by autoscaling or to replace a dead one, never answers with older
        weights than the board's) and then starts following it; concurrent first calls wait for that."""
        if self._swap_lock is None:
            self._swap_lock, self._caught_up = asyncio.Lock(), asyncio.Event()
            try:
                if self.s.board:
                    try:
                        version, source = await self._board().latest.remote()
                        if version is not None and version > self.worker.version:
                            await self._apply(version, source)
                    except Exception as e:  # counted and logged; the follower retries
                        self.counters["board_errors"] += 1
                        log.warning("weight board %s at start-up: %r", self.s.board, e)
                    self._follower = asyncio.get_running_loop().create_task(self._follow_board())
            finally:
                self._caught_up.set()
        await self._caught_up.wait()

    # ---- weights ---------------------------------------------------------------------------------------
    def _board(self):
        import ray

        return ray.get_actor(self.s.board, namespace=BOARD_NAMESPACE)

    async def _follow_board(self) -> None:
        """Long-poll the board; load every newer version (errors are counted and logged, then retried)."""
        while True:
            try:
                version, source = await self._board().wait_newer.remote(self.worker.version, 30.0)
                if version is not None and version > self.worker.version:
                    await self._apply(version, source)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the board may not exist yet, or a load failed: retry
                self.counters["board_errors"] += 1
                log.warning("weight board %s: %r", self.s.board, e)
                await asyncio.sleep(2.0)

    async def _apply(self, version: int, source: dict) -> dict:
        """Load `source` into the engine as `version` (requests in flight finish on the old weights)."""
        async with self._swap_lock:
            if version <= self.worker.version:
                return self.last_swap
            start = time.perf_counter()
            try:
                if source["kind"] == "path":
                    weights = await asyncio.to_thread(read_model_weights, source["path"])
                else:
                    weights = await source["ref"][0]
                stats = await self.worker.update_weights_from_object_store(weights, version)
            except Exception:
                self.counters["swap_failures"] += 1
                raise
            if source["kind"] == "path":
                self.model_path = source["path"]
            self.counters["swaps"] += 1
            self.last_swap = {"version": version, "seconds": time.perf_counter() - start,
                              "pause_s": stats.get("pause_s"), "load_s": stats.get("load_s"),
                              "source": source.get("path", "training weight sync"), "at": time.time()}
            log.info("replica now serves policy version %d (%.2f s)", version, self.last_swap["seconds"])
            return self.last_swap

    async def wait_for_version(self, version: int, timeout_s: float = 60.0) -> int:
        """Block until this replica serves `version` or newer (handle method, tests and the admin call)."""
        await self._ready()
        deadline = time.monotonic() + timeout_s
        while self.worker.version < version and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return self.worker.version

    async def select(self, body: dict) -> dict:
        """/v1/select through a DeploymentHandle (no HTTP): the same validation and answer; a client error
        raises RequestError."""
        await self._ready()
        return await self._select(json.dumps(body).encode())

    async def compute_logprobs(self, prompt_token_ids: list, response_token_ids: list) -> dict:
        """{"version", "logprobs"} of a fixed completion under the served weights (handle method)."""
        lps = await self.worker.compute_logprobs(prompt_token_ids, response_token_ids)
        return {"version": self.worker.version, "logprobs": lps}

    async def check_health(self) -> None:
        """Serve's health probe: raise (Serve replaces the replica) when the engine died."""
        await self._ready()
        health = await self.worker.health()
        if not health["ok"]:
            raise RuntimeError(f"rollout engine unhealthy: {health['error']}")

    def __del__(self):
        if getattr(self, "_follower", None) is not None:
            self._follower.cancel()
        shutdown = getattr(getattr(self, "worker", None), "_shutdown_now", None)
        if shutdown is not None:
            shutdown()  # the engine's processes and /dev/shm go with the replica

    # ---- HTTP ------------------------------------------------------------------------------------------
    @app.get("/healthz")
    async def healthz(self) -> JSONResponse:
        await self._ready()
        health = await self.worker.health()
        from ray import serve

        ctx = serve.get_replica_context()
        body = {"status": "ok" if health["ok"] else "unhealthy", "policy_version": self.worker.version,
                "model": self.model_path, "replica": ctx.replica_id.unique_id if ctx else None,
                "window": self.s.window, "max_prompt_tokens": self.s.max_prompt_tokens,
                "in_flight": health["in_flight"], "paused": health["paused"], "error": health["error"],
                "uptime_s": round(time.time() - self.started, 1), "last_swap": self.last_swap,
                "counters": {**self.counters, "engine_requests": health["requests"],
                             "engine_timeouts": health["timeouts"]}}
        return JSONResponse(body, status_code=200 if health["ok"] else 503)

    @app.post("/v1/select")
    async def select_http(self, request: Request) -> JSONResponse:
        return await self._guarded(self._select, await request.body())

    @app.post("/v1/completions")
    async def completions_http(self, request: Request) -> JSONResponse:
        return await self._guarded(self._completions, await request.body())

    @app.post("/admin/reload")
    async def reload_http(self, request: Request) -> JSONResponse:
        if self.s.admin_token and request.headers.get("authorization") != f"Bearer {self.s.admin_token}":
            return error_response(401, "authorization", "admin calls need 'Authorization: Bearer <token>'",
                                  "authentication_error")
        return await self._guarded(self._reload, await request.body())

    async def _guarded(self, handler, body: bytes) -> JSONResponse:
        """Run a handler: RequestError -> its 4xx; timeout -> 504; anything else -> 503 (logged, counted)."""
        from actors.rollout import RolloutTimeout

        await self._ready()
        try:
            return JSONResponse(await handler(body))
        except RequestError as e:
            self.counters["client_errors"] += 1
            return error_response(e.status, e.field, e.message)
        except _client_errors() as e:  # vLLM refused the request's parameters
            self.counters["client_errors"] += 1
            return error_response(422, getattr(e, "parameter", None) or "body", str(e))
        except (RolloutTimeout, asyncio.TimeoutError) as e:
            self.counters["server_errors"] += 1
            return error_response(504, "", f"timed out: {e}", "timeout")
        except Exception as e:
            self.counters["server_errors"] += 1
            log.exception("request failed")
            return error_response(503, "", f"{type(e).__name__}: {e}", "server_error")

    # ---- /v1/select ------------------------------------------------------------------------------------
    def _prompt_fits(self, problem: str, candidates: list, group: list) -> bool:
        prompt = build_prompt(problem, [candidates[i] for i in group])
        return len(self.worker.encode_prompt(prompt)) <= self.s.max_prompt_tokens

    async def _select(self, body: bytes) -> dict:
        req = await asyncio.to_thread(parse_select, body, self.s)
        self.counters["select"] += 1
        problem, candidates, k = req["problem"], req["candidates"], req["samples"]
        members, rounds, versions = list(range(len(candidates))), [], set()
        started = time.perf_counter()
        while True:
            try:
                groups = plan_round(members, self.s.window,
                                    lambda g: self._prompt_fits(problem, candidates, g))
            except DoesNotFit as e:
                raise RequestError(413, "candidates", f"candidates {e.members} together exceed the prompt budget "
                                                      f"of {self.s.max_prompt_tokens} tokens") from None
            judged = [g for g in groups if len(g) > 1]
            tasks = [SelectionTask(prompt_id=f"serve/{i}", problem_id="serve", domain=req["domain"],
                                   problem=problem, candidates=tuple(candidates[j] for j in g),
                                   candidate_answers=tuple(candidates[j] for j in g), labels=(0.0,) * len(g),
                                   reference="", prompt=build_prompt(problem, [candidates[j] for j in g]))
                     for i, g in enumerate(judged)]
            # every group of the round in flight at once: the engine batches them (continuous batching)
            results = await self.worker.generate(tasks, n=k, temperature=req["temperature"],
                                                 max_tokens=self.s.max_response_tokens)
            record, winners, final = {"groups": [], "winners": []}, [], len(groups) == 1
            by_group = dict(zip(map(tuple, judged), results))
            for g in groups:
                if len(g) == 1:
                    winners.append(g[0])
                    record["groups"].append(g)
                    record["winners"].append(g[0])
                    continue
                result = by_group[tuple(g)]
                versions.add(result.policy_version)
                parsed = [parse_judgment(r.response_text, len(g)) for r in result.rollouts]
                local, votes = majority([p.index for p in parsed], len(g))
                winner = g[local] if local is not None else (None if final else g[0])
                if local is None and not final:
                    self.counters["knockout_fallbacks"] += 1
                record["groups"].append(g)
                record["winners"].append(winner)
                winners.append(winner)
                if final:
                    last = {"group": g, "parsed": parsed, "votes": votes, "result": result, "winner": winner}
            rounds.append(record)
            if final:
                break
            members = winners
        n = len(candidates)
        votes = [0] * n
        for j, v in zip(last["group"], last["votes"]):
            votes[j] = v
        parsed = last["parsed"]
        return {
            "index": last["winner"],
            "votes": votes,
            "judgments": [r.response_text for r in last["result"].rollouts],
            "parsed": [last["group"][p.index] if p.ok else None for p in parsed],
            "unparsed": sum(not p.ok for p in parsed),
            "parse_errors": [p.status for p in parsed if not p.ok],
            "policy_version": last["result"].policy_version,
            "policy_versions": sorted(versions),
            "rounds": len(rounds),
            "bracket": rounds,
            "samples": k, "temperature": req["temperature"],
            "seconds": round(time.perf_counter() - started, 4),
        }

    # ---- /v1/completions -------------------------------------------------------------------------------
    async def _completions(self, body: bytes) -> dict:
        from pydantic import ValidationError
        from vllm.entrypoints.openai.completion.protocol import (CompletionLogProbs, CompletionRequest,
                                                                 CompletionResponse, CompletionResponseChoice)
        from vllm.entrypoints.serve.engine.protocol import UsageInfo

        data = parse_json(body, self.s.max_body_bytes)
        try:
            req = CompletionRequest.model_validate(data)
        except ValidationError as e:
            err = e.errors()[0]
            raise RequestError(422, _field_of(err["loc"]), err["msg"]) from None
        except Exception as e:  # vLLM's own request checks (VLLMValidationError names its parameter)
            raise RequestError(422, getattr(e, "parameter", None) or "body", str(e)) from None
        if req.stream:
            raise RequestError(422, "stream", "streaming is not supported; send stream=false")
        if req.echo or req.use_beam_search or req.suffix:
            name = "echo" if req.echo else "use_beam_search" if req.use_beam_search else "suffix"
            raise RequestError(422, name, "not supported")
        prompts = req.prompt
        if prompts is None or prompts == "" or prompts == []:
            raise RequestError(422, "prompt", "required, a string, a list of strings or token ids")
        if isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        if len(prompts) > self.s.max_candidates:
            raise RequestError(413, "prompt", f"{len(prompts)} prompts; the limit is {self.s.max_candidates}")
        max_tokens = req.max_tokens if req.max_tokens is not None else 16
        if not 1 <= max_tokens <= self.s.max_completion_tokens:
            raise RequestError(422, "max_tokens", f"must be in 1..{self.s.max_completion_tokens}")
        if not 1 <= req.n <= self.s.max_samples:
            raise RequestError(422, "n", f"must be in 1..{self.s.max_samples}")
        if req.logprobs is not None and not 0 <= req.logprobs <= 5:
            raise RequestError(422, "logprobs", "must be in 0..5")
        try:
            params = req.to_sampling_params(max_tokens, {})
        except Exception as e:  # vLLM's own parameter checks (e.g. temperature < 0)
            raise RequestError(422, "body", str(e)) from None
        ids = []
        for i, p in enumerate(prompts):
            tokens = list(p) if isinstance(p, list) else self.worker.tokenizer(p, add_special_tokens=False)["input_ids"]
            if not tokens:
                raise RequestError(422, f"prompt[{i}]", "is empty")
            if len(tokens) + max_tokens > self._context():
                raise RequestError(413, f"prompt[{i}]", f"{len(tokens)} tokens + max_tokens {max_tokens} exceed "
                                                        f"the model's context of {self._context()}")
            vocab = self.worker.tokenizer.vocab_size if isinstance(p, list) else None
            if vocab and max(tokens) >= len(self.worker.tokenizer):
                raise RequestError(422, f"prompt[{i}]", f"token id {max(tokens)} is outside the vocabulary")
            ids.append(tokens)
        self.counters["completions"] += 1
        calls = [self.worker.run_request(t, params, tag="c") for t in ids]
        outs = await asyncio.wait_for(asyncio.gather(*calls), self.s.request_timeout_s)
        choices, completion_tokens, versions = [], 0, set()
        for i, (final, version, _, _) in enumerate(outs):
            versions.add(version)
            for c in sorted(final.outputs, key=lambda c: c.index):
                completion_tokens += len(c.token_ids)
                logprobs = None
                if req.logprobs is not None and c.logprobs is not None:
                    toks = [self.worker.tokenizer.decode([t]) for t in c.token_ids]
                    logprobs = CompletionLogProbs(
                        tokens=toks, token_logprobs=[c.logprobs[j][t].logprob for j, t in enumerate(c.token_ids)],
                        top_logprobs=[{self.worker.tokenizer.decode([tid]): lp.logprob for tid, lp in step.items()}
                                      for step in c.logprobs],
                        text_offset=[])
                choices.append(CompletionResponseChoice(index=len(choices), text=c.text, logprobs=logprobs,
                                                        finish_reason=c.finish_reason, stop_reason=c.stop_reason))
        prompt_tokens = sum(len(t) for t in ids)
        response = CompletionResponse(model=req.model or self.model_path, choices=choices,
                                      usage=UsageInfo(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                                      total_tokens=prompt_tokens + completion_tokens))
        return {**response.model_dump(exclude_none=True), "policy_version": max(versions),
                "policy_versions": sorted(versions)}

    def _context(self) -> int:
        return int(self.worker.engine.model_config.max_model_len)

    # ---- /admin/reload ---------------------------------------------------------------------------------
    async def _reload(self, body: bytes) -> dict:
        """{"model": folder, "version": int (optional: current + 1)} -> published to the board; every replica
        loads it; this call answers once this replica serves it."""
        data = parse_json(body, self.s.max_body_bytes)
        path = data.get("model")
        if not isinstance(path, str) or not path:
            raise RequestError(422, "model", "required, the path of a model folder on the replicas' machines")
        try:
            await asyncio.to_thread(check_same_shape, self.s.model, path)
        except ValueError as e:
            raise RequestError(422, "model", str(e)) from None
        if not self.s.board:
            raise RequestError(409, "model", "this deployment has no weight board (started without live weights)")
        board = self._board()
        current, _ = await board.latest.remote()
        version = data.get("version", (current if current is not None else self.worker.version) + 1)
        if not _is_int(version):
            raise RequestError(422, "version", "must be an integer")
        newest = max(v for v in (current, self.worker.version) if v is not None)
        if version <= newest:
            raise RequestError(409, "version", f"must be newer than the served version {newest}")
        try:
            await board.publish.remote(version, {"kind": "path", "path": str(Path(path).resolve())})
        except Exception as e:
            raise RequestError(409, "version", str(getattr(e, "cause", e)).splitlines()[-1]) from None
        served = await self.wait_for_version(version, self.s.request_timeout_s)
        return {"version": version, "model": str(Path(path).resolve()), "served_here": served,
                "swap": self.last_swap}

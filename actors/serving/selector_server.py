"""The selection service's replica: an HTTP front (FastAPI) over the trainer's own `RolloutWorker`.

One replica = one `RolloutWorker` (actors/rollout/rollout_worker.py) in the replica's process: the same vLLM engine
settings, chat formatting (core/chat.py, through `RolloutWorker.encode_prompt`), admission gate and
weight-update path the trainer uses, with the GenSelect prompt builder and `Judgment:` parser of
core/algo/genselect.py and the selection procedures of core/algo/selection.py (the ones the held-out evaluation
runs; /v1/select's use of them: actors/serving/served_selection.py). Nothing here re-implements them.

Endpoints (docs/serving.md has a curl example for each):
    POST /v1/select          problem + N candidates -> chosen index, votes, judgments, policy_version, rounds
    GET  /v1/models          OpenAI's model list: the served selector, its policy version and folder
    POST /v1/completions     OpenAI completions, raw generation         } actors/serving/openai_api.py (vLLM's own
    POST /v1/chat/completions  OpenAI chat, the model's chat template   }   request and response types;
                                                                         }   stream=true: Server-Sent Events)
    GET  /healthz            replica health, policy version and model served
    POST /admin/reload       swap the weights of every replica to a model folder, without a restart

Live weights. Every replica follows a `WeightBoard` (actors/serving/weight_board.py, a small named Ray actor): the board
holds the latest (version, source) the service should serve, where a source is a model folder or an ObjectRef of
exported arrays (the trainer's weight sync publishes each new policy version there). Each replica long-polls the
board and loads a newer version through `RolloutWorker.update_weights_from_object_store`, which waits for the
requests in flight to finish on the old weights, loads, and resumes: no request fails during a swap, and every
answer names the version it ran on. A replica started later (autoscaling, or Serve replacing a dead one) catches
up from the board at start-up.

Errors (validation: actors/serving/select_request.py). Bad requests get a 4xx whose JSON body names the field: {"error":
{"message", "field", "type"}} (400 malformed JSON, 404 a `model` not served here, 413 over a size limit, 422
invalid field, 401 admin without the token); a request that outlives `request_timeout_s` gets 504; an engine
failure 503. A stream (stream=true) is checked the same way before its 200; a failure after that is one
`data: {"error": {..., "code": 504 or 503}}` event before `data: [DONE]`. A client that closes a stream aborts its
engine request.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from actors.serving import openai_api
from actors.serving import reasoning
from actors.serving import served_selection
from actors.serving.select_request import (RequestError, SelectorSettings, _client_errors, _is_int, error_response,
                                           parse_json, parse_select, stream_error, unreserved_gpu_error)
from actors.serving.weight_board import BOARD_NAMESPACE, check_same_shape, read_model_weights
from core.algo.genselect import read_prompt_style

log = logging.getLogger("genselect.serving")


def server_error(counters: dict, error: Exception, what: str) -> tuple:
    """(status, field, message, type) of a failure on the server's side, counted in `counters["server_errors"]`: a
    timeout is 504, anything else 503 (logged as `what`, with its traceback)."""
    from actors.rollout.rollout_worker import RolloutTimeout

    counters["server_errors"] += 1
    if isinstance(error, (RolloutTimeout, asyncio.TimeoutError)):
        return 504, "", f"timed out: {error}", "timeout"
    log.exception(what)
    return 503, "", f"{type(error).__name__}: {error}", "server_error"


# ---- the replica ---------------------------------------------------------------------------------------
def _check_gpu_reservation() -> None:
    """Refuse to start an engine on a GPU this replica did not reserve (select_request.unreserved_gpu_error)."""
    import ray
    import torch

    error = unreserved_gpu_error(torch.cuda.device_count(), ray.get_gpu_ids() if ray.is_initialized() else [])
    if error:
        raise RuntimeError(error)


app = FastAPI(title="GenSelect selector", docs_url=None, redoc_url=None)


class SelectorServer:
    """Serve replica: one RolloutWorker, the HTTP API, and a follower of the weight board.

    A plain class: driver/serve.py applies `serve.ingress(app)` and `serve.deployment(...)` at launch.
    """

    def __init__(self, settings: SelectorSettings, worker=None):
        """worker: an already-built RolloutWorker (tests); default: a new one on `settings.model`."""
        from actors.rollout.rollout_worker import RolloutWorker

        self.s = settings
        if worker is None:
            _check_gpu_reservation()
        self.worker = worker or RolloutWorker(settings.rollout, settings.model, dtype=settings.dtype,
                                              seed=settings.seed, response_form=settings.response_form)
        self.worker.version = settings.policy_version
        self.reasoning_parser = reasoning.parser_class(settings.reasoning_parser, self.worker.tokenizer)
        self.model_path = settings.model
        self.style = read_prompt_style(settings.model)  # as the model was trained
        self.started = time.time()
        self.counters = {"select": 0, "completions": 0, "chat": 0, "streams": 0, "streams_cancelled": 0,
                         "client_errors": 0, "server_errors": 0, "swaps": 0, "swap_failures": 0, "board_errors": 0,
                         "knockout_fallbacks": 0}
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
                self.style = read_prompt_style(source["path"])
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
                "window": self.s.window, "orders": self.s.orders, "selection": self.s.selection,
                "max_prompt_tokens": self.s.max_prompt_tokens, "reasoning_parser": self.s.reasoning_parser or None,
                # the cluster's HTTP ingress (docs/serving.md, "Scaling"), as the Serve controller reads it
                "ingress": "haproxy" if os.environ.get("RAY_SERVE_ENABLE_HA_PROXY") == "1" else "proxy",
                "in_flight": health["in_flight"], "paused": health["paused"], "error": health["error"],
                "uptime_s": round(time.time() - self.started, 1), "last_swap": self.last_swap,
                "counters": {**self.counters, "engine_requests": health["requests"],
                             "engine_timeouts": health["timeouts"]}}
        return JSONResponse(body, status_code=200 if health["ok"] else 503)

    @app.post("/v1/select")
    async def select_http(self, request: Request) -> JSONResponse:
        return await self._guarded(self._select, await request.body())

    @app.get("/v1/models")
    async def models_http(self) -> JSONResponse:
        await self._ready()
        return JSONResponse(openai_api.model_list(self))

    @app.post("/v1/completions")
    async def completions_http(self, request: Request) -> Response:
        return await self._guarded(self._completions, await request.body())

    @app.post("/v1/chat/completions")
    async def chat_http(self, request: Request) -> Response:
        return await self._guarded(self._chat, await request.body())

    async def _completions(self, body: bytes) -> dict:
        return await openai_api.completions(self, body)

    async def _chat(self, body: bytes) -> dict:
        return await openai_api.chat_completions(self, body)

    @app.post("/admin/reload")
    async def reload_http(self, request: Request) -> JSONResponse:
        if self.s.admin_token and request.headers.get("authorization") != f"Bearer {self.s.admin_token}":
            return error_response(401, "authorization", "admin calls need 'Authorization: Bearer <token>'",
                                  "authentication_error")
        return await self._guarded(self._reload, await request.body())

    async def _guarded(self, handler, body: bytes) -> JSONResponse:
        """Run a handler: RequestError -> its 4xx; timeout -> 504; anything else -> 503 (logged, counted)."""
        await self._ready()
        try:
            return self._respond(await handler(body))
        except RequestError as e:
            self.counters["client_errors"] += 1
            return error_response(e.status, e.field, e.message)
        except _client_errors() as e:  # vLLM refused the request's parameters
            self.counters["client_errors"] += 1
            return error_response(422, getattr(e, "parameter", None) or "body", str(e))
        except Exception as e:
            return error_response(*server_error(self.counters, e, "request failed"))

    def _respond(self, answer) -> Response:
        """A handler's answer as HTTP: a dict as JSON; a stream (an async iterator of Server-Sent Events, from
        stream=true) as `text/event-stream`, each event sent as the engine produces it."""
        if isinstance(answer, dict):
            return JSONResponse(answer)
        self.counters["streams"] += 1
        return StreamingResponse(self._guarded_stream(answer), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def _guarded_stream(self, events):
        """`events`, passed on; a failure once the stream has begun (its 200 is sent) becomes one error event and
        `[DONE]` (the status and type `_guarded` would answer, counted alike). A client that goes away cancels
        this: the stream is closed, which aborts its engine request (counted as `streams_cancelled`)."""
        try:
            async with contextlib.aclosing(events):
                async for event in events:
                    yield event
        except (asyncio.CancelledError, GeneratorExit):
            self.counters["streams_cancelled"] += 1
            raise
        except Exception as e:
            yield stream_error(*server_error(self.counters, e, "streamed request failed"))

    # ---- /v1/select (actors/serving/served_selection.py) ------------------------------------------------------
    async def _select(self, body: bytes) -> dict:
        req = await asyncio.to_thread(parse_select, body, self.s)
        self.counters["select"] += 1
        return await served_selection.select(self, req)

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

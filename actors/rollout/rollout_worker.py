"""Rollout worker: one vLLM `AsyncLLM` engine that samples G selector responses per GenSelect prompt.

A plain class: `ray.remote(**opts)(RolloutWorker)` is applied where it is launched (cluster/launch.py),
and the same class can back a Ray Serve deployment. Every public method except `policy_version` is a
coroutine, so as a Ray actor it is an async actor and many `generate` calls run concurrently on one
engine (continuous batching).

Policy versions and the admission gate: actors/rollout/engine_gate.py (a request runs entirely on the version it was
admitted under). Response forms (how one task's G rollouts are sampled; free text or one index token by default, a
model's own form handed in by the launcher): actors/rollout/response_forms.py. Weight updates: the worker holds the
engine's update protocol (actors/weight_sync/engine_update.py) and a receiver per weight transport it loads from
(actors/weight_sync/: object_store.py, broadcast.py, ipc.py); its Ray-callable update methods hand each call to them.

Behaviour log-probs are the engine's *processed* log-probs (`logprobs_mode="processed_logprobs"`):
log-probs of the distribution actually sampled from (after temperature and top-p), which is what the
PPO ratio's denominator must be. The learner must therefore score with `logits / temperature`; with
top_p < 1 the two differ by the nucleus renormalisation. `compute_logprobs` returns temperature-1
log-probs of a fixed completion (prompt log-probs skip the sampling processors).

Shutdown. The engine lives in child processes holding ~400 MB of /dev/shm. The launcher must call
`shutdown()` (and wait for it) before `ray.kill` on this actor; `__del__` and an atexit hook try too,
but a killed actor runs neither.
"""
from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import inspect
import json
import time
import uuid
import weakref
from pathlib import Path
from typing import Optional

from actors.rollout.engine_env import CPU_EXECUTOR, configure_cpu_env, engine_backends, on_cpu
from actors.rollout.engine_gate import EngineGate, TokenGate
from actors.faults import maybe_crash
from actors.rollout.response_forms import FreeText, generate_group
from actors.weight_sync.broadcast import BroadcastReceiver
from actors.weight_sync.engine_update import EngineUpdate
from actors.weight_sync.ipc import IpcReceiver
from actors.weight_sync.object_store import ObjectStoreReceiver
from core.chat import answer_prefix, end_token_ids, index_token_ids
from core.records import Rollout, SolveTask

EXTENSION = "actors.weight_sync.worker_extension.WeightReceiver"
# KV block size on CPU. vLLM's CPU default is 128 and only full blocks are prefix-cached, so up to 127
# prompt tokens were recomputed for each of the G samples and each re-issue; measured on 2 cores
# (16 prompts x 224 tokens, G=4, 16 new tokens, cached re-run): 1.36 s at 128, 0.62 s at 32.
CPU_BLOCK_SIZE = 32
# Grace period for the engine's processes to exit on shutdown. vLLM's default (5 s) equals the engine
# core's own wait for its worker (VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS=5), so on a busy machine the core
# was force-killed before it unlinked its shared memory (a /dev/shm leak seen here).
SHUTDOWN_TIMEOUT_S = 30.0
class RolloutTimeout(TimeoutError):
    """A generate call ran past RolloutConfig.request_timeout_s (its requests were aborted)."""


class RolloutAborted(RuntimeError):
    """A generate call was ended by `abort(call_id)` (its requests were aborted in the engine)."""


def encode_prompt(tokenizer, prompt: str) -> list:
    """Prompt token ids, formatted exactly as the learner formats them (core/chat.py).

    No fallback: without that module the import error propagates (a prompt in another format than the
    learner's would train on sequences the learner never scored the same way).
    """
    from core.chat import prompt_token_ids

    return list(prompt_token_ids(tokenizer, prompt))


def _model_config(model_path: str) -> dict:
    """The model folder's config.json ({} if unreadable)."""
    try:
        return json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return {}


class RolloutWorker:
    """vLLM engine: generate G samples per prompt, pause/resume, load weights, report policy version."""

    def __init__(self, cfg, model_path: str, dtype: str = "float32", seed: int = 0,
                 worker_index: int = 0, weight_sync=None, response_form=None):
        """cfg: RolloutConfig. weight_sync: WeightSyncConfig (bucket size); default WeightSyncConfig().
        response_form: how a selection task's G rollouts are sampled (actors/rollout/response_forms.py); default
        FreeText."""
        configure_cpu_env(cfg)
        from transformers import AutoTokenizer
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        from core.config import WeightSyncConfig

        self.cfg = cfg
        self.response_form = response_form or FreeText()
        self.sync_cfg = weight_sync or WeightSyncConfig()
        self.model_path = str(model_path)
        self.worker_index = worker_index
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        model_config = _model_config(self.model_path)
        self.tied_embeddings = bool(model_config.get("tie_word_embeddings", False))
        self.engine_backends = engine_backends(cfg, dtype, worker_index)
        start = time.perf_counter()
        args = AsyncEngineArgs(
            model=self.model_path, tokenizer=self.model_path, dtype=dtype, seed=seed,
            max_model_len=model_config.get("max_position_embeddings"), max_num_seqs=cfg.max_num_seqs,
            max_num_batched_tokens=cfg.max_num_batched_tokens or None,
            enforce_eager=cfg.enforce_eager, enable_prefix_caching=True,
            gpu_memory_utilization=cfg.gpu_memory_utilization, worker_extension_cls=EXTENSION,
            logprobs_mode="processed_logprobs", disable_log_stats=True,
            block_size=CPU_BLOCK_SIZE if on_cpu() else None,
            distributed_executor_backend=CPU_EXECUTOR if on_cpu() else None,
            attention_backend=self.engine_backends["attention_backend"],
            kv_cache_memory_bytes=cfg.kv_cache_memory_bytes or None,
        )
        self.engine = AsyncLLM.from_engine_args(args)
        self.start_seconds = time.perf_counter() - start
        self._init_state()
        ref = weakref.ref(self)
        atexit.register(lambda: ref() is not None and ref()._shutdown_now())

    def _init_state(self) -> None:
        """The admission gate, the update's bookkeeping and the counters (tests set these up around a fake
        engine)."""
        self._counters = {"requests": 0, "timeouts": 0, "aborted_calls": 0, "updates": 0, "update_failures": 0,
                          "updates_aborted": 0, "kept_requests": 0}
        self.gate = EngineGate(self.engine, self._counters)  # the engine's policy version and admission gate
        self._calls: dict = {}       # call id -> the asyncio task of a generate/sample call (for abort)
        self._aborted: set = set()   # call ids being aborted
        self.weight_update = EngineUpdate(self)  # drain -> load -> resume, and the last update's outcome
        self._receivers: dict = {}   # weight transport's receiver class -> the one this worker holds

    # ---- generation -------------------------------------------------------------------------------
    @functools.cached_property
    def end_ids(self) -> list:
        """The tokenizer's end tokens (`core.chat.end_token_ids`): a response ends at any of them, not only at EOS."""
        return end_token_ids(self.tokenizer) if self.tokenizer is not None else []

    def encode_prompt(self, prompt: str) -> list:
        """Token ids of the formatted prompt (see `encode_prompt`)."""
        return encode_prompt(self.tokenizer, prompt)

    async def generate(self, tasks: list, n: Optional[int] = None, temperature: Optional[float] = None,
                       max_tokens: Optional[int] = None, call_id: Optional[str] = None) -> list:
        """G = n (default cfg.samples_per_prompt) responses per task, one request per task with n=G.

        All requests are in flight at once. Returns one RolloutGroup per task, in order. Raises
        RolloutTimeout past the call's deadline (`cfg.request_timeout_s`, or derived from the call's size:
        core/deadlines.py) and RolloutAborted when `abort(call_id)` ends it; either way every request of the
        call has been aborted in the engine when it raises.
        """
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        from core.deadlines import generate_deadline_s

        maybe_crash("rollout_generate")
        n = n or self.cfg.samples_per_prompt
        params = SamplingParams(
            n=n, temperature=self.cfg.temperature if temperature is None else temperature, top_p=self.cfg.top_p,
            max_tokens=max_tokens or self.cfg.max_response_tokens, logprobs=0, stop_token_ids=self.end_ids,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )
        prompts = [self.task_prompt_ids(task) for task in tasks]
        deadline = generate_deadline_s(self.cfg, max(map(len, prompts), default=0), len(tasks) * n,
                                       params.max_tokens)
        calls = [generate_group(self, task, ids, params) for task, ids in zip(tasks, prompts)]
        return await self._bounded(calls, deadline, call_id, f"generate of {len(tasks)} prompts")

    async def index_logprobs(self, tasks: list) -> list:
        """Per task, (log-probabilities of the answers 0..N-1 (N floats), policy version): the constrained
        one-token distribution (`rollout.constrain_index`) at temperature 1, read from one engine request
        per task (`logprobs=N` of the masked, processed distribution). What a judgment read in several
        candidate orders adds up (`core.algo.knockout.both_orders_pick`). Raises ValueError for a model that
        answers in free text (no answer prefix, or constrain_index off)."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        from core.deadlines import generate_deadline_s

        prompts = [self.task_prompt_ids(task) for task in tasks]
        allowed = [self.allowed_token_ids(task.num_candidates) for task in tasks]
        if any(ids is None for ids in allowed):
            raise ValueError("index log-probs need a one-token index answer: rollout.constrain_index=true and a "
                             "model whose prompt ends in the answer prefix")

        async def one(ids: list, allowed_ids: list) -> list:
            params = SamplingParams(n=1, temperature=1.0, top_p=1.0, max_tokens=1, logprobs=len(allowed_ids),
                                    allowed_token_ids=allowed_ids, output_kind=RequestOutputKind.FINAL_ONLY)
            final, version, *_ = await self.run_request(ids, params, tag="lp")
            top = final.outputs[0].logprobs[0]
            return [top[t].logprob if t in top else float("-inf") for t in allowed_ids], version

        deadline = generate_deadline_s(self.cfg, max(map(len, prompts), default=0), len(tasks), 1)
        return await self._bounded([one(ids, a) for ids, a in zip(prompts, allowed)], deadline, None,
                                   f"index log-probs of {len(tasks)} prompts")

    def task_prompt_ids(self, task) -> list:
        """Prompt token ids of a task: a GenSelect prompt (`SelectionTask`, formatted by `core.chat.format_prompt`)
        or a problem a generator solves (`SolveTask`, `task=generator`: `core.chat.format_generator_prompt`, the
        same prompt as model-sampled candidates)."""
        if isinstance(task, SolveTask):
            from core.chat import generator_prompt_token_ids

            return list(generator_prompt_token_ids(self.tokenizer, task.problem, task.domain))
        return self.encode_prompt(task.prompt)

    async def _bounded(self, calls: list, deadline: float, call_id: Optional[str], what: str) -> list:
        """Run `calls` concurrently under `deadline`, abortable as `call_id`. On a timeout or an abort the
        pending coroutines are cancelled, and vLLM aborts a request whose generator is cancelled, before this
        raises: nothing of the call is left running in the engine."""
        call_id = call_id or uuid.uuid4().hex
        self._calls[call_id] = asyncio.current_task()
        try:
            return list(await asyncio.wait_for(asyncio.gather(*calls), deadline))
        except asyncio.TimeoutError:
            self._counters["timeouts"] += 1
            raise RolloutTimeout(f"rollout worker {self.worker_index}: {what} exceeded its deadline of "
                                 f"{deadline:.0f} s (requests aborted)") from None
        except asyncio.CancelledError:
            if call_id not in self._aborted:
                raise
            asyncio.current_task().uncancel()  # the cancel was ours and ends here, as RolloutAborted
            self._counters["aborted_calls"] += 1
            raise RolloutAborted(f"rollout worker {self.worker_index}: {what} aborted (call {call_id})") from None
        finally:
            self._calls.pop(call_id, None)
            self._aborted.discard(call_id)

    async def abort(self, call_id: Optional[str] = None, wait_s: float = 30.0) -> dict:
        """Abort the generate/sample call `call_id` (every call when None): its engine requests are aborted
        and it raises RolloutAborted. Returns once they have ended (at most `wait_s`): {"aborted": calls,
        "in_flight": admitted requests left}. The driver calls this when its own deadline for a call passes,
        so an abandoned call never runs on into the next weight sync."""
        ids = list(self._calls) if call_id is None else [c for c in (call_id,) if c in self._calls]
        tasks = []
        for c in ids:
            task = self._calls.get(c)
            if task is not None and not task.done() and task is not asyncio.current_task():
                self._aborted.add(c)
                task.cancel()
                tasks.append(task)
        if tasks:
            await asyncio.wait(tasks, timeout=wait_s)
        return {"aborted": len(tasks), "in_flight": self.gate.in_flight}

    def count_requests(self, requests: int) -> None:
        """Add `requests` engine requests to the worker's count (`health()["requests"]`): a response form's
        interface to the worker's bookkeeping."""
        self._counters["requests"] += requests

    def allowed_token_ids(self, num_candidates: int) -> Optional[list]:
        """Constrained decoding (`rollout.constrain_index`): for a model whose prompt ends in the answer prefix,
        the token ids of the indices 0..N-1 (the response is exactly one of them); None otherwise (the whole
        vocabulary). EOS is not among them: allowed first, it became an absorbing empty answer (a run's held-out
        accuracy fell 0.455 -> 0.26 from step 75 on)."""
        if not self.cfg.constrain_index or not answer_prefix(self.tokenizer):
            return None
        ids = index_token_ids(self.tokenizer, num_candidates)
        if ids is None:
            raise ValueError(f"rollout.constrain_index needs one token per index, but this tokenizer splits "
                             f"some of 0..{num_candidates - 1}; set rollout.constrain_index=false")
        return ids

    async def run_request(self, prompt_token_ids: list, params, tag: str = "w") -> tuple:
        """One engine request through the admission gate: (final RequestOutput, policy version it ran under,
        queue seconds, generate seconds). Every other generation path (sampling G responses, fixed-completion
        log-probs, the serving deployment's raw completions) goes through here, so a weight update never
        overlaps a request."""
        queued = time.perf_counter()
        async with self.gate.admitted() as version:
            start = time.perf_counter()
            final = None
            async for out in self.engine.generate({"prompt_token_ids": list(prompt_token_ids)}, params,
                                                  f"{tag}{self.worker_index}-{uuid.uuid4().hex}"):
                final = out
        return final, version, start - queued, time.perf_counter() - start

    async def stream_request(self, prompt_token_ids: list, params, tag: str = "s"):
        """One engine request through the admission gate, as the engine produces it: yields (RequestOutput, policy
        version it runs under); `params.output_kind` decides whether each output holds the new tokens only (DELTA)
        or all so far. Closing the generator early (a client that went away) aborts the engine request."""
        async with self.gate.admitted() as version:
            outputs = self.engine.generate({"prompt_token_ids": list(prompt_token_ids)}, params,
                                           f"{tag}{self.worker_index}-{uuid.uuid4().hex}")
            async with contextlib.aclosing(outputs):  # closed early: vLLM aborts the request
                async for out in outputs:
                    yield out, version


    async def sample_solutions(self, problems: list, n: int, temperature: float, max_tokens: int,
                               seed: Optional[int] = None, call_id: Optional[str] = None) -> list:
        """A generator's solutions: ``n`` samples for each ``(problem_id, problem_text, domain)`` of
        `problems`, one request with n samples each, all in flight at once (model-sampled candidates,
        docs/data.md). The prompt is `core.chat.format_generator_prompt` (no constrained decoding, no answer
        prefix). ``seed``: each request gets ``seed + its position``, so a rerun samples the same texts.

        Returns one list of ``n`` Rollouts per problem, in order (``response_text`` = the generated text,
        ``prompt_id`` = the problem id, behaviour log-probs included). Raises RolloutTimeout past the call's
        deadline (as `generate`) and RolloutAborted on `abort(call_id)`."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        from core.chat import generator_prompt_token_ids

        gate = TokenGate(self._step_token_budget() if seed is not None and on_cpu() else None)

        async def one(i: int, prompt_ids: list, problem_id: str, text: str, domain: str) -> list:
            params = SamplingParams(n=n, temperature=temperature, top_p=1.0, max_tokens=max_tokens, logprobs=0,
                                    seed=None if seed is None else seed + i, stop_token_ids=self.end_ids,
                                    output_kind=RequestOutputKind.FINAL_ONLY)
            async with gate.hold(n * (len(prompt_ids) + 1)):
                final, version, _, seconds = await self.run_request(prompt_ids, params, tag="gen")
            self._counters["requests"] += 1
            return [Rollout(prompt_id=problem_id, prompt_token_ids=prompt_ids, response_token_ids=list(c.token_ids),
                            behaviour_logprobs=[c.logprobs[j][t].logprob for j, t in enumerate(c.token_ids)],
                            response_text=c.text, policy_version=version, finish_reason=str(c.finish_reason),
                            timings={"generate_s": seconds})
                    for c in sorted(final.outputs, key=lambda c: c.index)]

        from core.deadlines import generate_deadline_s

        prompts = [list(generator_prompt_token_ids(self.tokenizer, text, domain)) for _, text, domain in problems]
        calls = [one(i, ids, *problem) for i, (ids, problem) in enumerate(zip(prompts, problems))]
        deadline = generate_deadline_s(self.cfg, max(map(len, prompts), default=0), len(problems) * n, max_tokens)
        return await self._bounded(calls, deadline, call_id, f"sampling {len(problems)} problems")

    def _step_token_budget(self) -> Optional[int]:
        """Tokens the engine schedules in one step (vLLM's max_num_batched_tokens); None when unknown."""
        try:
            return int(self.engine.vllm_config.scheduler_config.max_num_batched_tokens)
        except (AttributeError, TypeError, ValueError):
            return None

    async def compute_logprobs(self, prompt_token_ids: list, response_token_ids: list) -> list:
        """Temperature-1 log-probs the engine's current weights give each of `response_token_ids`
        after `prompt_token_ids` (prompt log-probs of the concatenation). Returns len(response) floats.
        """
        from vllm import SamplingParams

        ids = list(prompt_token_ids) + list(response_token_ids)
        params = SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0, detokenize=False)
        final = (await self.run_request(ids, params, tag="lp"))[0]
        start = len(prompt_token_ids)
        return [final.prompt_logprobs[p][ids[p]].logprob for p in range(start, len(ids))]

    # ---- weight updates (actors/weight_sync/) -----------------------------------------------------------
    def _receiver(self, cls):
        """The receiving side `cls` of a weight transport, made on first use and held."""
        if cls not in self._receivers:
            self._receivers[cls] = cls(self.weight_update)
        return self._receivers[cls]

    async def weight_call(self, receiver: str, method: str, *args):
        """Any transport's rollout-side call: `method(*args)` of the receiver class `receiver` names
        ("package.module:Class", a transport of your own: actors/weight_sync/transport.py), held like the built-in
        ones; awaited when it is a coroutine."""
        from core.plugins import load_object

        result = getattr(self._receiver(load_object(receiver, "weight_sync.transport.name")), method)(*args)
        return await result if inspect.isawaitable(result) else result

    async def update_weights_from_object_store(self, weights: dict, version: int) -> dict:
        """object_store transport: load a full HF-named state dict (name -> numpy array) and set the policy version
        (ObjectStoreReceiver; the serving replicas load the board's weights through it too)."""
        return await self._receiver(ObjectStoreReceiver).update_weights_from_object_store(weights, version)

    async def init_weight_update_group(self, master_address: str, master_port: int, rank_offset: int,
                                       world_size: int, backend: str = "nccl", timeout_s: float = 300.0,
                                       group_id: str = "") -> None:
        """Broadcast transports: join the learner's weight group as rank `rank_offset` (BroadcastReceiver)."""
        await self._receiver(BroadcastReceiver).init_weight_update_group(master_address, master_port, rank_offset,
                                                                          world_size, backend, timeout_s, group_id)

    def weight_group(self) -> Optional[str]:
        """Broadcast transports: the id of the weight group this engine belongs to, or None (BroadcastReceiver)."""
        return self._receiver(BroadcastReceiver).weight_group()

    async def update_weights_broadcast(self, metadata: list, version: int, group_id: str, timeout_s: float) -> dict:
        """Broadcast transports: receive the learner's broadcast of `metadata` in group `group_id`
        (BroadcastReceiver)."""
        return await self._receiver(BroadcastReceiver).update_weights_broadcast(metadata, version, group_id,
                                                                                 timeout_s)

    async def update_weights_ipc(self, exported: list, version: int) -> dict:
        """ipc transport: load the learner's IPC buckets (IpcReceiver)."""
        return await self._receiver(IpcReceiver).update_weights_ipc(exported, version)

    def update_state(self) -> dict:
        """The last weight update's outcome (EngineUpdate.state)."""
        return self.weight_update.state()

    async def _rpc(self, method: str, *args):
        """collective_rpc on the (single) worker; returns that worker's result."""
        results = await self.engine.collective_rpc(method, args=args)
        return results[0]

    async def weights_checksum(self) -> dict:
        """The engine's parameter checksum (debugging: do two engines hold the same weights?)."""
        return await self._rpc("weights_checksum")

    # ---- status and lifecycle ---------------------------------------------------------------------
    @property
    def version(self) -> int:
        """The policy version of the engine's weights (the gate's)."""
        return self.gate.version

    @version.setter
    def version(self, value: int) -> None:
        self.gate.version = value

    def policy_version(self) -> int:
        return self.version

    async def pause(self) -> None:
        """Stop admitting requests and wait until every admitted request has finished. Nests."""
        await self.gate.pause()

    async def resume(self) -> None:
        """Undo one pause(); requests waiting at the gate run when no pause is left."""
        await self.gate.resume()

    async def health(self) -> dict:
        """{"ok", "version", "paused", "in_flight", "error", counters...}; ok False if the engine died."""
        gate = self.gate
        ok, error = self.engine is not None and not self.engine.errored, gate.broken
        if ok:
            try:
                await self.engine.check_health()
            except Exception as e:  # reported, not raised: health is a probe
                ok, error = False, repr(e)
        return {"ok": ok and not gate.broken, "version": gate.version, "paused": gate.paused,
                "in_flight": gate.in_flight, "error": error, "worker_index": self.worker_index,
                "start_seconds": self.start_seconds, **self._counters}

    async def shutdown(self) -> None:
        """Shut the engine and its processes down (frees its /dev/shm). Idempotent."""
        self._shutdown_now()

    def _shutdown_now(self) -> None:
        engine, self.engine = getattr(self, "engine", None), None
        if getattr(self, "gate", None) is not None:
            self.gate.close()
        if engine is not None:
            engine.shutdown(timeout=SHUTDOWN_TIMEOUT_S)

    def __del__(self):
        try:
            self._shutdown_now()
        except Exception:
            pass

"""The selection service's requests: replica settings, validation of /v1/select bodies, and client errors.

Pure apart from FastAPI's JSONResponse: no engine, no Ray (tests/actors/test_serving.py checks the validation
table without starting anything). Every client error names the offending field as a JSON path.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from fastapi.responses import JSONResponse

from core.algo.genselect import strip_thinking


def unreserved_gpu_error(visible_cuda_devices: int, reserved_gpu_ids: list):
    """The error of a replica about to start vLLM while it sees GPUs but reserved none (Ray sets a replica's
    CUDA_VISIBLE_DEVICES only for the GPUs it reserved: vLLM would take the node's first GPU, which Ray may give to
    another actor); None when it may start."""
    if visible_cuda_devices > 0 and not reserved_gpu_ids:
        return (f"this replica sees {visible_cuda_devices} GPUs but reserved none: set serve.num_gpus (or "
                f"ray_actor_options.num_gpus in a Serve config file) to the GPUs one engine uses, e.g. 1")
    return None


@dataclass
class SelectorSettings:
    """Everything a replica needs, resolved by driver/serve.py (plain values: travels as Serve init args)."""
    model: str
    rollout: Any                      # core.config.RolloutConfig of the engine
    name: str = "genselect-selector"  # the model id of the OpenAI endpoints (GET /v1/models): the Serve app's name
    dtype: str = "float32"
    seed: int = 0
    policy_version: int = 0           # version of the weights in `model`
    board: str = ""                   # WeightBoard actor name ('' = no live weights)
    window: int = 8                   # most candidates per selection prompt (the trained N)
    max_prompt_tokens: int = 2048
    max_response_tokens: int = 48
    temperature: float = 1.0          # sampling temperature when samples > 1 (samples == 1: greedy)
    orders: int = 1                   # default reading of a group: 1 (sampled judgments) or 2 (both orders)
    selection: str = "knockout"       # default procedure: "knockout" or "round_robin" (core/algo/round_robin.py)
    max_round_robin_candidates: int = 32  # most candidates a round robin takes (N (N - 1) judgments)
    max_candidates: int = 256
    max_candidate_chars: int = 4000
    max_problem_chars: int = 16000
    max_samples: int = 16
    max_body_bytes: int = 4 << 20
    max_completion_tokens: int = 512
    reasoning_parser: str = ""        # vLLM reasoning parser of the chat endpoint (actors/serving/reasoning.py);
                                      # '': none
    request_timeout_s: float = 120.0
    admin_token: str = ""
    response_form: Any = None         # how a selection is sampled (actors/rollout/response_forms.py); None: free text
    extra: dict = field(default_factory=dict)


class RequestError(Exception):
    """A client error: HTTP `status`, the offending `field`, a message."""

    def __init__(self, status: int, field: str, message: str):
        super().__init__(message)
        self.status, self.field, self.message = status, field, message


def error_response(status: int, field: str, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "field": field, "type": kind}}, status_code=status)


def stream_error(status: int, field: str, message: str, kind: str) -> str:
    """The error of a stream that has begun (its 200 is sent), as Server-Sent Events: the error body, with the
    status it would have had as `code`, then `[DONE]` (the `openai` client raises it as an APIError)."""
    body = {"error": {"message": message, "field": field, "type": kind, "code": status}}
    return f"data: {json.dumps(body)}\n\ndata: [DONE]\n\n"


# ---- request validation (pure, no engine) ---------------------------------------------------------------
_SELECT_FIELDS = {"problem", "candidates", "domain", "samples", "temperature", "orders", "selection", "answers"}
SELECTIONS = ("knockout", "round_robin")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_select(body: bytes, s: SelectorSettings) -> dict:
    """Validate a /v1/select body; return {problem, candidates, domain, samples, temperature, orders}.
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
    selection = data.get("selection", s.selection)
    if selection not in SELECTIONS:
        raise RequestError(422, "selection", f"must be one of {list(SELECTIONS)}, got {selection!r}")
    answers = _answers(data, candidates, selection, s)
    if selection == "round_robin":
        if len(candidates) > s.max_round_robin_candidates:
            raise RequestError(413, "candidates", f"{len(candidates)} candidates; a round robin takes at most "
                                                  f"{s.max_round_robin_candidates} (use selection=knockout)")
        if data.get("orders", 2) != 2:
            raise RequestError(422, "orders", "a round robin reads every pair in both orders: orders must be 2 or "
                                              "left out")
    orders = data.get("orders", 2 if selection == "round_robin" else s.orders)
    if not _is_int(orders) or orders not in (1, 2):
        raise RequestError(422, "orders", f"must be 1 (sampled judgments) or 2 (each group read in both orders), "
                                          f"got {orders!r}")
    if orders == 2 and (samples > 1 or "temperature" in data):
        raise RequestError(422, "orders", "2 reads the log-prob of every index once per order: leave samples and "
                                          "temperature out")
    return {"problem": problem, "candidates": candidates, "domain": domain, "samples": samples,
            "temperature": float(temperature) if orders == 1 else 1.0, "orders": orders, "selection": selection,
            "answers": answers}


def _answers(data: dict, candidates: list, selection: str, s: SelectorSettings):
    """The optional `answers` field: one final answer (a string, or null for none) per candidate, pooled by the
    round robin (core/algo/round_robin.py); None when absent."""
    answers = data.get("answers")
    if answers is None:
        return None
    if selection != "round_robin":
        raise RequestError(422, "answers", "only a round robin reads answers: send selection='round_robin'")
    if not isinstance(answers, list) or len(answers) != len(candidates):
        raise RequestError(422, "answers", f"must be a list of {len(candidates)} strings or nulls, one per candidate")
    for i, a in enumerate(answers):
        if a is not None and not isinstance(a, str):
            raise RequestError(422, f"answers[{i}]", f"must be a string or null, got {type(a).__name__}")
        if a is not None and len(a) > s.max_candidate_chars:
            raise RequestError(413, f"answers[{i}]", f"{len(a)} characters; the limit is {s.max_candidate_chars}")
    return answers


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

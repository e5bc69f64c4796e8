"""The selection service's OpenAI-compatible endpoints, for clients that speak OpenAI's API (the `openai` SDK,
LangChain, LiteLLM, evaluation harnesses):

    GET  /v1/models             the served selector: id, the export folder it came from (`root`), policy_version
    POST /v1/completions        raw text in, generated text out (no chat template)
    POST /v1/chat/completions   messages rendered with the model's own chat template

Requests are parsed and answers built with vLLM's own pydantic types (`CompletionRequest`, `ChatCompletionRequest`,
`CompletionResponse`, `ChatCompletionResponse`, their `...StreamResponse` chunks, `ModelList`), so both have OpenAI's
shapes; every answer (every chunk of a stream) adds the policy version(s) of the weights that produced it.
Generation runs on the replica's `RolloutWorker` through its admission gate (`run_request`, `stream_request`), as
every other request does. Client errors are `RequestError`s: the same {"error": {"message", "field", "type"}} 4xx as
/v1/select (actors/serving/select_request.py); `model` must name the served selector (its id, or the folder it serves)
or be left out, else 404. Not supported, and refused naming the field: beam search, `echo`, `suffix`, tools,
`response_format` other than text, a request's own chat template, and chat with a model that has no chat template
(the plain tiny selector reads raw text: /v1/completions or /v1/select serve it).

`stream: true` answers with Server-Sent Events as OpenAI's API does: one `data: {chunk}` per piece the engine
produces (`chat.completion.chunk` with a `delta`, or `text_completion` with `text`), the last piece of each choice
with its `finish_reason`, a usage chunk (no choices) with `stream_options.include_usage`, then `data: [DONE]`. A
failure after the stream started is one `data: {"error": ...}` event before `[DONE]`
(actors/serving/selector_server.py). These endpoints sample the model's own text, streamed or not: a response form (e.g.
a forced judgment, actors/rollout/forced_judgment.py) needs the candidates of a selection prompt and applies to
/v1/select only.

With a reasoning parser (`serve.reasoning_parser`, actors/serving/reasoning.py) a chat answer's thinking is split out of
`content` into `reasoning_content` (and `reasoning`), in `message` and in each streamed `delta`.

Each function takes the replica (`actors.serving.selector_server.SelectorServer`): its settings `s`, `worker`,
`model_path`, `counters`, `started` and `reasoning_parser` (vLLM's parser class, or None).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
import warnings

from actors.serving import reasoning
from actors.serving.select_request import RequestError, _field_of, parse_json
from core.chat import has_chat_template

MAX_LOGPROBS = 5  # most alternatives per token (completions `logprobs`, chat `top_logprobs`)


def context_of(server) -> int:
    """The engine's context length in tokens (prompt + completion)."""
    return int(server.worker.engine.model_config.max_model_len)


def model_card(server) -> dict:
    """The served selector as an OpenAI model object, with its policy version and the folder it serves."""
    from vllm.entrypoints.serve.engine.protocol import ModelCard

    card = ModelCard(id=server.s.name, created=int(server.started), owned_by="genselect", root=server.model_path,
                     max_model_len=context_of(server))
    return {**card.model_dump(exclude_none=True), "policy_version": server.worker.version}


def model_list(server) -> dict:
    """GET /v1/models: the one model this service serves."""
    return {"object": "list", "data": [model_card(server)]}


# ---- shared request checks ---------------------------------------------------------------------------------
def _validate(cls, data: dict):
    """`cls.model_validate(data)`, every failure a 422 naming the field."""
    from pydantic import ValidationError

    try:
        return cls.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        raise RequestError(422, _field_of(err["loc"]), err["msg"]) from None
    except Exception as e:  # vLLM's own request checks (VLLMValidationError names its parameter)
        raise RequestError(422, getattr(e, "parameter", None) or "body", str(e)) from None


def _check_stream_fields(data: dict) -> None:
    """`stream` a boolean; `stream_options` an object, sent only with stream=true (422 naming the field)."""
    stream = data.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise RequestError(422, "stream", f"must be true or false, got {json.dumps(stream)}")
    options = data.get("stream_options")
    if options is not None and not stream:
        raise RequestError(422, "stream_options", "only with stream=true")
    if options is not None and not isinstance(options, dict):
        raise RequestError(422, "stream_options", 'must be an object, e.g. {"include_usage": true}')


def _parse(cls, server, body: bytes):
    """The request body as vLLM's request type `cls` (400 / 413 / 422 naming the field)."""
    data = parse_json(body, server.s.max_body_bytes)
    _check_stream_fields(data)
    return _validate(cls, data)


def _check_common(server, req, unsupported: dict) -> None:
    """The checks both generation endpoints make: `model`, the refused features, `n`."""
    served = {server.s.name, server.model_path, server.s.model}
    if req.model is not None and req.model not in served:
        raise RequestError(404, "model", f"model {req.model!r} is not served here; this service serves "
                                         f"{server.s.name!r} (GET /v1/models)")
    for name, reason in unsupported.items():
        if reason:
            raise RequestError(422, name, reason)
    if not 1 <= (req.n or 1) <= server.s.max_samples:
        raise RequestError(422, "n", f"must be in 1..{server.s.max_samples}")


def _check_max_tokens(server, field: str, max_tokens: int, prompt_tokens: int, where: str) -> None:
    if not 1 <= max_tokens <= server.s.max_completion_tokens:
        raise RequestError(422, field, f"must be in 1..{server.s.max_completion_tokens}")
    if prompt_tokens + max_tokens > context_of(server):
        raise RequestError(413, where, f"{prompt_tokens} tokens + {field} {max_tokens} exceed the model's context "
                                       f"of {context_of(server)}")


def _sampling_params(req, max_tokens: int):
    try:
        return req.to_sampling_params(max_tokens, {})
    except Exception as e:  # vLLM's own parameter checks (e.g. temperature < 0)
        raise RequestError(422, getattr(e, "parameter", None) or "body", str(e)) from None


async def _generate(server, prompts: list, params, tag: str) -> list:
    """One engine request per token-id prompt, all at once: [(final RequestOutput, policy version)]."""
    calls = [server.worker.run_request(ids, params, tag=tag) for ids in prompts]
    outs = await asyncio.wait_for(asyncio.gather(*calls), server.s.request_timeout_s)
    return [(final, version) for final, version, _, _ in outs]


def _usage(prompt_tokens: int, completion_tokens: int):
    from vllm.entrypoints.serve.engine.protocol import UsageInfo

    return UsageInfo(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                     total_tokens=prompt_tokens + completion_tokens)


def _with_versions(response, versions: set) -> dict:
    return {**response.model_dump(exclude_none=True), "policy_version": max(versions),
            "policy_versions": sorted(versions)}


# ---- streaming (Server-Sent Events) --------------------------------------------------------------------------
DONE = "data: [DONE]\n\n"


def sse(payload: dict) -> str:
    """One Server-Sent Event carrying `payload` as JSON."""
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


def _include_usage(req) -> bool:
    return bool(req.stream_options and req.stream_options.include_usage)


async def _engine_stream(server, prompt_ids: list, params, tag: str):
    """(RequestOutput, policy version) as the engine produces them, the whole request within
    `serve.request_timeout_s` (asyncio.TimeoutError past it, the engine request aborted). Closing this generator
    early, as a client that went away does, aborts the engine request."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + server.s.request_timeout_s
    outputs = server.worker.stream_request(prompt_ids, params, tag=tag)
    async with contextlib.aclosing(outputs):
        while True:
            try:
                yield await asyncio.wait_for(outputs.__anext__(), max(0.0, deadline - loop.time()))
            except StopAsyncIteration:
                return
            except asyncio.TimeoutError:
                raise asyncio.TimeoutError(f"the stream outlived serve.request_timeout_s "
                                           f"({server.s.request_timeout_s:g} s)") from None


def _chunk(response, versions: set) -> str:
    """A stream chunk as its event: every choice names its `finish_reason`, null until its last piece (OpenAI's
    chunks do; the `openai` client's completion type requires the key)."""
    payload = _with_versions(response, versions)
    for choice in payload["choices"]:
        choice.setdefault("finish_reason", None)
    return sse(reasoning.name_reasoning_content(payload))


def _stream_id(prefix: str) -> tuple:
    """(id, created) shared by every chunk of one stream."""
    return f"{prefix}-{uuid.uuid4().hex}", int(time.time())


# ---- /v1/completions -----------------------------------------------------------------------------------------
def _prompt_ids(server, req) -> list:
    """The request's prompts as token-id lists (a string, a list of strings, token ids, or a list of those)."""
    prompts = req.prompt
    if prompts is None or prompts == "" or prompts == []:
        raise RequestError(422, "prompt", "required, a string, a list of strings or token ids")
    if isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
        prompts = [prompts]
    if len(prompts) > server.s.max_candidates:
        raise RequestError(413, "prompt", f"{len(prompts)} prompts; the limit is {server.s.max_candidates}")
    tokenizer, ids = server.worker.tokenizer, []
    for i, p in enumerate(prompts):
        tokens = list(p) if isinstance(p, list) else tokenizer(p, add_special_tokens=False)["input_ids"]
        if not tokens:
            raise RequestError(422, f"prompt[{i}]", "is empty")
        if isinstance(p, list) and max(tokens) >= len(tokenizer):
            raise RequestError(422, f"prompt[{i}]", f"token id {max(tokens)} is outside the vocabulary")
        ids.append(tokens)
    return ids


def _completion_logprobs(tokenizer, c):
    from vllm.entrypoints.openai.completion.protocol import CompletionLogProbs

    return CompletionLogProbs(
        tokens=[tokenizer.decode([t]) for t in c.token_ids],
        token_logprobs=[c.logprobs[j][t].logprob for j, t in enumerate(c.token_ids)],
        top_logprobs=[{tokenizer.decode([tid]): lp.logprob for tid, lp in step.items()} for step in c.logprobs],
        text_offset=[])


def _completion_request(server, body: bytes) -> tuple:
    """(request, prompts as token ids, SamplingParams) of a /v1/completions body, every check made."""
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    req = _parse(CompletionRequest, server, body)
    _check_common(server, req, {"echo": req.echo and "not supported", "suffix": req.suffix and "not supported",
                                "use_beam_search": req.use_beam_search and "not supported"})
    if req.logprobs is not None and not 0 <= req.logprobs <= MAX_LOGPROBS:
        raise RequestError(422, "logprobs", f"must be in 0..{MAX_LOGPROBS}")
    max_tokens = req.max_tokens if req.max_tokens is not None else 16
    ids = _prompt_ids(server, req)
    for i, tokens in enumerate(ids):
        _check_max_tokens(server, "max_tokens", max_tokens, len(tokens), f"prompt[{i}]")
    return req, ids, _sampling_params(req, max_tokens)


async def completions(server, body: bytes):
    """POST /v1/completions: OpenAI's completion object plus `policy_version` / `policy_versions`; with
    stream=true, an async iterator of its Server-Sent Events (`completion_stream`)."""
    from vllm.entrypoints.openai.completion.protocol import CompletionResponse, CompletionResponseChoice

    req, ids, params = _completion_request(server, body)
    server.counters["completions"] += 1
    if req.stream:
        return completion_stream(server, req, ids, params)
    choices, completion_tokens, versions = [], 0, set()
    for final, version in await _generate(server, ids, params, "c"):
        versions.add(version)
        for c in sorted(final.outputs, key=lambda c: c.index):
            completion_tokens += len(c.token_ids)
            logprobs = None
            if req.logprobs is not None and c.logprobs is not None:
                logprobs = _completion_logprobs(server.worker.tokenizer, c)
            choices.append(CompletionResponseChoice(index=len(choices), text=c.text, logprobs=logprobs,
                                                    finish_reason=c.finish_reason, stop_reason=c.stop_reason))
    response = CompletionResponse(model=server.s.name, choices=choices,
                                  usage=_usage(sum(len(t) for t in ids), completion_tokens))
    return _with_versions(response, versions)


async def completion_stream(server, req, ids: list, params):
    """The Server-Sent Events of a streamed completion: a `text_completion` chunk per piece of text, choice i of
    prompt p numbered p * n + i (as in the non-streamed answer), every prompt's request in flight at once."""
    from vllm.entrypoints.openai.completion.protocol import CompletionResponseStreamChoice, CompletionStreamResponse
    from vllm.utils.async_utils import merge_async_iterators

    n, tokenizer = req.n or 1, server.worker.tokenizer
    stream_id, created = _stream_id("cmpl")
    completion_tokens, versions = 0, set()
    async for p, (out, version) in merge_async_iterators(*[_engine_stream(server, t, params, "c") for t in ids]):
        versions.add(version)
        for c in out.outputs:
            completion_tokens += len(c.token_ids)
            if not c.text and c.finish_reason is None:
                continue
            logprobs = _completion_logprobs(tokenizer, c) if req.logprobs is not None and c.logprobs else None
            choice = CompletionResponseStreamChoice(index=p * n + c.index, text=c.text, logprobs=logprobs,
                                                    finish_reason=c.finish_reason, stop_reason=c.stop_reason)
            yield _chunk(CompletionStreamResponse(id=stream_id, created=created, model=server.s.name,
                                                  choices=[choice]), {version})
    if _include_usage(req):
        usage = _usage(sum(len(t) for t in ids), completion_tokens)
        yield _chunk(CompletionStreamResponse(id=stream_id, created=created, model=server.s.name, choices=[],
                                              usage=usage), versions)
    yield DONE


# ---- /v1/chat/completions ------------------------------------------------------------------------------------
def _text_messages(messages: list) -> list:
    """The request's messages as {"role", "content": str} (text content parts joined; others refused)."""
    out = []
    for i, m in enumerate(messages):
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") != "text":
                    raise RequestError(422, f"messages[{i}].content[{j}]", "only text parts are supported")
                parts.append(part.get("text", ""))
            content = "".join(parts)
        out.append({"role": m["role"], "content": content if content is not None else ""})
    return out


def chat_prompt_ids(server, req) -> list:
    """The token ids of `req.messages` rendered by the model's chat template (422 where it has none)."""
    tokenizer = server.worker.tokenizer
    if not has_chat_template(tokenizer):
        raise RequestError(422, "messages", "this model has no chat template (a selector that reads raw text): send "
                                            "text to /v1/completions, or a problem and candidates to /v1/select")
    if not req.messages:
        raise RequestError(422, "messages", "required, a non-empty list of messages")
    messages = _text_messages(req.messages)
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=req.add_generation_prompt,
                                             continue_final_message=req.continue_final_message,
                                             **(req.chat_template_kwargs or {}))
    except Exception as e:  # the template's own refusals (roles out of order, raise_exception(...))
        raise RequestError(422, "messages", f"the model's chat template refused the messages: {e}") from None
    return tokenizer(text, add_special_tokens=req.add_special_tokens)["input_ids"]


def _chat_logprobs(tokenizer, c, top: int):
    from vllm.entrypoints.openai.chat_completion.protocol import (ChatCompletionLogProb, ChatCompletionLogProbs,
                                                                  ChatCompletionLogProbsContent)

    def entry(cls, token_id: int, logprob: float, **kw):
        token = tokenizer.decode([token_id])
        return cls(token=token, logprob=logprob, bytes=list(token.encode("utf-8")), **kw)

    content = []
    for j, t in enumerate(c.token_ids):
        ranked = sorted(c.logprobs[j].items(), key=lambda kv: -kv[1].logprob)[:top]
        content.append(entry(ChatCompletionLogProbsContent, t, c.logprobs[j][t].logprob,
                             top_logprobs=[entry(ChatCompletionLogProb, tid, lp.logprob) for tid, lp in ranked]))
    return ChatCompletionLogProbs(content=content)


def _chat_max_tokens(server, req, prompt_tokens: int) -> int:
    with warnings.catch_warnings():  # `max_tokens` is a deprecated field of the request type, still accepted
        warnings.simplefilter("ignore", DeprecationWarning)
        given = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    field = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
    if given is None:  # OpenAI's default: up to the context; here also up to serve.max_completion_tokens
        given = max(1, min(server.s.max_completion_tokens, context_of(server) - prompt_tokens))
    _check_max_tokens(server, field, given, prompt_tokens, "messages")
    return given


def _chat_request(server, body: bytes) -> tuple:
    """(request, prompt token ids, SamplingParams) of a /v1/chat/completions body, every check made."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    req = _parse(ChatCompletionRequest, server, body)
    text_format = req.response_format is None or getattr(req.response_format, "type", "text") == "text"
    _check_common(server, req, {
        "tools": bool(req.tools) and "tool calls are not supported",
        "response_format": not text_format and "only text responses are supported",
        "chat_template": req.chat_template is not None and "not accepted: the model's own chat template is used",
        "use_beam_search": req.use_beam_search and "not supported", "echo": req.echo and "not supported"})
    if req.logprobs and not 0 <= (req.top_logprobs or 0) <= MAX_LOGPROBS:
        raise RequestError(422, "top_logprobs", f"must be in 0..{MAX_LOGPROBS}")
    ids = chat_prompt_ids(server, req)
    return req, ids, _sampling_params(req, _chat_max_tokens(server, req, len(ids)))


def _parser(server, req, ids: list):
    """A fresh reasoning parser for one choice (None where the service has none)."""
    return reasoning.new_parser(getattr(server, "reasoning_parser", None), server.worker.tokenizer, req, ids)


async def chat_completions(server, body: bytes):
    """POST /v1/chat/completions: OpenAI's chat.completion object plus `policy_version` / `policy_versions`; with
    stream=true, an async iterator of its Server-Sent Events (`chat_stream`)."""
    from vllm.entrypoints.openai.chat_completion.protocol import (ChatCompletionResponse,
                                                                  ChatCompletionResponseChoice, ChatMessage)

    req, ids, params = _chat_request(server, body)
    server.counters["chat"] += 1
    if req.stream:
        return chat_stream(server, req, ids, params)
    [(final, version)] = await _generate(server, [ids], params, "chat")
    tokenizer, choices = server.worker.tokenizer, []
    for c in sorted(final.outputs, key=lambda c: c.index):
        logprobs = _chat_logprobs(tokenizer, c, req.top_logprobs or 0) if req.logprobs and c.logprobs else None
        thinking, content = reasoning.split(_parser(server, req, ids), req, c.text, c.token_ids)
        message = ChatMessage(role="assistant", content=content, reasoning=thinking)
        choices.append(ChatCompletionResponseChoice(index=c.index, message=message, logprobs=logprobs,
                                                    finish_reason=c.finish_reason, stop_reason=c.stop_reason))
    response = ChatCompletionResponse(model=server.s.name, choices=choices,
                                      usage=_usage(len(ids), sum(len(c.token_ids) for c in final.outputs)))
    return reasoning.name_reasoning_content(_with_versions(response, {version}))


def _chat_piece(tokenizer, parser, req, ids: list, c):
    """The stream choice of one piece `c` of a choice (its text and tokens since the last piece), split by the
    reasoning parser; None when there is nothing to send yet (an empty piece, a marker the parser holds back)."""
    from vllm.entrypoints.generate.base.protocol import DeltaMessage
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionResponseStreamChoice

    finished = c.finish_reason is not None
    thinking, content = reasoning.split_delta(parser, req, ids, c.text, c.token_ids, finished)
    logprobs = _chat_logprobs(tokenizer, c, req.top_logprobs or 0) if req.logprobs and c.logprobs else None
    if thinking is None and not content and not finished and logprobs is None:
        return None
    return ChatCompletionResponseStreamChoice(index=c.index, delta=DeltaMessage(content=content, reasoning=thinking),
                                              logprobs=logprobs, finish_reason=c.finish_reason,
                                              stop_reason=c.stop_reason)


async def chat_stream(server, req, ids: list, params):
    """The Server-Sent Events of a streamed chat: per choice a first chunk with the assistant's role (once the
    engine has admitted the request: its policy version is known), then a `chat.completion.chunk` per piece the
    engine produces (`_chat_piece`), the last one with the choice's `finish_reason`."""
    from vllm.entrypoints.generate.base.protocol import DeltaMessage
    from vllm.entrypoints.openai.chat_completion.protocol import (ChatCompletionResponseStreamChoice,
                                                                  ChatCompletionStreamResponse)

    n, tokenizer = req.n or 1, server.worker.tokenizer
    stream_id, created = _stream_id("chatcmpl")
    parsers = [_parser(server, req, ids) for _ in range(n)]

    def chunk(choices: list, version, usage=None) -> str:
        return _chunk(ChatCompletionStreamResponse(id=stream_id, created=created, model=server.s.name,
                                                   choices=choices, usage=usage), {version})

    roles = [ChatCompletionResponseStreamChoice(index=i, delta=DeltaMessage(role="assistant", content=""))
             for i in range(n)]
    completion_tokens, version = 0, None
    async for out, version in _engine_stream(server, ids, params, "chat"):
        if roles:
            yield chunk(roles, version)
            roles = []
        for c in out.outputs:
            completion_tokens += len(c.token_ids)
            piece = _chat_piece(tokenizer, parsers[c.index], req, ids, c)
            if piece is not None:
                yield chunk([piece], version)
    if _include_usage(req):
        yield chunk([], version, _usage(len(ids), completion_tokens))
    yield DONE

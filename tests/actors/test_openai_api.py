"""The OpenAI endpoints (actors/serving/openai_api.py) and the service as a user runs it (`python -m driver.serve`).

First without an engine: the chat request table (every bad request a 4xx naming the field, before any engine
call) and the answer's shape, checked with the official `openai` package's own types, over a replica whose
engine is scripted; streams over it (chunks, [DONE], a closed stream, a deadline) and vLLM's reasoning parsers on
scripted tokens. Then the real thing: `python -m driver.serve` on the tiny model with a chat template and
`<think>` tokens added, served with a reasoning parser, queried with the `openai` client (models, completions,
chat, errors, streams equal to the whole answers, a closed stream's request aborted); then that server's guard is
SIGKILLed: nothing it started survives (HAProxy included), and a new server comes up on the same ports.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import openai
import psutil
import pytest

from actors.serving import openai_api
from actors.serving.select_request import RequestError, SelectorSettings
from core.env import ROOT
from core.net import free_port

# a chat template for the tiny model (which has none): one `role: content` line per message
TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")
USER = [{"role": "user", "content": "What is 2 + 2?"}]
PROMPT = "Problem: what is 3 + 4?"
LONG = 2000  # the served serve.max_completion_tokens: a generation a closed stream cuts short


@pytest.fixture(scope="module")
def chat_model(rollout_model_path, tmp_path_factory) -> str:
    """The tiny model's folder with `TEMPLATE` as its chat template, and `<think>` and `</think>` among its tokens
    (plain added tokens, as DeepSeek-R1's and Qwen3's are: what vLLM's `<think>` reasoning parsers look for; the
    embeddings grown by two rows)."""
    from tokenizers import AddedToken
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path_factory.mktemp("chat") / "tiny-chat"
    shutil.copytree(rollout_model_path, folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in ("<think>", "</think>")])
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    model.resize_token_embeddings(len(tokenizer))
    model.save_pretrained(folder)
    return str(folder)


# ---- without an engine --------------------------------------------------------------------------------------
class ScriptedEngine:
    """`run_request` and `stream_request` as RolloutWorker's: answer every choice with the same scripted tokens (the
    stream one token a piece), record the prompts and the streams closed before their end."""

    def __init__(self, tokenizer, version: int = 3, text: str = " 4"):
        self.tokenizer, self.version, self.text, self.prompts, self.closed_early = tokenizer, version, text, [], 0
        self.seconds_a_token = 0.0
        self.engine = SimpleNamespace(model_config=SimpleNamespace(max_model_len=64))

    def _output(self, i: int, ids: list, params, finish_reason):
        steps = [{t: SimpleNamespace(logprob=-0.25), t + 1: SimpleNamespace(logprob=-1.5)} for t in ids]
        return SimpleNamespace(index=i, text=self.tokenizer.decode(ids), token_ids=ids,
                               logprobs=steps if params.logprobs is not None else None,
                               finish_reason=finish_reason, stop_reason=None)

    def _ids(self, params) -> list:
        return self.tokenizer(self.text, add_special_tokens=False)["input_ids"][:params.max_tokens]

    async def run_request(self, prompt_token_ids, params, tag="w"):
        self.prompts.append(list(prompt_token_ids))
        outputs = [self._output(i, self._ids(params), params, "length") for i in range(params.n)]
        return SimpleNamespace(outputs=outputs), self.version, 0.0, 0.0

    async def stream_request(self, prompt_token_ids, params, tag="s"):
        self.prompts.append(list(prompt_token_ids))
        ids, finished = self._ids(params), False
        try:
            for j, token in enumerate(ids):
                last = j == len(ids) - 1
                yield SimpleNamespace(outputs=[self._output(i, [token], params, "length" if last else None)
                                               for i in range(params.n)]), self.version
                await asyncio.sleep(self.seconds_a_token)
            finished = True
        finally:
            self.closed_early += not finished


def _replica(model: str, text: str = " 4", parser: str = "", tokenizer=None) -> SimpleNamespace:
    from actors.serving import reasoning
    from transformers import AutoTokenizer

    s = SelectorSettings(model=model, rollout=None, max_samples=4, max_completion_tokens=32, max_body_bytes=10_000)
    tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
    return SimpleNamespace(s=s, worker=ScriptedEngine(tokenizer, text=text), model_path=model,
                           counters={"completions": 0, "chat": 0}, started=time.time(),
                           reasoning_parser=reasoning.parser_class(parser, tokenizer))


def _chat(replica, body):
    return asyncio.run(openai_api.chat_completions(replica, body if isinstance(body, bytes) else
                                                   json.dumps(body).encode()))


def _events(replica, handler, body: dict) -> list:
    """The Server-Sent Events of a streamed request, `[DONE]` as the string."""
    async def collect():
        return [e async for e in await handler(replica, json.dumps({**body, "stream": True}).encode())]

    events = asyncio.run(collect())
    assert all(e.startswith("data: ") and e.endswith("\n\n") for e in events), events
    return [e[6:-2] if e[6:-2] == "[DONE]" else json.loads(e[6:-2]) for e in events]


CHAT_BAD = [  # (body, status, field)
    (b"{oops", 400, "body"),
    ({}, 422, "messages"),
    ({"messages": "hi"}, 422, "messages"),
    ({"messages": []}, 422, "messages"),
    ({"messages": USER, "model": "gpt-4o"}, 404, "model"),
    ({"messages": USER, "stream": "yes"}, 422, "stream"),
    ({"messages": USER, "stream": 1}, 422, "stream"),
    ({"messages": USER, "stream_options": {"include_usage": True}}, 422, "stream_options"),
    ({"messages": USER, "stream": False, "stream_options": {"include_usage": True}}, 422, "stream_options"),
    ({"messages": USER, "stream": True, "stream_options": "usage"}, 422, "stream_options"),
    ({"messages": USER, "stream": True, "n": 5}, 422, "n"),
    ({"messages": USER, "tools": [{"type": "function", "function": {"name": "f"}}]}, 422, "tools"),
    ({"messages": USER, "response_format": {"type": "json_object"}}, 422, "response_format"),
    ({"messages": USER, "chat_template": "{{ 1 }}"}, 422, "chat_template"),
    ({"messages": USER, "n": 5}, 422, "n"),
    ({"messages": USER, "max_tokens": 0}, 422, "max_tokens"),
    ({"messages": USER, "max_completion_tokens": 33}, 422, "max_completion_tokens"),
    ({"messages": USER, "max_tokens": "many"}, 422, "max_tokens"),
    ({"messages": USER, "logprobs": True, "top_logprobs": 6}, 422, "top_logprobs"),
    ({"messages": USER, "temperature": -1}, 422, "temperature"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]},
     422, "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": "1 2 3 " * 30}], "max_tokens": 8}, 413, "messages"),
]


@pytest.mark.parametrize("body,status,field", CHAT_BAD, ids=[f"{i}-{b[2]}" for i, b in enumerate(CHAT_BAD)])
def test_bad_chat_requests_name_the_field_before_any_engine_call(chat_model, body, status, field):
    replica = _replica(chat_model)
    with pytest.raises(RequestError) as err:
        _chat(replica, body)
    assert (err.value.status, err.value.field) == (status, field), err.value.message
    assert replica.worker.prompts == []


def test_chat_without_a_chat_template_is_refused_by_name(rollout_model_path):
    with pytest.raises(RequestError) as err:
        _chat(_replica(rollout_model_path), {"messages": USER})
    assert (err.value.status, err.value.field) == (422, "messages") and "no chat template" in err.value.message


def test_chat_renders_the_template_and_answers_in_openais_shape(chat_model):
    from openai.types.chat import ChatCompletion

    replica = _replica(chat_model)
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "What is "}, {"type": "text", "text": "2 + 2?"}]}]
    out = _chat(replica, {"messages": messages, "model": "genselect-selector", "n": 2, "max_tokens": 3,
                          "logprobs": True, "top_logprobs": 2})
    parsed = ChatCompletion.model_validate(out)  # the official client's own type
    tok = replica.worker.tokenizer
    assert replica.worker.prompts == [tok("system: Be brief.\nuser: What is 2 + 2?\nassistant:",
                                          add_special_tokens=False)["input_ids"]]
    assert [c.index for c in parsed.choices] == [0, 1] and parsed.model == "genselect-selector"
    assert parsed.choices[0].message.role == "assistant" and parsed.choices[0].message.content == tok.decode(
        tok(" 4", add_special_tokens=False)["input_ids"])
    tokens = parsed.choices[0].logprobs.content
    assert tokens and all(t.logprob == -0.25 and [a.logprob for a in t.top_logprobs] == [-0.25, -1.5] for t in tokens)
    assert parsed.usage.prompt_tokens == len(replica.worker.prompts[0])
    assert parsed.usage.completion_tokens == 2 * len(tokens) and out["policy_version"] == 3
    assert replica.counters["chat"] == 1


def test_a_streamed_chat_is_openais_chunks_and_adds_up_to_the_answer(chat_model):
    """Role first, a chunk per token, finish_reason on the last, the usage chunk, [DONE]: every chunk the official
    client's own type, the deltas concatenated equal to the non-streamed message."""
    from openai.types.chat import ChatCompletionChunk

    replica = _replica(chat_model, text=" 4 and 5")
    body = {"messages": USER, "max_tokens": 8, "n": 2, "logprobs": True, "top_logprobs": 1,
            "stream_options": {"include_usage": True}}
    events = _events(replica, openai_api.chat_completions, body)
    assert events[-1] == "[DONE]" and replica.worker.closed_early == 0
    chunks = [ChatCompletionChunk.model_validate(e) for e in events[:-1]]
    assert len({c.id for c in chunks}) == 1 and all(c.object == "chat.completion.chunk" for c in chunks)
    assert [ch.delta.role for ch in chunks[0].choices] == ["assistant", "assistant"]
    usage, tokens = chunks[-1], len(replica.worker._ids(SimpleNamespace(max_tokens=8)))
    assert usage.choices == [] and usage.usage.completion_tokens == 2 * tokens
    answer = _chat(replica, {**body, "stream_options": None})
    for i in range(2):
        pieces = [ch for c in chunks[1:-1] for ch in c.choices if ch.index == i]
        assert len(pieces) > 1 and "".join(ch.delta.content for ch in pieces) == answer["choices"][i]["message"][
            "content"] == " 4 and 5"
        assert [ch.finish_reason for ch in pieces] == [None] * (len(pieces) - 1) + ["length"]
        assert all(len(ch.logprobs.content) == 1 for ch in pieces)
    assert all(e["policy_version"] == 3 for e in events[:-1]) and replica.counters["chat"] == 2


def test_a_streamed_completion_numbers_choices_per_prompt_and_adds_up_to_the_answer(chat_model):
    from openai.types import Completion

    replica = _replica(chat_model, text=" 4 and 5")
    body = {"prompt": ["a b", "c d"], "n": 2, "max_tokens": 8, "temperature": 1.0}
    events = _events(replica, openai_api.completions, body)
    assert events[-1] == "[DONE]" and "usage" not in events[-2]  # no stream_options: no usage chunk
    # the client reads each chunk as its `Completion` without validating it (OpenAI sends finish_reason null)
    chunks = [Completion.construct(**e) for e in events[:-1]]
    answer = asyncio.run(openai_api.completions(replica, json.dumps(body).encode()))
    for i in range(4):
        pieces = [ch for c in chunks for ch in c.choices if ch.index == i]
        assert "".join(ch.text for ch in pieces) == answer["choices"][i]["text"] == " 4 and 5"
        assert [ch.finish_reason for ch in pieces] == [None] * (len(pieces) - 1) + ["length"]
    assert all(len(c.choices) == 1 and c.object == "text_completion" and c.model == "genselect-selector"
               for c in chunks)


def test_closing_a_stream_closes_its_engine_request(chat_model):
    """A client that goes away closes the event stream: the engine request's stream is closed before its end
    (RolloutWorker.stream_request then aborts it in vLLM)."""
    replica = _replica(chat_model, text=" 4 and 5")

    async def first_events() -> list:
        events = await openai_api.chat_completions(replica, json.dumps({"messages": USER, "stream": True}).encode())
        got = [await events.__anext__(), await events.__anext__()]
        await events.aclose()
        return got

    assert len(asyncio.run(first_events())) == 2 and replica.worker.closed_early == 1


def test_a_stream_past_its_deadline_ends_with_an_error_event_and_its_request_aborted(chat_model):
    """Past serve.request_timeout_s a begun stream (its 200 sent) ends with one error event, status 504 as its
    `code`, then [DONE]; its engine request was closed before its end."""
    from actors.serving.selector_server import SelectorServer

    replica = _replica(chat_model, text=" 4 and 5")
    replica.s.request_timeout_s, replica.worker.seconds_a_token = 0.3, 0.2
    replica.counters.update(streams_cancelled=0, server_errors=0)

    async def collect() -> list:
        events = await openai_api.chat_completions(replica, json.dumps({"messages": USER, "stream": True}).encode())
        return [e async for e in SelectorServer._guarded_stream(replica, events)]

    events = asyncio.run(collect())
    error, done = events[-1].split("\n\n")[:2]
    error = json.loads(error[len("data: "):])["error"]
    assert (error["code"], error["type"]) == (504, "timeout") and "request_timeout_s (0.3 s)" in error["message"]
    assert done == "data: [DONE]" and len(events) > 2  # the role and a piece came first
    assert replica.worker.closed_early == 1 and replica.counters["server_errors"] == 1


THOUGHT = "<think>2 + 2 = 4, so</think> 4"


@pytest.mark.parametrize("parser", ["deepseek_r1", "qwen3"])
def test_the_reasoning_parser_splits_the_thinking_out_of_the_answer_streamed_or_not(chat_model, parser):
    """vLLM's own parsers on the chat model's tokens of `THOUGHT` (the tiny model writes no `</think>` itself): the
    message's `reasoning_content` (and `reasoning`) is the thinking, `content` the answer; streamed a token a
    piece, the deltas add up to the same."""
    replica = _replica(chat_model, text=THOUGHT, parser=parser)
    message = _chat(replica, {"messages": USER, "max_tokens": 30})["choices"][0]["message"]
    assert (message["reasoning_content"], message["reasoning"], message["content"]) == ("2 + 2 = 4, so",) * 2 + (" 4",)
    events = _events(replica, openai_api.chat_completions, {"messages": USER, "max_tokens": 30})
    deltas = [c["choices"][0]["delta"] for c in events[:-1]]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == "2 + 2 = 4, so"
    assert "".join(d.get("content") or "" for d in deltas) == " 4"
    assert all(d.get("reasoning_content") == d.get("reasoning") for d in deltas)
    assert events[-2]["choices"][0]["finish_reason"] == "length" and events[-1] == "[DONE]"


def test_a_reasoning_parser_is_checked_by_name_and_against_the_tokenizer(rollout_model_path):
    from actors.serving import reasoning
    from transformers import AutoTokenizer

    with pytest.raises(ValueError, match="serve.reasoning_parser='thinker' is not one of.*deepseek_r1.*qwen3"):
        reasoning.check_name("thinker")
    with pytest.raises(ValueError, match="serve.reasoning_parser='deepseek_r1' cannot read.*think"):  # no <think>
        reasoning.parser_class("deepseek_r1", AutoTokenizer.from_pretrained(rollout_model_path))
    assert reasoning.parser_class("", None) is None


def test_the_model_list_names_the_selector_its_version_and_folder(chat_model):
    from openai.types import Model

    replica = _replica(chat_model)
    listing = openai_api.model_list(replica)
    assert listing["object"] == "list" and len(listing["data"]) == 1
    card = Model.model_validate(listing["data"][0])
    assert (card.id, card.owned_by) == ("genselect-selector", "genselect")
    assert listing["data"][0]["root"] == chat_model and listing["data"][0]["policy_version"] == 3


# ---- `python -m driver.serve`, as a user starts it -----------------------------------------------------------
class Server:
    """One `python -m driver.serve` process (the guard) and its output file."""

    def __init__(self, model: str, port: int, env: dict, log: Path, overrides: tuple = ()):
        self.port, self.log = port, log
        with open(log, "w") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "driver.serve", "--model", model, "--port", str(port),
                                          *overrides], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def wait_healthy(self, timeout_s: float = 420) -> float:
        """Seconds until the command said it serves (`Ctrl-C stops`) and /healthz answers 200."""
        import requests

        started = time.monotonic()
        while time.monotonic() - started < timeout_s and self.proc.poll() is None:
            try:
                if "Ctrl-C stops" in self.log.read_text() and \
                        requests.get(f"http://127.0.0.1:{self.port}/healthz", timeout=5).status_code == 200:
                    return time.monotonic() - started
            except requests.RequestException:
                pass
            time.sleep(1)
        raise AssertionError(f"no healthy server on port {self.port} (exit {self.proc.poll()}):\n"
                             + self.log.read_text()[-4000:])

    def processes(self) -> list:
        return psutil.Process(self.proc.pid).children(recursive=True)

    def client(self):
        import openai

        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="unused", max_retries=0,
                             timeout=120)

    def kill_all(self) -> None:
        """What a test leaves behind, stopped (the guard's processes first, while they can be found)."""
        for proc in [*self.processes(), psutil.Process(self.proc.pid)] if self.proc.poll() is None else []:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        self.proc.wait(30)


def _alive(procs: list) -> list:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.fixture(scope="module")
def server_env() -> dict:
    """The environment of the servers: HAProxy's statistics and metrics on free ports (another server on this
    machine may hold Serve's defaults), the same for every server of the module."""
    return {**os.environ, "RAY_SERVE_HAPROXY_STATS_PORT": str(free_port()),
            "RAY_SERVE_HAPROXY_METRICS_PORT": str(free_port())}


@pytest.fixture(scope="module")
def server(chat_model, server_env, tmp_path_factory):
    srv = Server(chat_model, free_port(), server_env, tmp_path_factory.mktemp("serve") / "serve.out",
                 ("serve.reasoning_parser=deepseek_r1", f"serve.max_completion_tokens={LONG}"))
    try:
        print(f"\ndriver.serve healthy after {srv.wait_healthy():.0f} s")
        yield srv
    finally:
        srv.kill_all()


@pytest.mark.slow
def test_the_openai_client_lists_completes_and_chats(server, chat_model):
    from transformers import AutoTokenizer

    client = server.client()
    models = client.models.list().data
    assert [m.id for m in models] == ["genselect-selector"]
    assert models[0].model_extra["root"] == chat_model and models[0].model_extra["policy_version"] == 0
    completion = client.completions.create(model=models[0].id, prompt="Problem: what is 3 + 4?", max_tokens=4,
                                           temperature=0)
    assert completion.model == "genselect-selector" and 1 <= completion.usage.completion_tokens <= 4
    assert completion.model_extra["policy_version"] == 0
    chat = client.chat.completions.create(model=models[0].id, messages=USER, max_tokens=4, temperature=1.0, n=2,
                                          seed=0, logprobs=True, top_logprobs=2)
    tok = AutoTokenizer.from_pretrained(chat_model)
    assert chat.usage.prompt_tokens == len(tok("user: What is 2 + 2?\nassistant:", add_special_tokens=False)
                                           ["input_ids"])
    assert [c.index for c in chat.choices] == [0, 1] and all(c.message.role == "assistant" for c in chat.choices)
    assert chat.usage.completion_tokens == sum(len(c.logprobs.content) for c in chat.choices)
    assert chat.choices[0].finish_reason in ("stop", "length") and chat.model_extra["policy_version"] == 0
    assert all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in chat.choices[0].logprobs.content)
    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.chat.completions.create(model="gpt-4o", messages=USER)
    with pytest.raises(openai.UnprocessableEntityError) as err:
        client.chat.completions.create(model=models[0].id, messages=USER, max_tokens=10_000)
    assert err.value.body["field"] == "max_tokens"


@pytest.mark.slow
def test_the_openai_client_streams_what_it_gets_whole(server):
    """Greedy (temperature 0) and streamed: the completion's pieces add up to the non-streamed text, with its
    finish_reason and usage; the chat's deltas add up to its message, the thinking split out by the server's
    `deepseek_r1` parser (the tiny model writes no `</think>`: all of it is thinking, in `reasoning_content`) and
    together the raw text of the same prompt."""
    client, model = server.client(), "genselect-selector"
    greedy = {"model": model, "max_tokens": 12, "temperature": 0}
    whole = client.completions.create(prompt=PROMPT, **greedy)
    chunks = list(client.completions.create(prompt=PROMPT, stream=True, stream_options={"include_usage": True},
                                            **greedy))
    pieces = [c.choices[0] for c in chunks if c.choices]
    assert len(pieces) > 1 and "".join(p.text for p in pieces) == whole.choices[0].text
    assert [p.finish_reason for p in pieces][-2:] == [None, whole.choices[0].finish_reason]
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens

    message = client.chat.completions.create(messages=USER, **greedy).choices[0].message
    raw = client.completions.create(prompt="user: What is 2 + 2?\nassistant:", **greedy).choices[0].text
    assert message.model_extra["reasoning_content"] == raw and not message.content
    chunks = list(client.chat.completions.create(messages=USER, stream=True, **greedy))
    deltas = [c.choices[0].delta for c in chunks]
    assert deltas[0].role == "assistant" and len(deltas) > 2
    assert "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas) == raw
    assert "".join(d.content or "" for d in deltas) == (message.content or "")
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    with pytest.raises(openai.UnprocessableEntityError) as err:
        client.chat.completions.create(messages=USER, stream_options={"include_usage": True}, **greedy)
    assert err.value.body["field"] == "stream_options"

    # several choices in one engine request, several prompts in flight at once: every choice streamed to its end
    sampled = {"model": model, "max_tokens": 4, "temperature": 1.0, "seed": 0, "stream": True}
    ends = {(ch.index, ch.finish_reason) for c in client.chat.completions.create(messages=USER, n=2, **sampled)
            for ch in c.choices if ch.finish_reason}
    assert {i for i, _ in ends} == {0, 1}
    ends = {(ch.index, ch.finish_reason) for c in client.completions.create(prompt=[PROMPT, "Problem: 1 + 1"], n=2,
                                                                          **sampled) for ch in c.choices
            if ch.finish_reason}
    assert {i for i, _ in ends} == {0, 1, 2, 3}


@pytest.mark.slow
def test_a_stream_over_http_ends_with_done_and_a_closed_one_aborts_its_request(server):
    """The raw events: `text/event-stream`, `data: ...` lines, `data: [DONE]` last. A client that closes a stream
    after its first event: the replica counts the stream cancelled (only a stream closed before its end counts)
    and nothing stays in flight: the engine request, LONG tokens with ignore_eos, was aborted."""
    import requests

    url = f"http://127.0.0.1:{server.port}"
    body = {"messages": USER, "max_tokens": 4, "stream": True}
    with requests.post(url + "/v1/chat/completions", json=body, stream=True, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines(decode_unicode=True) if line]
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]" and len(lines) >= 3

    before = requests.get(url + "/healthz", timeout=30).json()["counters"]
    long = {"messages": USER, "max_tokens": LONG, "ignore_eos": True, "stream": True}  # ~15 s whole on 2 cores
    with requests.post(url + "/v1/chat/completions", json=long, stream=True, timeout=60) as r:
        next(line for line in r.iter_lines() if line)
    started, health = time.monotonic(), {}
    while time.monotonic() - started < 30:
        health = requests.get(url + "/healthz", timeout=30).json()
        if health["counters"]["streams_cancelled"] > before["streams_cancelled"] and health["in_flight"] == 0:
            break
        time.sleep(0.2)
    assert health["counters"]["streams_cancelled"] == before["streams_cancelled"] + 1, health
    assert health["in_flight"] == 0 and health["counters"]["streams"] == before["streams"] + 1
    print(f"\nclosed stream aborted within {time.monotonic() - started:.1f} s")


@pytest.mark.slow
def test_a_sigkilled_server_leaves_nothing_and_the_next_one_starts_on_its_ports(server, chat_model, server_env,
                                                                                tmp_path):
    """SIGKILL of `python -m driver.serve`: every process it started (Ray's, HAProxy, the engine) ends within
    seconds and nothing listens on its ports; a new server on the same ports comes up and answers; SIGTERM stops
    that one and leaves nothing either."""
    procs = server.processes()
    names = sorted({p.name() for p in procs})
    assert "haproxy" in names and "raylet" in names and "VLLM::EngineCore" in names, names
    server.proc.send_signal(signal.SIGKILL)
    started, alive = time.monotonic(), _alive(procs)
    while alive and time.monotonic() - started < 30:
        time.sleep(0.2)
        alive = _alive(procs)
    gone_s = time.monotonic() - started
    assert not alive, f"outlived the SIGKILLed server: {[(p.pid, p.name()) for p in alive]}"
    ports = {server.port, int(server_env["RAY_SERVE_HAPROXY_STATS_PORT"]),
             int(server_env["RAY_SERVE_HAPROXY_METRICS_PORT"])}
    listening = {c.laddr.port for c in psutil.net_connections("tcp") if c.status == "LISTEN"}
    assert not ports & listening
    print(f"\nSIGKILL: {len(procs)} processes ({', '.join(names)}) gone in {gone_s:.1f} s")

    again = Server(chat_model, server.port, server_env, tmp_path / "again.out")
    try:
        print(f"the next server on port {server.port} healthy after {again.wait_healthy():.0f} s")
        chat = again.client().chat.completions.create(model="genselect-selector", messages=USER, max_tokens=2)
        assert chat.choices and chat.model_extra["policy_version"] == 0
        procs = again.processes()
        again.proc.send_signal(signal.SIGTERM)
        assert again.proc.wait(120) == 0, again.log.read_text()[-3000:]
        assert not _alive(procs), [(p.pid, p.name()) for p in _alive(procs)]
    finally:
        again.kill_all()

"""The selection service (actors/serving/selector_server.py, driver/serve.py).

Pure parts first (request validation, the tournament wiring over a scripted worker). Then the real thing:
the Serve application on a local Ray instance with the tiny Qwen3 on CPU vLLM, over HTTP: every endpoint,
knockout with N = 64, the bad inputs (a 4xx naming the field, never a 5xx, never a hang), a weight swap under
load (no request fails; log-probs after the swap are the new weights'), and autoscaling from 1 to 2 replicas
under load (the new replica catches up to the swapped weights from the board).
One replica engine for the module (~30 s to start on 2 cores), a second one for the autoscaling test.
"""
from __future__ import annotations

import asyncio
import json
import threading
import time
from types import SimpleNamespace

import pytest

from actors.serving.select_request import RequestError, SelectorSettings, parse_select
from actors.serving.selector_server import SelectorServer
from core.net import rendezvous_port
from core.records import Rollout, RolloutGroup

WINDOW = 4


def settings(**kw) -> SelectorSettings:
    base = dict(model="m", rollout=None, window=WINDOW, max_candidates=100, max_candidate_chars=500,
                max_problem_chars=1000, max_samples=8, max_body_bytes=200_000)
    return SelectorSettings(**{**base, **kw})


# ---- validation (pure) --------------------------------------------------------------------------------
GOOD = {"problem": "What is 2 + 2?", "candidates": ["4", "5"]}
BAD = [  # (body, status, field)
    (b"{not json", 400, "body"),
    (b"[1, 2]", 400, "body"),
    ({"candidates": ["a", "b"]}, 422, "problem"),
    ({**GOOD, "problem": 7}, 422, "problem"),
    ({**GOOD, "problem": "  "}, 422, "problem"),
    ({"problem": "p"}, 422, "candidates"),
    ({**GOOD, "candidates": "a, b"}, 422, "candidates"),
    ({**GOOD, "candidates": ["only one"]}, 422, "candidates"),
    ({**GOOD, "candidates": ["a", ""]}, 422, "candidates[1]"),
    ({**GOOD, "candidates": ["a", "<think>x</think>  "]}, 422, "candidates[1]"),
    ({**GOOD, "candidates": ["a", 3]}, 422, "candidates[1]"),
    ({**GOOD, "candidates": ["a", "x" * 501]}, 413, "candidates[1]"),
    ({**GOOD, "candidates": ["a"] * 101}, 413, "candidates"),
    ({**GOOD, "problem": "p" * 1001}, 413, "problem"),
    ({**GOOD, "samples": 0}, 422, "samples"),
    ({**GOOD, "samples": 9}, 422, "samples"),
    ({**GOOD, "samples": "2"}, 422, "samples"),
    ({**GOOD, "samples": True}, 422, "samples"),
    ({**GOOD, "samples": 2.0}, 422, "samples"),
    ({**GOOD, "temperature": -1}, 422, "temperature"),
    ({**GOOD, "temperature": "hot"}, 422, "temperature"),
    ({**GOOD, "temperature": 0, "samples": 2}, 422, "temperature"),
    ({**GOOD, "domain": "physics"}, 422, "domain"),
    ({**GOOD, "candidate": ["a"]}, 422, "candidate"),
    ({**GOOD, "problem": "p" * 250_000}, 413, "body"),
    ({**GOOD, "orders": 3}, 422, "orders"),
    ({**GOOD, "orders": "2"}, 422, "orders"),
    ({**GOOD, "orders": 2, "samples": 2}, 422, "orders"),
    ({**GOOD, "orders": 2, "temperature": 0}, 422, "orders"),
    ({**GOOD, "selection": "league"}, 422, "selection"),
    ({**GOOD, "answers": ["4", "5"]}, 422, "answers"),  # a knockout reads no answers
    ({**GOOD, "selection": "round_robin", "answers": ["4"]}, 422, "answers"),
    ({**GOOD, "selection": "round_robin", "answers": "4, 5"}, 422, "answers"),
    ({**GOOD, "selection": "round_robin", "answers": ["4", 5]}, 422, "answers[1]"),
    ({**GOOD, "selection": "round_robin", "answers": ["4", "x" * 501]}, 413, "answers[1]"),
    ({**GOOD, "selection": "round_robin", "orders": 1}, 422, "orders"),
    ({**GOOD, "selection": "round_robin", "samples": 2}, 422, "orders"),
    ({**GOOD, "selection": "round_robin", "candidates": ["a"] * 33}, 413, "candidates"),
]


def _bytes(body) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body).encode()


@pytest.mark.parametrize("body,status,field", BAD, ids=[f"{i}-{b[2]}" for i, b in enumerate(BAD)])
def test_bad_select_requests_name_the_field(body, status, field):
    with pytest.raises(RequestError) as err:
        parse_select(_bytes(body), settings())
    assert (err.value.status, err.value.field) == (status, field), err.value.message


def test_select_defaults():
    req = parse_select(_bytes(GOOD), settings(temperature=1.3))
    assert req["samples"] == 1 and req["temperature"] == 0.0 and req["domain"] == "math"  # one sample: greedy
    req = parse_select(_bytes({**GOOD, "samples": 3}), settings(temperature=1.3))
    assert req["temperature"] == 1.3  # several samples: the training temperature


# ---- the tournament over a scripted worker (no engine) --------------------------------------------------
class ScriptedWorker:
    """Answers every group with `Judgment: i` where candidate i of the group contains 'RIGHT' (else 'LEFT' ->
    an unparseable answer), and records the calls: one generate call per round, all groups in it."""

    def __init__(self):
        self.version, self.calls = 3, []
        self.tokenizer = None  # the rollout worker's tokenizer: read by a reasoning parser, none configured here

    def encode_prompt(self, prompt):
        return prompt.split()

    def allowed_token_ids(self, num_candidates):
        return list(range(num_candidates))  # a one-token index judgment

    async def generate(self, tasks, n=None, temperature=None, max_tokens=None):
        self.calls.append(len(tasks))
        groups = []
        for task in tasks:
            hit = [i for i, c in enumerate(task.candidates) if "RIGHT" in c]
            text = f"Judgment: {hit[0]}" if hit else "I cannot tell"
            rollouts = [Rollout(prompt_id=task.prompt_id, prompt_token_ids=[], response_token_ids=[1],
                                behaviour_logprobs=[0.0], response_text=text, policy_version=self.version,
                                finish_reason="stop")
                        for _ in range(n)]
            groups.append(RolloutGroup(task=task, rollouts=rollouts, policy_version=self.version))
        return groups


class LogprobWorker(ScriptedWorker):
    """Index log-probs that prefer the first solution shown 3:1 (a position bias), times 1.5 for a candidate
    containing 'RIGHT'; records every batch (one per round: each group twice, as given and reversed)."""

    async def index_logprobs(self, tasks):
        import math
        self.calls.append([t.candidates for t in tasks])
        out = []
        for t in tasks:
            w = [(3.0 if i == 0 else 1.0) * (1.5 if "RIGHT" in c else 1.0) for i, c in enumerate(t.candidates)]
            out.append(([math.log(x / sum(w)) for x in w], self.version))
        return out


def _select(server, body):
    return asyncio.run(server._select(_bytes(body)))


def test_knockout_wiring_finds_the_one_right_candidate_among_64():
    server = SelectorServer(settings(window=8, max_prompt_tokens=10_000, policy_version=3), worker=ScriptedWorker())
    candidates = [f"candidate {i}" for i in range(64)]
    candidates[45] = "candidate 45 RIGHT"
    out = _select(server, {"problem": "p", "candidates": candidates, "samples": 3, "temperature": 1.0})
    assert out["index"] == 45 and out["rounds"] == 2 and out["policy_version"] == 3
    assert server.worker.calls == [8, 1]  # every group of a round in one call (the engine batches them)
    assert out["votes"][45] == 3 and sum(out["votes"]) == 3 and out["unparsed"] == 0
    first = out["bracket"][0]
    assert [len(g) for g in first["groups"]] == [8] * 8 and first["winners"][5] == 45
    assert server.counters["knockout_fallbacks"] == 7  # the 7 groups without a parseable judgment advance their first
    assert out["bracket"][1]["groups"] == [first["winners"]]


def test_both_orders_reads_every_pair_twice_and_cancels_the_position_bias():
    server = SelectorServer(settings(window=2, orders=2, policy_version=3), worker=LogprobWorker())
    candidates = ["a", "b", "c RIGHT", "d", "e"]
    out = _select(server, {"problem": "p", "candidates": candidates})
    assert out["index"] == 2 and out["orders"] == 2 and out["policy_version"] == 3 and out["rounds"] == 3
    first = server.worker.calls[0]
    assert first[:2] == [("a", "b"), ("b", "a")] and len(first) == 4  # 2 pairs twice; "e" has a bye
    final = out["bracket"][-1]["groups"][0]
    assert out["votes"][2] == 1 and sum(out["votes"]) == 1 and out["unparsed"] == 0
    assert [out["scores"][j] is not None for j in range(5)] == [j in final for j in range(5)]
    assert out["scores"][2] == max(v for v in out["scores"] if v is not None)
    # the same request read once per group (orders=1, scripted text judgments) still works beside it
    assert _select(server, {"problem": "p", "candidates": candidates, "orders": 1})["index"] == 2


def test_round_robin_reads_every_pair_twice_in_one_batch_and_pools_answers():
    server = SelectorServer(settings(window=2, policy_version=3), worker=LogprobWorker())
    candidates = ["a", "b", "c RIGHT", "d"]
    out = _select(server, {"problem": "p", "candidates": candidates, "selection": "round_robin"})
    assert out["index"] == 2 and out["selection"] == "round_robin" and out["orders"] == 2 and out["pairs"] == 6
    assert out["policy_version"] == 3 and not out["pooled_by_answer"] and sum(out["wins"]) == pytest.approx(6)
    batch = server.worker.calls[0]
    assert len(server.worker.calls) == 1 and len(batch) == 12 and batch[:2] == [("a", "b"), ("b", "a")]
    # three candidates agree against the one the judge prefers only weakly: pooled by answer, agreement wins
    out = _select(server, {"problem": "p", "candidates": candidates, "selection": "round_robin",
                           "answers": ["7", "7", "2", "7"]})
    assert out["index"] in (0, 1, 3) and out["pooled_by_answer"]


def test_round_robin_is_the_default_where_the_settings_say_so_and_refuses_a_pair_over_budget():
    server = SelectorServer(settings(selection="round_robin", max_prompt_tokens=55), worker=LogprobWorker())
    assert _select(server, {"problem": "p", "candidates": ["a RIGHT", "b"]})["selection"] == "round_robin"
    with pytest.raises(RequestError) as err:
        _select(server, {"problem": "p", "candidates": ["a", "b", "long " * 20]})
    assert (err.value.status, err.value.field) == (413, "candidates")


class FreeTextWorker(LogprobWorker):
    """A model that writes its judgment in free text (a pick-then-point selector): no one-token index."""

    def allowed_token_ids(self, num_candidates):
        return None


@pytest.mark.parametrize("extra, field", [({"selection": "round_robin"}, "selection"), ({"orders": 2}, "orders")])
def test_a_free_text_judge_refuses_the_log_prob_procedures_by_name_and_still_runs_a_knockout(extra, field):
    server = SelectorServer(settings(window=2, policy_version=3), worker=FreeTextWorker())
    with pytest.raises(RequestError) as err:
        _select(server, {"problem": "p", "candidates": ["a", "b RIGHT", "c"], **extra})
    assert (err.value.status, err.value.field) == (422, field) and "free text" in err.value.message
    assert server.worker.calls == []  # refused before any engine request
    assert _select(server, {"problem": "p", "candidates": ["a", "b RIGHT", "c"]})["index"] == 1


def test_unparsed_final_round_gives_no_index_and_counts_them():
    server = SelectorServer(settings(), worker=ScriptedWorker())
    out = _select(server, {"problem": "p", "candidates": ["a", "b", "c"], "samples": 2, "temperature": 1.0})
    assert out["index"] is None and out["unparsed"] == 2 and out["parse_errors"] == ["no_judgment"] * 2
    assert out["votes"] == [0, 0, 0] and out["parsed"] == [None, None]


def test_token_budget_splits_groups_and_refuses_pairs_that_cannot_fit():
    server = SelectorServer(settings(window=8, max_prompt_tokens=120), worker=ScriptedWorker())
    candidates = [("word " * 20 + f"{i}") for i in range(8)]
    out = _select(server, {"problem": "p", "candidates": candidates})
    assert out["rounds"] >= 2 and len(out["bracket"][0]["groups"]) > 1  # the window alone would need 1 round
    with pytest.raises(RequestError) as err:
        _select(server, {"problem": "p", "candidates": ["word " * 80, "word " * 80]})
    assert err.value.status == 413 and err.value.field == "candidates"


# ---- the real Serve application -------------------------------------------------------------------------
def _post(url, body, timeout=120):
    import requests

    return requests.post(url, data=_bytes(body), timeout=timeout)


@pytest.fixture(scope="module")
def served(rollout_model_path):
    import ray
    from ray import serve

    from core.config import RolloutConfig, ServeConfig, TrainConfig
    from core.env import default_env
    from driver.serve import start, stop

    import os

    # Serve's load metrics every second instead of every 10 (the autoscaling test reacts sooner)
    for name in ("RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S",
                 "RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S"):
        os.environ.setdefault(name, "1")
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": default_env()})
    train = TrainConfig()
    train.rollout = RolloutConfig(max_response_tokens=12, max_num_seqs=64, temperature=1.0)
    # 1 replica, up to 2 when more than 4 requests are ongoing (only the autoscaling test, the last, loads it so)
    # a port outside the ephemeral range, so no connection Ray opens meanwhile can take it
    serve_cfg = ServeConfig(port=rendezvous_port("127.0.0.1"), window=WINDOW, max_candidates=100,
                            max_body_bytes=200_000,
                            max_samples=8, num_cpus=0.5, request_timeout_s=60.0, min_replicas=1, max_replicas=2,
                            target_ongoing_requests=4.0, upscale_delay_s=0.0, look_back_period_s=2.0)
    started = time.time()
    try:
        handle, s = start(rollout_model_path, serve_cfg, train, policy_version=0)
        print(f"\nserve app up in {time.time() - started:.1f} s")
        yield SimpleNamespace(url=f"http://127.0.0.1:{serve_cfg.port}", handle=handle, settings=s,
                              serve_cfg=serve_cfg, train=train, model=rollout_model_path)
    finally:
        stop(serve_cfg)
        serve.shutdown()
        ray.shutdown()


@pytest.mark.slow
def test_healthz(served):
    import requests

    body = requests.get(served.url + "/healthz", timeout=30).json()
    assert body["status"] == "ok" and body["policy_version"] == 0 and body["model"] == served.model
    assert body["window"] == WINDOW and body["orders"] == 1 and body["max_prompt_tokens"] > 0
    # the project's default ingress (core/env.py): HAProxy, running, in front of the replica's own HTTP server
    import psutil
    assert body["ingress"] == "haproxy"
    haproxy = [p for p in psutil.Process().children(recursive=True) if p.name() == "haproxy"]
    assert haproxy
    # its HTTP frontend where serve.host says (127.0.0.1), and its statistics and metrics on loopback too
    listening = {(c.laddr.ip, c.laddr.port) for p in haproxy for c in p.net_connections("tcp") if c.status == "LISTEN"}
    assert ("127.0.0.1", served.serve_cfg.port) in listening and len(listening) >= 3, listening
    assert {ip for ip, _ in listening} == {"127.0.0.1"}, listening


@pytest.mark.slow
def test_select_contract(served):
    r = _post(served.url + "/v1/select", {"problem": "What is 17 + 5?", "candidates": ["22", "23", "21"],
                                          "samples": 4, "temperature": 1.0, "domain": "math"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert len(out["judgments"]) == 4 and len(out["parsed"]) == 4 and len(out["votes"]) == 3
    assert sum(out["votes"]) + out["unparsed"] == 4 and len(out["parse_errors"]) == out["unparsed"]
    assert out["rounds"] == 1 and out["policy_version"] == 0
    if sum(out["votes"]):
        assert out["votes"][out["index"]] == max(out["votes"])
        assert out["index"] == out["votes"].index(max(out["votes"]))  # ties: the lowest index
    else:
        assert out["index"] is None
    greedy = [_post(served.url + "/v1/select", {"problem": "What is 1 + 1?", "candidates": ["2", "3"]}).json()
              for _ in range(2)]
    assert greedy[0]["judgments"] == greedy[1]["judgments"] and greedy[0]["temperature"] == 0.0
    # each group read as given and reversed from the engine's index log-probs: deterministic, the argmax score
    both = [_post(served.url + "/v1/select", {"problem": "What is 17 + 5?", "candidates": ["22", "23", "21"],
                                              "orders": 2}).json() for _ in range(2)]
    assert both[0]["orders"] == 2 and both[0]["scores"] == both[1]["scores"] and both[0]["index"] == both[1]["index"]
    scores = both[0]["scores"]
    assert None not in scores and both[0]["index"] == scores.index(max(scores)) and both[0]["policy_version"] == 0


@pytest.mark.slow
def test_round_robin_over_http(served):
    """Every pair read in both orders by the real engine: deterministic, wins summing to the pairs, pooled by the
    answers sent; 413 past serve.max_round_robin_candidates."""
    body = {"problem": "What is 17 + 5?", "candidates": ["17 + 5 = 22", "17 + 5 = 23", "22", "17 + 5 = 21"],
            "selection": "round_robin"}
    out = [_post(served.url + "/v1/select", body).json() for _ in range(2)]
    assert out[0]["selection"] == "round_robin" and out[0]["pairs"] == 6 and out[0]["wins"] == out[1]["wins"]
    assert sum(out[0]["wins"]) == pytest.approx(6, abs=1e-4) and out[0]["index"] == out[1]["index"]
    assert out[0]["index"] == max(range(4), key=lambda i: (out[0]["wins"][i], -i)) and out[0]["policy_version"] == 0
    pooled = _post(served.url + "/v1/select", {**body, "answers": ["22", "23", "22", "21"]}).json()
    assert pooled["pooled_by_answer"] and pooled["wins"] == out[0]["wins"]
    wins = pooled["wins"]
    assert pooled["index"] in ((0, 2) if wins[0] + wins[2] >= max(wins[1], wins[3]) else (1, 3))
    r = _post(served.url + "/v1/select", {**body, "candidates": ["x"] * 33})
    assert r.status_code == 413 and r.json()["error"]["field"] == "candidates"


@pytest.mark.slow
def test_knockout_with_64_candidates(served):
    import requests

    before = requests.get(served.url + "/healthz", timeout=30).json()["counters"]["engine_requests"]
    candidates = [f"17 + 5 = {10 + i}" for i in range(64)]
    r = _post(served.url + "/v1/select", {"problem": "What is 17 + 5?", "candidates": candidates, "samples": 2,
                                          "temperature": 1.0})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["rounds"] == 3  # 64 -> 16 -> 4 -> 1 with a window of 4
    members = list(range(64))
    for record in out["bracket"]:
        assert sorted(i for g in record["groups"] for i in g) == sorted(members)
        assert all(1 <= len(g) <= WINDOW for g in record["groups"])
        assert all(w is None or w in g for g, w in zip(record["groups"], record["winners"]))
        members = record["winners"]
    assert len(out["bracket"][0]["groups"]) == 16 and out["index"] == members[0]
    assert sum(out["votes"]) + out["unparsed"] == 2 and len(out["votes"]) == 64
    after = requests.get(served.url + "/healthz", timeout=30).json()["counters"]["engine_requests"]
    assert after - before == 16 + 4 + 1  # one engine request per group


@pytest.mark.slow
def test_completions_openai_format(served):
    from vllm.entrypoints.openai.completion.protocol import CompletionResponse

    r = _post(served.url + "/v1/completions", {"prompt": "Problem: what is 3 + 4?", "max_tokens": 5, "n": 2,
                                               "temperature": 1.0, "logprobs": 0})
    assert r.status_code == 200, r.text
    out = r.json()
    parsed = CompletionResponse.model_validate(out)
    assert len(parsed.choices) == 2 and out["policy_version"] == 0
    for choice in parsed.choices:
        assert len(choice.logprobs.token_logprobs) <= 5 and all(lp <= 0 for lp in choice.logprobs.token_logprobs)
    assert parsed.usage.completion_tokens == sum(len(c.logprobs.tokens) for c in parsed.choices)
    batch = _post(served.url + "/v1/completions", {"prompt": ["a b", "c d"], "max_tokens": 3, "temperature": 0})
    assert batch.status_code == 200 and len(batch.json()["choices"]) == 2, batch.text
    ids = _post(served.url + "/v1/completions", {"prompt": [[5, 6, 7], [8, 9]], "max_tokens": 3, "temperature": 0})
    assert ids.status_code == 200 and ids.json()["usage"]["prompt_tokens"] == 5, ids.text


@pytest.mark.slow
def test_the_openai_client_on_a_model_without_a_chat_template(served):
    """The official client finds the selector through /v1/models and completes raw text, streamed too (the pieces
    add up to the greedy text); its chat call gets a 422 naming `messages` (the tiny selector has no chat
    template), and the service goes on serving."""
    import openai

    client = openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    [model] = client.models.list().data
    assert model.id == served.settings.name == "genselect-selector" and model.owned_by == "genselect"
    assert model.model_extra["root"] == served.model and model.model_extra["policy_version"] == 0
    completion = client.completions.create(model=model.id, prompt=["Problem: 2 + 2", "Problem: 3 + 3"], max_tokens=3)
    assert len(completion.choices) == 2 and completion.model == model.id and completion.usage.prompt_tokens > 0
    with pytest.raises(openai.UnprocessableEntityError, match="no chat template") as err:
        client.chat.completions.create(model=model.id, messages=[{"role": "user", "content": "What is 2 + 2?"}])
    assert err.value.body["field"] == "messages"
    assert client.completions.create(model=model.id, prompt="Problem: 1 + 1", max_tokens=1).choices
    greedy = {"model": model.id, "prompt": "Problem: what is 3 + 4?", "max_tokens": 6, "temperature": 0,
              "extra_body": {"ignore_eos": True}}  # six pieces, whatever the untrained model writes
    streamed = [c.choices[0].text for c in client.completions.create(stream=True, **greedy)]
    assert len(streamed) > 1 and "".join(streamed) == client.completions.create(**greedy).choices[0].text


HTTP_BAD = [  # (path, body, status, field) checked over HTTP: never 5xx, never a hang
    ("/v1/select", b"{oops", 400, "body"),
    ("/v1/select", {"problem": "p", "candidates": ["a"]}, 422, "candidates"),
    ("/v1/select", {"problem": "p", "candidates": ["a", ""]}, 422, "candidates[1]"),
    ("/v1/select", {"problem": "p", "candidates": ["a", "b"], "samples": 99}, 422, "samples"),
    ("/v1/select", {"problem": "p", "candidates": ["a", "x" * 5000]}, 413, "candidates[1]"),
    ("/v1/select", {"problem": "p", "candidates": ["a"] * 101}, 413, "candidates"),
    ("/v1/select", b"x" * 300_000, 413, "body"),
    ("/v1/select", {"problem": "p", "candidates": ["1 2 3 " * 600, "4 5 6 " * 600]}, 413, "candidates"),
    ("/v1/completions", {"prompt": "x", "max_tokens": "many"}, 422, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 0}, 422, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "stream": "yes"}, 422, "stream"),
    ("/v1/completions", {"prompt": "x", "stream_options": {"include_usage": True}}, 422, "stream_options"),
    ("/v1/completions", {"prompt": "x", "stream": True, "max_tokens": 0}, 422, "max_tokens"),  # before the stream
    ("/v1/completions", {"max_tokens": 3}, 422, "prompt"),
    ("/v1/completions", {"prompt": [999999], "max_tokens": 3}, 422, "prompt[0]"),
    ("/v1/completions", {"prompt": "x", "n": 50}, 422, "n"),
    ("/v1/completions", {"prompt": "x", "model": "gpt-4o"}, 404, "model"),
    ("/v1/chat/completions", b"{oops", 400, "body"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "stream": True}, 422, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}, 422, "messages"),  # no chat template
    ("/admin/reload", {"model": "/nonexistent/model"}, 422, "model"),
    ("/admin/reload", {}, 422, "model"),
]


@pytest.mark.slow
def test_bad_inputs_over_http(served):
    for path, body, status, field in HTTP_BAD:
        started = time.time()
        r = _post(served.url + path, body, timeout=30)
        assert r.status_code == status, (path, body if isinstance(body, bytes) else str(body)[:80], r.text[:300])
        assert r.json()["error"]["field"] == field, r.text[:300]
        assert time.time() - started < 20
    r = _post(served.url + "/v1/select", {"problem": "p", "candidates": ["a", "b"]})
    assert r.status_code == 200  # still serving


def _write_perturbed_model(src: str, dst, rh):
    """A copy of the model folder `src` with perturbed weights at `dst`; returns the perturbed HF model."""
    import shutil
    from pathlib import Path

    model = rh.hf_model(src)
    rh.perturbed_state(model, seed=7, scale=0.05)
    model.save_pretrained(dst)
    for f in Path(src).iterdir():
        if f.name.startswith("tokenizer") or f.name == "genselect_model.json":
            shutil.copy(f, Path(dst) / f.name)
    return model


@pytest.mark.slow
def test_weight_swap_under_load(served, rh, tmp_path):
    """POST /admin/reload while requests are in flight: none fails, answers name version 0 then 1, and the
    served log-probs of a fixed prompt + completion equal the new weights' (transformers), not the old."""
    import numpy as np
    import requests

    task = rh.make_task(3)
    from transformers import AutoTokenizer

    from core.chat import prompt_token_ids

    tok = AutoTokenizer.from_pretrained(served.model)
    prompt = prompt_token_ids(tok, task.prompt)
    response = tok("Judgment: 1", add_special_tokens=False)["input_ids"]
    old = served.handle.compute_logprobs.remote(prompt, response).result(timeout_s=60)
    old_ref = rh.hf_logprobs(rh.hf_model(served.model), prompt, response)
    assert old["version"] == 0 and np.max(np.abs(np.subtract(old["logprobs"], old_ref))) < 1e-4

    new_dir = tmp_path / "new"
    new_model = _write_perturbed_model(served.model, new_dir, rh)
    new_ref = rh.hf_logprobs(new_model, prompt, response)
    assert np.max(np.abs(np.subtract(new_ref, old_ref))) > 0.05, "perturbation too small to tell old from new"

    results, stop = [], threading.Event()

    def load():
        while not stop.is_set():
            r = _post(served.url + "/v1/select", {"problem": "What is 2 + 9?", "candidates": ["11", "12", "10"],
                                                  "samples": 4, "temperature": 1.0})
            results.append((r.status_code, r.json().get("policy_version")))

    threads = [threading.Thread(target=load) for _ in range(3)]  # below the autoscaling target: one replica
    for t in threads:
        t.start()
    time.sleep(2.0)
    swap = _post(served.url + "/admin/reload", {"model": str(new_dir)})
    time.sleep(2.0)
    stop.set()
    for t in threads:
        t.join(60)
    assert swap.status_code == 200, swap.text
    info = swap.json()
    print(f"\nswap: {info['swap']}; {len(results)} requests during the load")
    assert info["version"] == 1 and info["served_here"] == 1
    assert all(code == 200 for code, _ in results), results
    assert {v for _, v in results} == {0, 1}  # answered on the old weights, then on the new ones
    after = served.handle.compute_logprobs.remote(prompt, response).result(timeout_s=60)
    assert after["version"] == 1
    assert np.max(np.abs(np.subtract(after["logprobs"], new_ref))) < 1e-4
    assert requests.get(served.url + "/healthz", timeout=30).json()["policy_version"] == 1
    again = _post(served.url + "/admin/reload", {"model": str(new_dir), "version": 1})
    assert again.status_code == 409 and again.json()["error"]["field"] == "version"


@pytest.mark.slow
def test_autoscales_from_one_to_two_replicas_under_load(served):
    """Load the app past its target of 4 ongoing requests per replica: Serve adds a second replica (a second
    vLLM engine), which catches up to the swapped weights (version 1) from the board before it answers."""
    import requests
    from ray import serve

    from driver.serve import DEPLOYMENT

    cfg = served.serve_cfg

    def replicas() -> int:
        app = serve.status().applications[cfg.app_name]
        return app.deployments[DEPLOYMENT].replica_states.get("RUNNING", 0)

    assert replicas() == 1
    failures, stop = [], threading.Event()

    def load():
        while not stop.is_set():
            r = _post(served.url + "/v1/select", {"problem": "What is 4 + 4?", "candidates": ["8", "9"],
                                                  "samples": 8, "temperature": 1.0})
            if r.status_code != 200:
                failures.append(r.status_code)

    threads = [threading.Thread(target=load) for _ in range(12)]
    for t in threads:
        t.start()
    started, seen = time.time(), {}
    try:
        while time.time() - started < 240 and (replicas() < 2 or len(seen) < 2):
            body = requests.get(served.url + "/healthz", timeout=30).json()
            seen[body["replica"]] = body["policy_version"]
            time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    print(f"\nautoscaling: 2 replicas after {time.time() - started:.0f} s; versions {seen}")
    assert replicas() == 2 and len(seen) == 2
    assert set(seen.values()) == {1}, seen  # the new replica answered only after loading version 1
    assert not failures



@pytest.mark.slow
def test_replica_killed_under_load_is_replaced(served):
    """One replica's actor killed under load (1 of 2 after the autoscaling test): Serve starts a replacement,
    which catches up to the served version from the board; the load run reports how many requests failed meanwhile
    (by status) and how long until the replacement ran."""
    import requests

    from benchmarks.serve import kill_replica_under_load

    def post(body):  # a client that never dies: every answer is counted, JSON or not (the proxy's 500 is text)
        try:
            r = _post(served.url + "/v1/select", body)
        except Exception as e:
            return -1, {"error": repr(e)}
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, {}

    bodies = [{"problem": f"What is {a} + 5?", "candidates": [str(a + 5), str(a + 6), str(a + 4)]} for a in range(4)]
    version = requests.get(served.url + "/healthz", timeout=30).json()["policy_version"]
    out = kill_replica_under_load(post, bodies, served.serve_cfg.app_name, clients=3, timeout_s=240)
    print(f"\nreplica killed under load: {out}")
    assert out["replacement_running_s"] is not None and out["sent"] > 0
    assert out["failed"] == sum(out["failed_by_status"].values())  # reported, not necessarily 0
    assert out["after"]["ok"] == len(bodies) and out["after"]["policy_versions"] == [version]

def test_prompts_follow_the_model_folders_prompt_style(tmp_path):
    """A folder exported by driver.train records `solution_end_line`; the replica renders prompts that way, and
    re-reads the style when it swaps to another folder."""
    from core.algo.genselect import PromptStyle, write_prompt_style

    write_prompt_style(tmp_path, PromptStyle(end_lines=True, line_labels=True))
    seen = []

    class Recording(ScriptedWorker):
        async def generate(self, tasks, **kw):
            seen.extend(t.prompt for t in tasks)
            return await super().generate(tasks, **kw)

    server = SelectorServer(settings(model=str(tmp_path)), worker=Recording())
    _select(server, {"problem": "p", "candidates": ["a RIGHT", "b"], "samples": 1, "temperature": 1.0})
    assert "0| a RIGHT\nEnd of solution 0." in seen[0] and "1| b\nEnd of solution 1." in seen[0]
    plain = SelectorServer(settings(), worker=Recording())
    _select(plain, {"problem": "p", "candidates": ["a RIGHT", "b"], "samples": 1, "temperature": 1.0})
    assert "End of solution" not in seen[1] and "0| a" not in seen[1]

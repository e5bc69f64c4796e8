"""/v1/select on one serving replica (actors/serving/selector_server.py): the knockout and the round robin of
core/algo/selection.py (the procedures the held-out evaluation runs) over the replica's RolloutWorker, with the
GenSelect prompt builder and `Judgment:` parser of core/algo/genselect.py. `server` is the replica: its `worker`,
settings `s`, prompt `style` (as the served model was trained) and `counters`.
"""
from __future__ import annotations

import time

from actors.serving.select_request import RequestError
from core.algo.genselect import build_prompt, parse_judgment
from core.algo.knockout import DoesNotFit, both_orders_pick, both_orders_scores, majority
from core.algo.round_robin import all_pairs
from core.algo.selection import knockout, round_robin
from core.records import SelectionTask


def prompt_fits(server, problem: str, candidates: list, group: list) -> bool:
    """Whether the prompt of `group` (candidate indices) fits the replica's prompt budget."""
    prompt = build_prompt(problem, [candidates[i] for i in group], style=server.style)
    return len(server.worker.encode_prompt(prompt)) <= server.s.max_prompt_tokens


async def select(server, req: dict) -> dict:
    """A parsed /v1/select request (actors/serving/select_request.py `parse_select`) on `server`: a knockout of groups
    of at most `window` candidates (`core.algo.selection.knockout`), or a round robin of pairs; 413 when a group does
    not fit the prompt budget, 422 when the request needs index log-probs a free-text model has none of."""
    check_index_logprobs(server.worker, req)
    if req["selection"] == "round_robin":
        return await round_robin_select(server, req)
    problem, candidates = req["problem"], req["candidates"]
    started = time.perf_counter()

    async def judge(judged: list) -> list:  # every group of a round in flight at once: the engine batches them
        return await judge_groups(server, req, [g for _, g in judged])

    try:
        _, (bracket,) = await knockout([len(candidates)], server.s.window, judge,
                                       fits=lambda _, g: prompt_fits(server, problem, candidates, g))
    except DoesNotFit as e:
        raise RequestError(413, "candidates", f"candidates {e.members} together exceed the prompt budget "
                                              f"of {server.s.max_prompt_tokens} tokens") from None
    versions = {v["policy_version"] for r in bracket for v in r["verdicts"] if v is not None}
    server.counters["knockout_fallbacks"] += sum(v is not None and v["local"] is None
                                                 for r in bracket[:-1] for v in r["verdicts"])
    rounds = [{"groups": r["groups"], "winners": r["winners"]} for r in bracket]
    final = bracket[-1]
    last = dict(final["verdicts"][0], group=final["groups"][0], winner=final["winners"][0])
    votes, scores = [0] * len(candidates), [None] * len(candidates)
    for j, v in zip(last["group"], last["votes"]):
        votes[j] = v
    for j, v in zip(last["group"], last.get("scores") or ()):
        scores[j] = v
    out = {
        "index": last["winner"],
        "votes": votes,
        "judgments": last["judgments"],
        "parsed": [last["group"][i] if i is not None else None for i in last["parsed"]],
        "unparsed": sum(i is None for i in last["parsed"]),
        "parse_errors": last["parse_errors"],
        "policy_version": last["policy_version"],
        "policy_versions": sorted(versions),
        "rounds": len(rounds),
        "bracket": rounds,
        "samples": req["samples"], "temperature": req["temperature"], "orders": req["orders"],
        "selection": "knockout", "seconds": round(time.perf_counter() - started, 4),
    }
    if req["orders"] == 2:
        out["scores"] = scores
    return out


def check_index_logprobs(worker, req: dict) -> None:
    """A round robin and a knockout read in both orders score the one-token index distribution
    (`RolloutWorker.index_logprobs`); a model that judges in free text (a pick-then-point selector, the
    embedded default's) has none: 422 naming the field, before any engine request."""
    if req["selection"] == "round_robin":
        field, value = "selection", "round_robin"
    elif req["orders"] == 2:
        field, value = "orders", 2
    else:
        return
    if worker.allowed_token_ids(2) is None:
        raise RequestError(422, field, f"{field}={value} reads the log-probs of a one-token index, but this model "
                                       "writes its judgment in free text (e.g. pick-then-point): use a knockout "
                                       "read in one order")


async def round_robin_select(server, req: dict) -> dict:
    """A round robin of pairs (`core.algo.selection.round_robin`): every pair read as given and reversed, in one
    batch; wins pooled by `answers` when the request sent them. 413 when a pair does not fit the prompt budget."""
    problem, candidates = req["problem"], req["candidates"]
    started = time.perf_counter()
    pairs = all_pairs(len(candidates))
    too_long = next((p for p in pairs if not prompt_fits(server, problem, candidates, list(p))), None)
    if too_long is not None:
        raise RequestError(413, "candidates", f"candidates {list(too_long)} together exceed the prompt budget "
                                              f"of {server.s.max_prompt_tokens} tokens")
    versions = set()

    async def read(orders: list) -> list:
        try:
            readings = await server.worker.index_logprobs([group_task(server.style, req, list(order), k)
                                                         for k, (_, order) in enumerate(orders)])
        except ValueError as e:  # a model that answers in free text has no index log-probs
            raise RequestError(422, "selection", f"round_robin needs the log-prob of every index: {e}") from None
        versions.update(version for _, version in readings)
        return [logprobs for logprobs, _version in readings]

    ((index, wins),) = await round_robin([len(candidates)], read, [req["answers"]])
    versions = sorted(versions)
    return {"index": index, "selection": "round_robin", "wins": [round(w, 6) for w in wins],
            "pooled_by_answer": req["answers"] is not None, "pairs": len(pairs),
            "policy_version": versions[-1], "policy_versions": versions, "rounds": 1, "orders": 2,
            "samples": 1, "temperature": 1.0, "seconds": round(time.perf_counter() - started, 4)}


def group_task(style, req: dict, group: list, i: int) -> SelectionTask:
    shown = tuple(req["candidates"][j] for j in group)
    return SelectionTask(prompt_id=f"serve/{i}", problem_id="serve", domain=req["domain"], problem=req["problem"],
                         candidates=shown, candidate_answers=shown, labels=(0.0,) * len(group), reference="",
                         prompt=build_prompt(req["problem"], list(shown), style=style))


async def judge_groups(server, req: dict, judged: list) -> list:
    """One verdict per group of a round: {local (index within the group, or None), votes, judgments, parsed
    (local indices or None), parse_errors, policy_version[, scores]}. orders=1: the majority of `samples`
    sampled judgments; orders=2: the group read as given and reversed from the log-probs of every index
    (core.algo.knockout.both_orders_pick), `scores` the summed log-probs."""
    if req["orders"] == 2:
        tasks = [group_task(server.style, req, order, i) for i, g in enumerate(judged) for order in (g, g[::-1])]
        readings = await server.worker.index_logprobs(tasks)
        verdicts = []
        for k, g in enumerate(judged):
            (forward, v1), (backward, v2) = readings[2 * k], readings[2 * k + 1]
            local = both_orders_pick(forward, backward)
            verdicts.append({"local": local, "votes": [int(i == local) for i in range(len(g))], "judgments": [],
                             "parsed": [local], "parse_errors": [], "policy_version": max(v1, v2),
                             "scores": [round(x, 6) for x in both_orders_scores(forward, backward)]})
        return verdicts
    results = await server.worker.generate([group_task(server.style, req, g, i) for i, g in enumerate(judged)],
                                         n=req["samples"], temperature=req["temperature"],
                                         max_tokens=server.s.max_response_tokens)
    verdicts = []
    for g, result in zip(judged, results):
        parsed = [parse_judgment(r.response_text, len(g), r.truncated) for r in result.rollouts]
        local, votes = majority([p.index for p in parsed], len(g))
        verdicts.append({"local": local, "votes": votes, "judgments": [r.response_text for r in result.rollouts],
                         "parsed": [p.index if p.ok else None for p in parsed],
                         "parse_errors": [p.status for p in parsed if not p.ok],
                         "policy_version": result.policy_version})
    return verdicts

"""The response forms a RolloutWorker samples (`generate_group`, one request or two per task):

* free text (a generator's solutions, or a selector's reasoning ending `Judgment: IDX`), or one constrained index token
  when the prompt ends in the answer prefix and `rollout.constrain_index` is on;
* solve-then-point (`rollout.sample_index_only`): the model's worked solution greedily, then G index tokens after it;
* pick-then-point (a tiny model whose tokenizer carries the pick-then-point template): actors/pick_point.py.
"""
from __future__ import annotations

from actors.pick_point import ends_at_pointer_mark, index_ids, index_params, pick_then_point, solve_params
from core.chat import full_response, is_pick_point
from core.records import Rollout, RolloutGroup, SelectionTask, SolveTask


async def generate_group(worker, task, prompt_ids: list, params) -> RolloutGroup:
    """The G responses of one task in the form the worker's model writes (see the module docstring)."""
    if worker.cfg.sample_index_only and isinstance(task, SelectionTask):
        return await point_after_greedy_solution(worker, task, prompt_ids, params)
    if isinstance(task, SelectionTask) and is_pick_point(worker.tokenizer):  # actors/pick_point.py
        group, requests = await pick_then_point(worker, task, prompt_ids, params)
        worker._counters["requests"] += requests
        return group
    solving = isinstance(task, SolveTask)  # a generator writes free text: no index constraint, no prefix
    allowed = None if solving else worker.allowed_token_ids(task.num_candidates)
    if allowed is not None:  # one index token: the whole response, complete by construction
        params = params.clone()
        params.allowed_token_ids, params.max_tokens = allowed, 1
    final, version, queue_s, seconds = await worker.run_request(prompt_ids, params)
    worker._counters["requests"] += 1
    timings = {"queue_s": queue_s, "generate_s": seconds}
    rollouts = [Rollout(
        prompt_id=task.prompt_id, prompt_token_ids=prompt_ids, response_token_ids=list(c.token_ids),
        behaviour_logprobs=[c.logprobs[i][t].logprob for i, t in enumerate(c.token_ids)],
        response_text=c.text if solving else full_response(worker.tokenizer, c.text), policy_version=version,
        finish_reason="stop" if allowed is not None else str(c.finish_reason),  # one index: complete
        timings=dict(timings), allowed_token_ids=allowed,
    ) for c in sorted(final.outputs, key=lambda c: c.index)]
    return RolloutGroup(task=task, rollouts=rollouts, policy_version=version, generate_seconds=seconds,
                        extras={"worker_index": worker.worker_index, "prompt_tokens": len(prompt_ids),
                                "cached_prompt_tokens": final.num_cached_tokens or 0})


async def point_after_greedy_solution(worker, task, prompt_ids: list, params) -> RolloutGroup:
    """`rollout.sample_index_only`: the worked solution greedily, up to the `#` of its `Answer: X #` line
    (one request), then G index tokens sampled among 0..N-1 after it (a second request, `params`' n and
    temperature). Each rollout's prompt is the prompt plus the solution (one shared list), its response the
    one index token, its text the solution and the index, so the verifier reads `Answer: X #k`. A solution
    that never reaches a `#` gives G empty responses (a parse failure each, nothing to train on)."""
    final, version, queue_s, seconds = await worker.run_request(prompt_ids, solve_params(params, 1), tag="s")
    worker._counters["requests"] += 1
    solution_ids = list(final.outputs[0].token_ids)
    finish_reason = str(final.outputs[0].finish_reason)
    pointed = ends_at_pointer_mark(worker.tokenizer, solution_ids)
    allowed = index_ids(worker.tokenizer, task.num_candidates, "rollout.sample_index_only") if pointed else None
    shared = list(prompt_ids) + solution_ids
    # unpointed: G empty responses, each the solution's text and finish reason
    indices, logprobs, finish = [[] for _ in range(params.n)], [[] for _ in range(params.n)], finish_reason
    if pointed:
        final, version, queue_2, seconds_2 = await worker.run_request(shared, index_params(params, params.n, allowed),
                                                                    tag="p")
        worker._counters["requests"] += 1
        queue_s, seconds = queue_s + queue_2, seconds + seconds_2
        outputs = sorted(final.outputs, key=lambda c: c.index)
        indices = [list(c.token_ids) for c in outputs]
        logprobs = [[c.logprobs[i][t].logprob for i, t in enumerate(c.token_ids)] for c in outputs]
        finish = "stop"  # one index: complete by construction
    timings = {"queue_s": queue_s, "generate_s": seconds}
    rollouts = [Rollout(
        prompt_id=task.prompt_id, prompt_token_ids=shared, response_token_ids=ids, behaviour_logprobs=lp,
        response_text=full_response(worker.tokenizer, worker.tokenizer.decode(solution_ids + ids)),
        policy_version=version, finish_reason=finish, timings=dict(timings), allowed_token_ids=allowed,
    ) for ids, lp in zip(indices, logprobs)]
    return RolloutGroup(task=task, rollouts=rollouts, policy_version=version, generate_seconds=seconds,
                        extras={"worker_index": worker.worker_index, "prompt_tokens": len(prompt_ids),
                                "solution_tokens": len(solution_ids),
                                "cached_prompt_tokens": final.num_cached_tokens or 0})

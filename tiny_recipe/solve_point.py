"""The solve-then-point response of the embedded tiny model (`tiny.sample_index_only`, `tiny.model.response=
solve_point`; docs/models.md): the model's worked solution greedily, then G index tokens sampled after it.
"""
from __future__ import annotations

from actors.rollout.forced_judgment import index_params
from actors.rollout.response_forms import ResponseForm
from core.chat import full_response
from core.records import Rollout, RolloutGroup
from tiny_recipe.pick_point import ends_at_pointer_mark, index_ids, solve_params


class SolveThenPoint(ResponseForm):
    """`point_after_greedy_solution` as a rollout worker's response form."""

    name = "solve-then-point"

    async def generate(self, worker, task, prompt_ids: list, params) -> RolloutGroup:
        return await point_after_greedy_solution(worker, task, prompt_ids, params)


async def point_after_greedy_solution(worker, task, prompt_ids: list, params) -> RolloutGroup:
    """`tiny.sample_index_only`: the worked solution greedily, up to the `#` of its `Answer: X #` line
    (one request), then G index tokens sampled among 0..N-1 after it (a second request, `params`' n and
    temperature). Each rollout's prompt is the prompt plus the solution (one shared list), its response the
    one index token, its text the solution and the index, so the verifier reads `Answer: X #k`. A solution
    that never reaches a `#` gives G empty responses (a parse failure each, nothing to train on)."""
    final, version, queue_s, seconds = await worker.run_request(prompt_ids, solve_params(params, 1), tag="s")
    worker.count_requests(1)
    solution_ids = list(final.outputs[0].token_ids)
    finish_reason = str(final.outputs[0].finish_reason)
    pointed = ends_at_pointer_mark(worker.tokenizer, solution_ids)
    allowed = index_ids(worker.tokenizer, task.num_candidates, "tiny.sample_index_only") if pointed else None
    shared = list(prompt_ids) + solution_ids
    # unpointed: G empty responses, each the solution's text and finish reason
    indices, logprobs, finish = [[] for _ in range(params.n)], [[] for _ in range(params.n)], finish_reason
    if pointed:
        final, version, queue_2, seconds_2 = await worker.run_request(shared, index_params(params, params.n, allowed),
                                                                    tag="p")
        worker.count_requests(1)
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

"""The rollout of a selector that picks, then solves and points (`tiny.model.response=pick_point`; docs/models.md).

The prompt ends in `Pick: #` (tiny_recipe.chat.PICK_POINT_TEMPLATE). One group of G rollouts of a task takes three rounds of
engine requests:

1. the pick: G index tokens g sampled among 0..N-1 after the prompt (one request, the call's n and temperature);
2. per distinct pick g (requests at once): the problem's head (`tiny_recipe.chat.pick_point_head`, written by the rollout,
   as the pretraining's rows write it after `Pick: #g`) and the model's greedy worked solution up to the `#` of its
   `Answer: X #` line;
3. per distinct pick g: the pointer, one index token k sampled after that solution for each rollout that picked g
   (one request with n = their number).

A rollout's response is `[g] + head + solution + [k]`; its loss mask is 1 at g and k only: the two sampled decisions
train, the head and the greedy solution are context the learner reads (their behaviour log-probs are 0, unused); the
solution's tokens carry `anchor_mask` 1, which `algorithm.solution_anchor` trains by likelihood (to hold the solver),
when the solution reached its pointer mark (one that did not is not reinforced: anchoring such solutions, with anchor
rows that ended without ` #`, taught the model to stop before ` #k`: 12-13% of a run's rollouts had no pointer, 0.0-0.3%
with neither). The text the verifier reads is `Pick: #g`, the head, the solution and ` #k`, whose `Answer: X #k` line
names the choice (`core.algo.genselect.parse_judgment`). A solution that never reaches `#` ends its rollouts without a
pointer: a parse failure, reward 0, which trains the pick away from picks the model cannot solve after.
"""
from __future__ import annotations

import asyncio
from collections import Counter

from actors.rollout.forced_judgment import index_params
from actors.rollout.response_forms import ResponseForm
from core.chat import PICK_MARK, POINTER_MARK, index_token_ids
from core.records import Rollout, RolloutGroup
from tiny_recipe.chat import pick_point_head
from tiny_recipe.pick_reward import blend_pick_reward, parse_pick


def index_ids(tokenizer, n: int, needed_by: str = "a pick-then-point response") -> list:
    """The token ids of the indices 0..n-1; a clear error naming `needed_by` when the tokenizer splits one of them."""
    ids = index_token_ids(tokenizer, n)
    if ids is None:
        raise ValueError(f"{needed_by} needs one token per index, but this tokenizer splits some of 0..{n - 1}")
    return ids


def ends_at_pointer_mark(tokenizer, solution_ids: list) -> bool:
    """True when a greedy solution stopped at its answer line's `#` (the stop string ends the text; the tokens must
    end there too: no token that holds `#` and more)."""
    return tokenizer.decode(solution_ids).endswith(POINTER_MARK)


def solve_params(params, reserved_tokens: int):
    """SamplingParams of the greedy solution: up to its `#` (kept in the text), within the response budget less the
    `reserved_tokens` the rest of the response takes (pick-then-point: the two indices and the head; solve-then-point:
    the index)."""
    from vllm import SamplingParams

    return SamplingParams(n=1, temperature=0.0, max_tokens=max(1, params.max_tokens - reserved_tokens),
                          stop=[POINTER_MARK], include_stop_str_in_output=True, output_kind=params.output_kind)


async def pick_then_point(worker, task, prompt_ids: list, params) -> tuple:
    """(one group of `params.n` pick-then-point rollouts of `task`, the number of engine requests it took), through
    `worker`'s engine (`RolloutWorker.run_request`; see the module docstring). The group's policy version is the
    oldest its requests ran under."""
    tokenizer = worker.tokenizer
    allowed = index_ids(tokenizer, task.num_candidates)
    final, v_pick, queue_s, seconds = await worker.run_request(prompt_ids, index_params(params, params.n, allowed),
                                                               tag="pick")
    picks = [(c.token_ids[0], c.logprobs[0][c.token_ids[0]].logprob)
             for c in sorted(final.outputs, key=lambda c: c.index)]
    head = tokenizer(pick_point_head(task.problem), add_special_tokens=False)["input_ids"]
    counts = Counter(g for g, _ in picks)

    async def solve_and_point(g: int) -> tuple:
        context = list(prompt_ids) + [g] + head
        done, v_solve, q1, s1 = await worker.run_request(context, solve_params(params, 2 + len(head)), tag="s")
        solution = list(done.outputs[0].token_ids)
        if not ends_at_pointer_mark(tokenizer, solution):  # no `#`: no pointer (a parse failure each)
            return solution, str(done.outputs[0].finish_reason), [], v_solve, q1, s1
        out, v_point, q2, s2 = await worker.run_request(context + solution, index_params(params, counts[g], allowed),
                                                        tag="p")
        pointers = [(c.token_ids[0], c.logprobs[0][c.token_ids[0]].logprob)
                    for c in sorted(out.outputs, key=lambda c: c.index)]
        return solution, "stop", pointers, min(v_solve, v_point), q1 + q2, s1 + s2

    results = dict(zip(counts, await asyncio.gather(*(solve_and_point(g) for g in counts))))
    version = min([v_pick] + [r[3] for r in results.values()])
    timings = {"queue_s": queue_s + sum(r[4] for r in results.values()),
               "generate_s": seconds + sum(r[5] for r in results.values())}
    used = Counter()
    rollouts = []
    for g, pick_logprob in picks:
        solution, finish, pointers, _, _, _ = results[g]
        tail, tail_logprobs = ([pointers[used[g]][0]], [pointers[used[g]][1]]) if pointers else ([], [])
        used[g] += 1
        response = [g] + head + solution + tail
        rollouts.append(Rollout(
            prompt_id=task.prompt_id, prompt_token_ids=prompt_ids, response_token_ids=response,
            behaviour_logprobs=[pick_logprob] + [0.0] * (len(head) + len(solution)) + tail_logprobs,
            response_text=PICK_MARK + tokenizer.decode(response), policy_version=version, finish_reason=finish,
            timings=dict(timings), allowed_token_ids=allowed,
            loss_mask=[1] + [0] * (len(head) + len(solution)) + [1] * len(tail),
            anchor_mask=[0] * (1 + len(head)) + [int(bool(pointers))] * len(solution) + [0] * len(tail)))
    solution_tokens = [len(results[g][0]) for g, _ in picks]
    group = RolloutGroup(task=task, rollouts=rollouts, policy_version=version, generate_seconds=timings["generate_s"],
                         extras={"worker_index": worker.worker_index, "prompt_tokens": len(prompt_ids),
                                 "distinct_picks": len(counts),
                                 "solution_tokens": sum(solution_tokens) / len(solution_tokens),
                                 "cached_prompt_tokens": final.num_cached_tokens or 0})
    return group, 1 + sum(1 + bool(r[2]) for r in results.values())


class PickThenPoint(ResponseForm):
    """`pick_then_point` as a rollout worker's response form (the embedded default's selector). `pick_reward`
    (`tiny.pick_reward`, w in [0, 1]): the weight of the pick in the reward (`blend_pick_reward`), credited by the
    verifier pool through the form's `credited_candidates` and `credit`; 0: the selection reward alone."""

    name = "pick-then-point"

    def __init__(self, pick_reward: float = 0.0):
        if not 0.0 <= pick_reward <= 1.0:
            raise ValueError(f"tiny.pick_reward must be in [0, 1], got {pick_reward}")
        self.pick_reward = float(pick_reward)

    def __repr__(self) -> str:
        return f"PickThenPoint(pick_reward={self.pick_reward})"

    @property
    def credits_candidates(self) -> bool:
        return self.pick_reward > 0

    def credited_candidates(self, response_text: str, num_candidates: int) -> tuple:
        """The response's pick (`Pick: #g`), when the pick is credited and the response has one in range."""
        pick = parse_pick(response_text, num_candidates) if self.pick_reward else None
        return () if pick is None else (pick,)

    def credit(self, reward: float, scores: tuple) -> float:
        """(1 - w) * reward + w * the pick's score (0 without a pick): `blend_pick_reward`."""
        if not self.pick_reward:
            return reward
        return blend_pick_reward(reward, scores[0] if scores else None, self.pick_reward)

    async def generate(self, worker, task, prompt_ids: list, params) -> RolloutGroup:
        group, requests = await pick_then_point(worker, task, prompt_ids, params)
        worker.count_requests(requests)
        return group

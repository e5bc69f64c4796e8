"""How a RolloutWorker turns one task's prompt into its G rollouts: the `ResponseForm` interface and the general form.

`ResponseForm.generate(worker, task, prompt_ids, params) -> RolloutGroup` runs the requests of one group on
`worker`'s engine and builds its rollouts: token ids, behaviour log-probs, the text the verifier parses, and the loss
mask. The launcher hands the worker its form (`RolloutWorker(response_form=...)`, chosen per model by
`driver.models.registry.response_form` from the model's hooks), so a model whose response needs more than one request
brings its own form without the actors knowing it. A form uses the worker through `FormWorker` alone (below), never
its private state.

The verifier pool holds the same form and asks it how a response's reward reads more than its final judgment
(`credited_candidates`, `credit`; actors/verifier/verifier_pool.py): a form that makes a decision before the final one
(the tiny recipe's pick) credits it there, so no general code carries a setting of one form.

* `FreeText` (every model, and the default): one request of G samples. A model with a chat template writes free
  text (a generator's solutions, or a selector's reasoning ending `Judgment: IDX`); a prompt that ends in the answer
  prefix with `rollout.constrain_index` on samples exactly one index token among 0..N-1 (a direct index).
* The embedded tiny recipe's forms, solve-then-point and pick-then-point: tiny_recipe/solve_point.py and
  tiny_recipe/pick_point.py.

A generator's solve tasks always take `FreeText`, whatever the selector's form (`generate_group`).
"""
from __future__ import annotations

from typing import Any, Optional, Protocol

from core.chat import full_response
from core.records import Rollout, RolloutGroup, SelectionTask, SolveTask


class FormWorker(Protocol):
    """What a response form may use of the rollout worker that runs it (actors/rollout/rollout_worker.py's
    RolloutWorker)."""

    #: the engine's tokenizer (a transformers tokenizer)
    tokenizer: Any
    #: the worker's index among the run's rollout workers (reported in a group's extras)
    worker_index: int
    #: the tokenizer's end tokens (core.chat.end_token_ids): a response ends at any of them
    end_ids: list

    async def run_request(self, prompt_token_ids: list, params, tag: str = "w") -> tuple:
        """(the finished vLLM RequestOutput, the policy version it ran under, seconds queued, seconds generating) of
        one engine request admitted under one policy version."""

    def count_requests(self, requests: int) -> None:
        """Count `requests` engine requests in the worker's `describe()` (a form calls it once per group)."""

    def allowed_token_ids(self, num_candidates: int) -> Optional[list]:
        """The index tokens 0..num_candidates-1 a direct index is constrained to, or None (free text)."""


class ResponseForm:
    """One group of G rollouts of a selection task, sampled on the worker's engine (see the module docstring).
    Subclasses are plain picklable objects: a Ray actor receives its form as a constructor argument."""

    #: the name a run's logs and the rollout's `describe()` report
    name = "response form"

    async def generate(self, worker: FormWorker, task, prompt_ids: list, params) -> RolloutGroup:
        raise NotImplementedError

    @property
    def credits_candidates(self) -> bool:
        """Whether the reward reads more than the final judgment (`credited_candidates`, `credit`); a user's
        reward function (`verifier.reward.name`), which replaces the built-in reward, cannot be combined with such a
        form."""
        return False

    def credited_candidates(self, response_text: str, num_candidates: int) -> tuple:
        """The candidates (indices in 0..num_candidates-1) a response names besides its final judgment whose own
        verification its reward reads; the verifier checks them with the final one (cached alike)."""
        return ()

    def credit(self, reward: float, scores: tuple) -> float:
        """The reward of a response whose final judgment earned `reward` (the selection reward) and whose
        `credited_candidates` scored `scores` (one each, in [0, 1]); the default: `reward` itself."""
        return reward

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class FreeText(ResponseForm):
    """One request of `params.n` samples: free text, or one constrained index token (see the module docstring)."""

    name = "free text"

    async def generate(self, worker: FormWorker, task, prompt_ids: list, params) -> RolloutGroup:
        solving = isinstance(task, SolveTask)  # a generator writes free text: no index constraint, no prefix
        allowed = None if solving else worker.allowed_token_ids(task.num_candidates)
        if allowed is not None:  # one index token: the whole response, complete by construction
            params = params.clone()
            params.allowed_token_ids, params.max_tokens = allowed, 1
        final, version, queue_s, seconds = await worker.run_request(prompt_ids, params)
        worker.count_requests(1)
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


FREE_TEXT = FreeText()


def free_text(model_dir, cfg) -> FreeText:
    """`rollout.response_form.name=free_text` (core/response_forms.py): the general form, whatever the model's own."""
    return FreeText()


async def generate_group(worker, task, prompt_ids: list, params) -> RolloutGroup:
    """The G responses of one task: a selection task in the worker's form, a generator's solve task in free text."""
    form = worker.response_form if isinstance(task, SelectionTask) else FREE_TEXT
    return await form.generate(worker, task, prompt_ids, params)

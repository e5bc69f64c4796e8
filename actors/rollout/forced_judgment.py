"""The forced-judgment response form (`rollout.response_form.name=forced_judgment`): every response of any chat model
ends in a judgment.

Budget forcing as s1 does it (Muennighoff et al., arXiv 2501.19393, section 3.1: at the thinking budget, append the
end-of-thinking delimiter and the answer prefix, and let the model answer), for a selector:

1. Reasoning: G responses sampled as usual (the call's n and temperature), at most `reasoning_budget` B tokens,
   ending early at the model's end token or right after its own `Judgment: k` (stop strings for k in 0..N-1).
2. A response whose text parses as a judgment (`core.algo.genselect.parse_judgment`) keeps it: the model's own,
   trained as written (`Rollout.forced` False).
3. Else the system appends the judgment prefix (`Judgment: `, after a newline where the reasoning has text; its
   tokens carry loss mask 0 and behaviour log-prob 0) and samples the index among the valid ones 0..N-1:
   level by level through the token trie of the indices (`IndexTokens`: one level where every index is one token;
   multi-token indices such as `12` take a level per token, with an end token where an index is a prefix of another;
   a tokenizer that merges the space and the digits writes the prefix as `Judgment:` and the indices as ` k`).
   Each index token's behaviour log-prob is over the tokens it was sampled among (`Rollout.allowed_ids_by_token`),
   and the learner normalises over the same set.

B = 0 is the index-only form: step 1 is skipped and the G indices are sampled right after the prompt and the prefix.
"""
from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

from actors.rollout.response_forms import ResponseForm
from core.algo.genselect import parse_judgment
from core.chat import ANSWER_PREFIX, answer_prefix
from core.records import Rollout, RolloutGroup

JUDGMENT_PREFIX = ANSWER_PREFIX  # `Judgment: `
_END = -1  # a trie node's key for "an index ends here"


@dataclass
class IndexTokens:
    """How a tokenizer writes `Judgment: k` for k in 0..N-1 after a forced prefix.

    prefix_text, prefix_ids: the forced prefix (`Judgment: ` or, where the tokenizer merges a space into the digits,
    `Judgment:`); tails: N token-id lists, index k's tokens right after the prefix; trie: {token: subtrie}, with
    `_END: k` where index k ends; end_id: the token that ends an index that is a prefix of another (e.g. `1` of `12`).
    """
    prefix_text: str
    prefix_ids: list
    tails: list
    trie: dict = field(default_factory=dict)
    end_id: Optional[int] = None

    @classmethod
    def of(cls, tokenizer, num_candidates: int, end_id: Optional[int]) -> "IndexTokens":
        def encode(text: str) -> list:
            return tokenizer(text, add_special_tokens=False)["input_ids"]

        for prefix, gap in ((JUDGMENT_PREFIX, ""), (JUDGMENT_PREFIX.rstrip(), " ")):
            prefix_ids = encode(prefix)
            whole = [encode(prefix + gap + str(k)) for k in range(num_candidates)]
            if all(w[:len(prefix_ids)] == prefix_ids and len(w) > len(prefix_ids) for w in whole):
                tails = [w[len(prefix_ids):] for w in whole]
                break
        else:  # the tokenizer merges the prefix into the digits either way: each index's tokens on their own
            prefix, prefix_ids = JUDGMENT_PREFIX, encode(JUDGMENT_PREFIX)
            tails = [encode(str(k)) for k in range(num_candidates)]
        index = cls(prefix, prefix_ids, tails, end_id=end_id)
        index.trie = index_trie(tails)
        if index.needs_end_token() and end_id is None:
            raise ValueError("the forced judgment needs an end token: an index's tokens are a prefix of another's "
                             "and the tokenizer has no end-of-sequence token")
        return index

    def needs_end_token(self) -> bool:
        def walk(node: dict) -> bool:
            children = [k for k in node if k != _END]
            return (_END in node and bool(children)) or any(walk(node[k]) for k in children)
        return walk(self.trie)


def index_trie(tails: list) -> dict:
    """{token: subtrie} of the token lists `tails` (index k's tokens), `_END: k` where index k ends."""
    root: dict = {}
    for k, ids in enumerate(tails):
        node = root
        for token in ids:
            node = node.setdefault(token, {})
        node[_END] = k
    return root


def own_judgment_stops(num_candidates: int) -> list:
    """Stop strings that end a reasoning right after the model's own judgment: `Judgment: k` for every k that is no
    prefix of another valid index (`Judgment: 1` would cut `Judgment: 12`)."""
    names = [str(k) for k in range(num_candidates)]
    return [JUDGMENT_PREFIX + k for k in names if not any(o != k and o.startswith(k) for o in names)]


@dataclass
class SampledIndex:
    """One forced index: its tokens, their behaviour log-probs, what each was sampled among, the index."""
    token_ids: list
    logprobs: list
    allowed: list
    index: int


async def sample_index(worker, context_ids: list, n: int, index: IndexTokens, params) -> tuple:
    """(n `SampledIndex`es sampled after `context_ids`, the oldest policy version their requests ran under): one
    request a trie level, each sampling among that level's tokens at `params`' temperature."""
    async def descend(node: dict, context: list, count: int) -> list:
        children = sorted(k for k in node if k != _END)
        if not children:
            return [SampledIndex([], [], [], node[_END])] * count, None
        allowed = children + ([index.end_id] if _END in node else [])
        final, version, _, _ = await worker.run_request(context, index_params(params, count, allowed), tag="j")
        picks = [(c.token_ids[0], c.logprobs[0][c.token_ids[0]].logprob)
                 for c in sorted(final.outputs, key=lambda c: c.index)]
        branches = {}
        for token, times in Counter(t for t, _ in picks).items():
            if token == index.end_id and _END in node:
                branches[token] = ([SampledIndex([], [], [], node[_END])] * times, None)
            else:
                branches[token] = await descend(node[token], context + [token], times)
        used, out, versions = Counter(), [], [version]
        for token, logprob in picks:
            rest, v = branches[token]
            versions.append(v)
            tail = rest[used[token]]
            used[token] += 1
            out.append(SampledIndex([token] + tail.token_ids, [logprob] + tail.logprobs, [allowed] + tail.allowed,
                                    tail.index))
        return out, min(v for v in versions if v is not None)

    return await descend(index.trie, list(context_ids), n)


def index_params(params, n: int, allowed: list):
    """SamplingParams of `n` one-token samples among `allowed`, at `params`' temperature and top_p (the index
    tokens of a forced judgment, and the tiny recipe's pointers)."""
    from vllm import SamplingParams

    return SamplingParams(n=n, temperature=params.temperature, top_p=params.top_p, max_tokens=1, logprobs=0,
                          allowed_token_ids=allowed, output_kind=params.output_kind)


@dataclass
class Reasoning:
    """One sampled reasoning: tokens, behaviour log-probs, text, finish reason, policy version (None: no reasoning
    was sampled, B = 0)."""
    token_ids: list
    logprobs: list
    text: str
    finish_reason: str
    version: Optional[int]


class ForcedJudgment(ResponseForm):
    """Reasoning up to `reasoning_budget` tokens, then a judgment: the model's own, or a forced one (module
    docstring)."""

    name = "forced judgment"

    def __init__(self, reasoning_budget: int = 0):
        if reasoning_budget < 0:
            raise ValueError(f"reasoning_budget must be >= 0, got {reasoning_budget}")
        self.reasoning_budget = reasoning_budget

    def __repr__(self) -> str:
        return f"ForcedJudgment(reasoning_budget={self.reasoning_budget})"

    @classmethod
    def of(cls, model_dir, cfg, reasoning_budget: int = 0) -> "ForcedJudgment":
        """`rollout.response_form.name=forced_judgment` (core/response_forms.py): the section's `reasoning_budget`,
        handed in as a keyword by the registry."""
        return cls(reasoning_budget)

    async def generate(self, worker, task, prompt_ids: list, params) -> RolloutGroup:
        if answer_prefix(worker.tokenizer):
            raise ValueError("rollout.response_form.name=forced_judgment needs a model with a chat template (it "
                             "reasons before its judgment); a model without one already answers with the index alone "
                             "(rollout.constrain_index)")
        eos = worker.tokenizer.eos_token_id
        index = IndexTokens.of(worker.tokenizer, task.num_candidates, eos if eos is not None else
                               (worker.end_ids or [None])[0])
        reasonings, queue_s, seconds, requests = await self._reason(worker, task, prompt_ids, params)
        rollouts, forced_at = [], []
        for r in reasonings:
            judged = parse_judgment(r.text, task.num_candidates, r.finish_reason == "length").index is not None
            rollouts.append(_own_rollout(task, prompt_ids, r) if judged else None)
            if not judged:
                forced_at.append(len(rollouts) - 1)
        if forced_at:
            started = asyncio.get_running_loop().time()
            contexts = [forced_context(worker, reasonings[i], index) for i in forced_at]
            sampled = await self._force(worker, prompt_ids, contexts, index, params)
            seconds += asyncio.get_running_loop().time() - started
            requests += len(contexts) if self.reasoning_budget else 1
            for i, context, (picked, version) in zip(forced_at, contexts, sampled):
                oldest = version if reasonings[i].version is None else min(version, reasonings[i].version)
                rollouts[i] = _forced_rollout(task, prompt_ids, reasonings[i], context, picked, oldest)
        worker.count_requests(requests)
        timings = {"queue_s": queue_s, "generate_s": seconds}
        for r in rollouts:
            r.timings = dict(timings)
        version = min(r.policy_version for r in rollouts)
        return RolloutGroup(task=task, rollouts=rollouts, policy_version=version, generate_seconds=seconds,
                            extras={"worker_index": worker.worker_index, "prompt_tokens": len(prompt_ids),
                                    "forced_judgments": len(forced_at)})

    async def _reason(self, worker, task, prompt_ids: list, params) -> tuple:
        """(G `Reasoning`s, queue seconds, generate seconds, requests); B = 0: G empty ones, no request."""
        if self.reasoning_budget == 0:
            return [Reasoning([], [], "", "stop", None) for _ in range(params.n)], 0.0, 0.0, 0
        reason = params.clone()
        reason.max_tokens = min(self.reasoning_budget, params.max_tokens)
        reason.stop, reason.include_stop_str_in_output = own_judgment_stops(task.num_candidates), True
        final, version, queue_s, seconds = await worker.run_request(prompt_ids, reason, tag="r")
        reasonings = [Reasoning(list(c.token_ids), [c.logprobs[i][t].logprob for i, t in enumerate(c.token_ids)],
                                c.text, str(c.finish_reason), version)
                      for c in sorted(final.outputs, key=lambda c: c.index)]
        return reasonings, queue_s, seconds, 1

    async def _force(self, worker, prompt_ids: list, contexts: list, index: IndexTokens, params) -> list:
        """Per `ForcedContext`, (its SampledIndex, policy version): B = 0 shares one request of n = G."""
        if self.reasoning_budget == 0:
            picked, version = await sample_index(worker, list(prompt_ids) + contexts[0].prefix_ids, len(contexts),
                                                 index, params)
            return [(p, version) for p in picked]
        calls = [sample_index(worker, list(prompt_ids) + c.body + c.prefix_ids, 1, index, params) for c in contexts]
        return [(picked[0], version) for picked, version in await asyncio.gather(*calls)]


@dataclass
class ForcedContext:
    """What precedes a forced index: the reasoning's tokens kept (`body`), the prefix's tokens and text."""
    body: list
    prefix_ids: list
    prefix_text: str


def forced_context(worker, reasoning: Reasoning, index: IndexTokens) -> ForcedContext:
    """The reasoning with a trailing end token dropped, then the prefix, after a newline where the reasoning has
    text that does not end in one."""
    body = list(reasoning.token_ids)
    while body and body[-1] in worker.end_ids:
        body.pop()
    if reasoning.text.strip() and not reasoning.text.endswith("\n"):
        newline = worker.tokenizer("\n", add_special_tokens=False)["input_ids"]
        return ForcedContext(body, newline + list(index.prefix_ids), "\n" + index.prefix_text)
    return ForcedContext(body, list(index.prefix_ids), index.prefix_text)


def _own_rollout(task, prompt_ids: list, r: Reasoning) -> Rollout:
    """A response whose judgment the model wrote: trained as written."""
    return Rollout(prompt_id=task.prompt_id, prompt_token_ids=prompt_ids, response_token_ids=list(r.token_ids),
                   behaviour_logprobs=list(r.logprobs), response_text=r.text, policy_version=r.version,
                   finish_reason=r.finish_reason)


def _forced_rollout(task, prompt_ids: list, r: Reasoning, context: ForcedContext, picked: SampledIndex,
                    version: int) -> Rollout:
    """The reasoning (sampled: trained), the forced prefix (written: loss 0, log-prob 0), the index (sampled among the
    valid tokens of each level: trained, normalised over them)."""
    body, prefix = context.body, context.prefix_ids
    kept = len(body)
    return Rollout(
        prompt_id=task.prompt_id, prompt_token_ids=prompt_ids, response_token_ids=body + prefix + picked.token_ids,
        behaviour_logprobs=list(r.logprobs[:kept]) + [0.0] * len(prefix) + list(picked.logprobs),
        response_text=r.text + context.prefix_text + str(picked.index), policy_version=version, finish_reason="stop",
        loss_mask=[1] * kept + [0] * len(prefix) + [1] * len(picked.token_ids),
        allowed_ids_by_token=[None] * (kept + len(prefix)) + list(picked.allowed), forced=True)

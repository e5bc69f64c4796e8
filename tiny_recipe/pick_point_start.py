"""The format-only warm-start of a selector that picks, then solves and points (`tiny.warm_start.target=pick_point`,
`tiny.model.response=pick_point`).

A row is the prompt (ending `Pick: #`), then the response `g` + the problem's head (`tiny_recipe.chat.pick_point_head`) + the
model's own greedy solution written after that pick, cut after its first `Answer: X` line + ` #k`, a newline and EOS.
Two of its tokens are trained towards soft targets, neither read from a label:

* the pick g: uniform over the indices 0..N-1 (the pick knows nothing yet; RL teaches it);
* the pointer k, by `tiny.warm_start.pointer`: `own_answer` (the default), uniform over the candidates whose final
  answer is the model's own X where any is (naming a candidate that states your answer), else the pick g itself
  (`rule_targets`: learned in 50-100 supervised steps, 0.91-0.99 on held-out pairs); `uniform`, uniform over 0..N-1
  (the format only: the start knows no check, and any check is RL's; it leaves the pick untrained); `pick`, half
  towards the pick g and half uniform over 0..N-1 (the format only, and the pointer repeats the pick more often than
  not, so the pick's choice reaches the reward from the first RL step).

Every other response token is trained as written (the head, the model's own solution: an anchor whose loss starts near
0, as the `pointer` target's; with the solution as context only, the index target raised single digits everywhere and
the arithmetic fell apart, parse rate 0.00). The pick g of each row is drawn uniformly, so the pointer is trained
after every pick, not after the model's likeliest one.
"""
from __future__ import annotations

import random

from core.chat import index_token_ids, prompt_token_ids
from tiny_recipe.chat import pick_point_head

SOLUTION_TOKENS = 96  # new tokens the greedy solution may take (as the `pointer` target's POINTER_TOKENS)


def normalize_answer(answer) -> str | None:
    """A final answer as the rule compares it: stripped, a trailing period dropped; None when empty."""
    text = "" if answer is None else str(answer).strip().rstrip(".").strip()
    return text or None


def rule_targets(candidate_answers, own, pick: int) -> list:
    """The indices the pointer rule allows: the candidates stating `own` (normalised) where any does, else [pick]."""
    stated = [i for i, a in enumerate(candidate_answers) if own is not None and normalize_answer(a) == own]
    return stated or [pick]


def pointer_targets(task, own, pick: int, pointer: str = "own_answer") -> list:
    """The indices the pointer is trained towards, repeated by weight (the soft target is uniform over the list's
    entries): `rule_targets` for 'own_answer'; every index for 'uniform'; for 'pick', the pick N times and every
    index once, i.e. 1/2 * one-hot(pick) + 1/2 * uniform over the N indices (the pick gets 1/2 + 1/(2N))."""
    everyone = list(range(task.num_candidates))
    if pointer == "uniform":
        return everyone
    if pointer == "pick":
        return [pick] * task.num_candidates + everyone
    if pointer != "own_answer":
        raise ValueError(f"tiny.warm_start.pointer must be 'own_answer', 'uniform' or 'pick', not {pointer!r}")
    return rule_targets(task.candidate_answers, own, pick)


def pick_point_rows(model, tokenizer, tasks: list, rng: random.Random, dtype: str = "float32",
                    pointer: str = "own_answer") -> list:
    """[(task index, prompt ids, response ids, soft targets)] for `tasks`, soft targets [(response position, token ids
    the target spreads over)] for the pick and the pointer (module docstring; `pointer` chooses the pointer's target).
    Tasks whose greedy solution writes no `Answer:` line, or whose pointer would merge into the answer's last token,
    are left out."""
    from tiny_recipe.greedy import first_answer, greedy_continuations, with_pointer

    ids = index_token_ids(tokenizer, max(t.num_candidates for t in tasks))
    if ids is None:
        raise ValueError("tiny.warm_start.target=pick_point needs one token per index")
    picks = [rng.randrange(t.num_candidates) for t in tasks]
    prompts = [prompt_token_ids(tokenizer, t.prompt) for t in tasks]
    heads = [tokenizer(pick_point_head(t.problem), add_special_tokens=False)["input_ids"] for t in tasks]
    contexts = [p + [ids[g]] + h for p, g, h in zip(prompts, picks, heads)]
    rows = []
    for i, text in enumerate(greedy_continuations(model, tokenizer, contexts, SOLUTION_TOKENS, dtype=dtype)):
        answered = first_answer(text)
        if not answered:
            continue
        targets = pointer_targets(tasks[i], normalize_answer(answered[1]), picks[i], pointer)
        k = rng.choice(targets)  # the token written; its loss is the soft target's
        cut_ids, full = with_pointer(tokenizer, answered[0], k) or ([], [])
        tail = full[len(cut_ids):]
        if ids[k] not in tail:  # no clean pointer: it merged into the answer's last token
            continue
        response = [ids[picks[i]]] + heads[i] + full + [tokenizer.eos_token_id]
        pointer_at = 1 + len(heads[i]) + len(cut_ids) + tail.index(ids[k])
        soft = [(0, ids[:tasks[i].num_candidates]), (pointer_at, [ids[j] for j in targets])]
        rows.append((i, prompts[i], response, soft))
    return rows

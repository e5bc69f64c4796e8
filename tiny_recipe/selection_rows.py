"""Pretraining rows that read selection prompts without any label (`tiny.pretrain.context_steps`, `pointer_share`).

A selector writes after a long prompt of candidates, where a model pretrained on short worked solutions alone solves
far fewer problems than at the start of a text (0.3-17% against 56-74%; BENCHMARKS.md). Two kinds of row put a
*training* selection prompt before the text the loss reads; neither reads which candidate is correct:

* context row: the prompt of one training task (with `tiny.pretrain.pick_line`, then a blank line and `Pick: #g`,
  g a random index), a blank line, then a correct worked solution of *another*, fresh procedural problem (the model
  learns to solve where a selector writes, not to copy this prompt's candidates);
* pointer row: the prompt of one training task in the beside layout (`tiny.answer_labels`: each candidate's answer
  line reads `Answer: X #i`), a blank line, then `Answer: X #i` for each distinct final answer X of its candidates
  (i: the first candidate stating it), in random order: finding a stated answer's candidate, by copying.

A row is (context token ids, target token ids), the pair `driver.models.sft.collate` pads: the loss reads
the target only.
"""
from __future__ import annotations

import random


def context_row(tokenizer, before: str, text: str) -> tuple:
    """(context ids, target ids) of `before`, a blank line, then `text` + EOS, tokenized as one string and split
    where `text` begins (so the tokens at the seam are the ones the whole string gives)."""
    joined = before + "\n\n" + text
    enc = tokenizer(joined, return_offsets_mapping=True)
    start = len(before) + 2
    split = next((i for i, (a, _) in enumerate(enc["offset_mapping"]) if a >= start), len(enc["input_ids"]))
    return enc["input_ids"][:split], enc["input_ids"][split:] + [tokenizer.eos_token_id]


def with_pick_line(task, rng: random.Random) -> str:
    """`task`'s prompt, a blank line and `Pick: #g` (core.chat.PICK_MARK), g drawn uniformly from its indices: what
    a response that picks first writes before its solution (`tiny.pretrain.pick_line`); no label is read."""
    from core.chat import PICK_MARK

    return f"{task.prompt}\n\n{PICK_MARK}{rng.randrange(task.num_candidates)}"


def pointer_text(candidate_answers, rng: random.Random) -> str:
    """`Answer: X #i` lines, one for each distinct final answer X of `candidate_answers` (i: the first candidate
    stating X), in an order drawn from `rng`."""
    first: dict = {}
    for i, answer in enumerate(candidate_answers):
        first.setdefault(str(answer).strip(), i)
    pairs = list(first.items())
    rng.shuffle(pairs)
    return "".join(f"Answer: {a} #{i}\n" for a, i in pairs)


def pointer_row(tokenizer, task, rng: random.Random) -> tuple:
    """The pointer row of `task` (a SelectionTask whose prompt is in the beside layout)."""
    return context_row(tokenizer, task.prompt, pointer_text(task.candidate_answers, rng))


def solution_row(tokens: list) -> tuple:
    """A worked-solution row: no context, every token a target (its own first token has no prediction)."""
    return [], list(tokens)

"""Stage 3b of a step (`tiny.anchor_corpus_rows`): worked solutions of fresh procedural problems, appended to the
step's sequences as anchor-only sequences, to hold the solver the pick-then-point response reads while RL moves it.

RL trains two index tokens of a pick-then-point response; the worked solution between them is the model's own and
lives in the same weights, which RL moves (without an anchor the share of correct own answers fell by up to 9 points
in 60 steps). This stage mixes the pretraining's language modelling into the RL loss, as InstructGPT's PPO-ptx mixes
its pretraining data (arXiv 2203.02155 eq. 2): each step, `anchor_corpus_rows` sequences, each a training prompt of
the step's batch, a pick index drawn uniformly, then `tiny_recipe.chat.pick_point_head` of a fresh problem and that problem's
correct worked solution up to its answer line's pointer mark (` #`), as the rollout's greedy solutions end: the
pretraining's context rows in the rollout's form. A row that ends `Answer: X`, a newline and EOS instead trains the
model to end its solution without the mark: 12-13% of the rollouts had no pointer (reward 0), up to 45% in one step,
against 0.0-0.3% with rows that end at the mark (BENCHMARKS.md). Every token after the pick carries `anchor_mask` 1
and loss mask 0: the learner's `algorithm.solution_anchor` term trains them by likelihood, the DAPO loss does not see
them. No selection label is read (the solution is of another problem than the prompt's), and the problems are never
held-out ones (compared by `procedural.problem_key`). Deterministic for (seed, step): a resumed run builds the same
rows.
"""
from __future__ import annotations

import random

from core.chat import POINTER_MARK
from tiny_recipe.chat import pick_point_head
from core.records import TrainSequence


def fresh_worked_solutions(count: int, seed: int, step: int, exclude_keys: frozenset) -> list:
    """[(problem, correct worked solution)] of `count` procedural problems drawn for (seed, step), none whose
    `problem_key` is in `exclude_keys` (held-out problems)."""
    from driver.data import procedural

    rows = procedural.generate(count * 2 + 8, 1, f"anchor-{seed}-{step}", procedural.ProceduralSpec(error_rate=0.0))
    kept = [(r["problem"], r["candidates"][0]) for r in rows if procedural.problem_key(r["problem"]) not in exclude_keys]
    if len(kept) < count:
        raise ValueError(f"anchor_corpus_rows: only {len(kept)} of {count} fresh problems are not held-out ones")
    return kept[:count]


def corpus_anchor_sequences(groups: list, tokenizer, count: int, seed: int, step: int,
                            exclude_keys: frozenset) -> list:
    """`count` anchor-only TrainSequences (see the module docstring) after the prompts of `groups` (scored
    RolloutGroups of pick-then-point rollouts, taken in turn). Each shares its group's prompt list (packed with the
    group, computed once) and allowed ids; response `[g] + head + solution + " #"` (no index after the mark, no EOS),
    loss mask all 0, anchor mask 0 at g and 1 after it, advantage 0, behaviour log-probs 0.0 (unused)."""
    if count <= 0 or not groups:
        return []
    rng = random.Random(f"anchor-rows-{seed}-{step}")
    out = []
    for i, (problem, solution) in enumerate(fresh_worked_solutions(count, seed, step, exclude_keys)):
        first = groups[i % len(groups)].rollouts[0]
        allowed = first.allowed_token_ids
        if not allowed:
            raise ValueError("anchor_corpus_rows needs pick-then-point rollouts (tiny.model.response=pick_point)")
        text = pick_point_head(problem) + solution.strip() + " " + POINTER_MARK
        body = tokenizer(text, add_special_tokens=False)["input_ids"]
        response = [rng.choice(allowed)] + body
        out.append(TrainSequence(prompt_token_ids=first.prompt_token_ids, response_token_ids=response,
                                 behaviour_logprobs=[0.0] * len(response), advantage=0.0,
                                 policy_version=first.policy_version, allowed_token_ids=allowed,
                                 loss_mask=[0] * len(response), anchor_mask=[0] + [1] * len(body)))
    return out


class AnchorRows:
    """Stage 3b as a hook of the loop: `rows(sequences, groups, step)` returns the step's `driver.step.Sequences`
    with `count` anchor-only rows added after the step's prompts (`corpus_anchor_sequences`) and their counts in the
    batch statistics. The model's tokenizer is loaded at the first step; `heldout_problems`: problem texts no row may
    compute (compared by `procedural.problem_key`)."""

    def __init__(self, count: int, seed: int, model_dir: str, heldout_problems):
        from driver.data.procedural import problem_key

        self.count, self.seed, self.model_dir = count, seed, str(model_dir)
        self.heldout = frozenset(problem_key(p) for p in heldout_problems)
        self.tokenizer = None

    def __call__(self, sequences, groups: list, step: int):
        import dataclasses

        if self.tokenizer is None:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        rows = corpus_anchor_sequences(groups, self.tokenizer, self.count, self.seed, step, self.heldout)
        stats = {**sequences.stats, "batch/anchor_rows": len(rows),
                 "batch/anchor_tokens": sum(s.num_anchor_tokens for s in sequences.sequences + rows)}
        return dataclasses.replace(sequences, sequences=sequences.sequences + rows, stats=stats)


def extra_rows(cfg, model_dir, heldout_problems: list):
    """The `extra_rows` hook a tiny model names (driver/models/hooks.py): `tiny.anchor_corpus_rows` anchor rows a
    step (`AnchorRows`, seeded by the run's `seed`, kept off `heldout_problems`), or None when off."""
    count = cfg.tiny.anchor_corpus_rows
    return AnchorRows(count, cfg.seed, model_dir, heldout_problems) if count > 0 else None

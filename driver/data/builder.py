"""GenSelect selection-task builder (Learning Generative Selection for Best-of-N, arXiv 2602.02143, sec. 3).

Rules, in the order they are applied (every stage is counted in `BuildStats`, which ends in the manifest):

1. Candidates longer than `max_candidate_chars` (after stripping `<think>` traces) are dropped from their
   problem's pool (`genselect.CandidateTooLong`; counted as `candidates_too_long`).
2. Problem filter: keep problems with >= 1 correct candidate and at most `max_correct_fraction` correct
   (the paper keeps <= 50%: problems the generator always solves teach selection nothing), and with at
   least `min_candidates` candidates left, one of them wrong.
3. Split train / held-out **by problem** (never by prompt), seeded.
4. Per kept problem, up to `prompts_per_problem` prompts, each of `min_candidates..max_candidates`
   candidates drawn without replacement from the pool, with at least one correct and one wrong; the order
   is shuffled and indices are tracked explicitly (a candidate's label travels with its index, so
   duplicate texts keep their own labels). Identical draws are not repeated.
5. Token budget (`apply_budget`, once the tokenizer is known): prompts over `max_prompt_tokens` are dropped
   and counted, never truncated.

"Correct" is a label of 1.0 (math: answer verified equal; code: every unit test passes).
"""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from core.algo.genselect import PLAIN, CandidateTooLong, PromptStyle, build_prompt, strip_thinking
from core.records import SelectionTask
from driver.data.problem import RawProblem


@dataclass
class BuildStats:
    """Counts at every stage of the builder."""
    problems_in: int = 0
    candidates_in: int = 0
    candidates_too_long: int = 0
    problems_no_correct: int = 0
    problems_too_many_correct: int = 0
    problems_too_few_candidates: int = 0
    problems_kept: int = 0
    prompts_built: int = 0
    prompts_too_long_chars: int = 0
    prompts_over_token_budget: int = 0
    prompts_kept: int = 0

    def to_dict(self) -> dict:
        return dict(vars(self))


def filter_problems(problems: list, max_correct_fraction: float, min_candidates: int,
                    max_candidate_chars: int, stats: BuildStats) -> list:
    """Rules 1-2: drop over-long candidates, then keep problems with 1..max_correct_fraction correct."""
    kept = []
    for p in problems:
        stats.problems_in += 1
        stats.candidates_in += len(p.candidates)
        keep = [i for i, c in enumerate(p.candidates) if len(strip_thinking(c)) <= max_candidate_chars]
        stats.candidates_too_long += len(p.candidates) - len(keep)
        p = _subset(p, keep)
        n_correct, n = p.num_correct, len(p.candidates)
        if n_correct == 0:
            stats.problems_no_correct += 1
        elif n == 0 or n_correct / len(keep) > max_correct_fraction:
            stats.problems_too_many_correct += 1
        elif n < min_candidates or n_correct == n:
            stats.problems_too_few_candidates += 1
        else:
            kept.append(p)
    stats.problems_kept += len(kept)
    return kept


def _subset(p: RawProblem, keep: list) -> RawProblem:
    if len(keep) == len(p.candidates):
        return p
    from dataclasses import replace

    return replace(p, candidates=tuple(p.candidates[i] for i in keep),
                   candidate_answers=tuple(p.candidate_answers[i] for i in keep),
                   labels=tuple(p.labels[i] for i in keep))


def split_by_problem(problems: list, heldout_fraction: float, seed: int) -> tuple:
    """Rule 3: (train, heldout) lists of problems; a problem's prompts all land on one side."""
    ids = sorted({p.id for p in problems})
    random.Random(f"split-{seed}").shuffle(ids)
    n_held = max(1, round(heldout_fraction * len(ids))) if len(ids) > 1 else 0
    held = set(ids[:n_held])
    return [p for p in problems if p.id not in held], [p for p in problems if p.id in held]


def without_cue(problems: list, share: float, seed: int) -> list:
    """`problems` with the hedging sentences removed from every candidate of a seeded `share` of them (the
    procedural source's verbal-confidence cue; `tiny.train_no_cue_share`): the same solutions and labels, so
    those prompts can be decided only by reading the solutions."""
    from dataclasses import replace

    from driver.data.procedural import strip_hedges

    if share <= 0:
        return list(problems)
    rng = random.Random(f"no-cue-{seed}")
    return [replace(p, candidates=tuple(strip_hedges(c) for c in p.candidates)) if rng.random() < share else p
            for p in problems]


def draw_indices(labels: tuple, n: int, rng: random.Random) -> list:
    """n distinct candidate indices with >= 1 correct and >= 1 wrong, in shuffled order."""
    correct = [i for i, x in enumerate(labels) if x >= 1.0]
    wrong = [i for i, x in enumerate(labels) if x < 1.0]
    first = [rng.choice(correct), rng.choice(wrong)]
    rest = [i for i in range(len(labels)) if i not in first]
    order = first + rng.sample(rest, n - 2)
    rng.shuffle(order)
    return order


def build_tasks(problem: RawProblem, min_candidates: int, max_candidates: int, prompts_per_problem: int,
                max_candidate_chars: int, rng: random.Random, stats: BuildStats, style: PromptStyle = PLAIN) -> list:
    """Rule 4: up to `prompts_per_problem` SelectionTasks for one kept problem."""
    tasks, seen = [], set()
    hi = min(max_candidates, len(problem.candidates))
    for _ in range(prompts_per_problem * 4):  # a few retries when a draw repeats an earlier one
        if len(tasks) == prompts_per_problem:
            break
        order = draw_indices(problem.labels, rng.randint(min_candidates, hi), rng)
        if tuple(order) in seen:
            continue
        seen.add(tuple(order))
        texts = [problem.candidates[i] for i in order]
        try:
            prompt = build_prompt(problem.problem, texts, max_candidate_chars, style)
        except CandidateTooLong:
            stats.prompts_too_long_chars += 1
            continue
        tasks.append(SelectionTask(
            prompt_id=f"{problem.id}/p{len(tasks)}", problem_id=problem.id, domain=problem.domain,
            problem=problem.problem, candidates=tuple(texts),
            candidate_answers=tuple(str(problem.candidate_answers[i]) for i in order),
            labels=tuple(float(problem.labels[i]) for i in order), reference=problem.reference,
            prompt=prompt, entry_point=problem.entry_point,
        ))
    stats.prompts_built += len(tasks)
    return tasks


def build_all(problems: list, cfg, seed_tag: str, stats: BuildStats, max_candidates: int = 0) -> list:
    """Rule 4 over a list of problems; `cfg` is a DataConfig, or its dataset settings with the recipe's prompt layout
    (`driver.data.dataset.settings`). Deterministic for (cfg.seed, seed_tag).
    `max_candidates` caps the prompts' candidates below `cfg.max_candidates` (0: no cap)."""
    rng = random.Random(f"draw-{cfg.seed}-{seed_tag}")
    most = min(max_candidates or cfg.max_candidates, cfg.max_candidates)
    out = []
    for p in problems:
        out.extend(build_tasks(p, cfg.min_candidates, most, cfg.prompts_per_problem,
                               cfg.max_candidate_chars, rng, stats, PromptStyle.of(cfg)))
    return out


def apply_budget(tasks: list, count_tokens: Callable[[str], int], max_tokens: int, stats: BuildStats) -> list:
    """Rule 5: drop (and count) prompts whose token count exceeds `max_tokens`; never truncate."""
    kept = [t for t in tasks if count_tokens(t.prompt) <= max_tokens]
    stats.prompts_over_token_budget += len(tasks) - len(kept)
    stats.prompts_kept += len(kept)
    return kept


@dataclass
class SplitSummary:
    """Statistics of one split (train or held-out) of built tasks."""
    prompts: int = 0
    problems: int = 0
    candidates_histogram: dict = field(default_factory=dict)
    mean_candidates: float = 0.0
    fraction_correct: float = 0.0
    majority_at_n: float = 0.0
    random_at_n: float = 0.0


def summarize(tasks: list) -> SplitSummary:
    """Candidates-per-prompt histogram, fraction correct (= random@N), majority@N over candidate answers."""
    from core.algo.metrics import majority_at_k, random_at_n

    if not tasks:
        return SplitSummary()
    hist = Counter(t.num_candidates for t in tasks)
    return SplitSummary(
        prompts=len(tasks),
        problems=len({t.problem_id for t in tasks}),
        candidates_histogram={str(k): hist[k] for k in sorted(hist)},
        mean_candidates=sum(t.num_candidates for t in tasks) / len(tasks),
        fraction_correct=sum(sum(t.correct) for t in tasks) / sum(t.num_candidates for t in tasks),
        majority_at_n=sum(majority_at_k(_norm(t), t.correct) for t in tasks) / len(tasks),
        random_at_n=sum(random_at_n(t.correct) for t in tasks) / len(tasks),
    )


def _norm(task: SelectionTask) -> list:
    """Answers as majority voting compares them: whitespace-normalised strings."""
    return [" ".join(str(a).split()) for a in task.candidate_answers]

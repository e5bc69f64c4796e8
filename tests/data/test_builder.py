"""Selection-task builder rules (arXiv 2602.02143): filter, draw, index tracking, split, budget."""
import random

import pytest
from hypothesis import given, settings, strategies as st

from core.algo.genselect import parse_judgment
from core.config import DataConfig
from driver.data import builder
from driver.data.problem import RawProblem


def problem(pid, labels, texts=None, answers=None):
    texts = texts or [f"step {i}\nAnswer: {i}" for i in range(len(labels))]
    answers = answers or [str(i) for i in range(len(labels))]
    return RawProblem(pid, "math", f"problem {pid}", "0", tuple(texts), tuple(answers), labels=tuple(labels))


FILTER_TABLE = [  # labels, max_correct_fraction, kept?, counter that rises when dropped
    ([0, 0, 0, 0], 0.5, False, "problems_no_correct"),
    ([1, 0, 0, 0], 0.5, True, None),
    ([1, 1, 0, 0], 0.5, True, None),
    ([1, 1, 1, 0], 0.5, False, "problems_too_many_correct"),
    ([1, 1, 1, 1], 1.0, False, "problems_too_few_candidates"),
    ([1, 1, 1, 0], 0.75, True, None),
    ([1, 0.5, 0, 0], 0.5, True, None),  # a partial pass fraction is not correct
    ([1, 0], 0.5, True, None),
]


@pytest.mark.parametrize("labels,frac,kept,counter", FILTER_TABLE)
def test_problem_filter(labels, frac, kept, counter):
    stats = builder.BuildStats()
    out = builder.filter_problems([problem("p", labels)], frac, 2, 4000, stats)
    assert bool(out) == kept
    assert stats.problems_kept == int(kept)
    if counter:
        assert getattr(stats, counter) == 1


def test_long_candidates_are_dropped_and_counted():
    texts = ["short\nAnswer: 1", "x" * 50, "short\nAnswer: 2", "<think>" + "y" * 100 + "</think>ok\nAnswer: 3"]
    stats = builder.BuildStats()
    out = builder.filter_problems([problem("p", [1, 0, 0, 0], texts)], 0.5, 2, 20, stats)
    assert stats.candidates_too_long == 1  # the <think> trace is stripped before measuring
    assert len(out[0].candidates) == 3 and out[0].labels == (1.0, 0.0, 0.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=2, max_size=12).filter(lambda xs: any(xs) and not all(xs)),
       st.integers(2, 8), st.integers(2, 8), st.integers(0, 10_000))
def test_drawn_prompts_have_right_sizes_and_labels(correct, lo, span, seed):
    hi = max(lo, span)
    labels = [1.0 if c else 0.0 for c in correct]
    texts = ["same text"] * len(labels)  # all duplicates: labels must come from indices, not texts
    p = problem("p", labels, texts=texts, answers=[str(int(c)) for c in correct])
    lo = min(lo, len(labels))
    stats = builder.BuildStats()
    tasks = builder.build_tasks(p, lo, hi, 4, 4000, random.Random(seed), stats)
    assert 1 <= len(tasks) <= 4 and stats.prompts_built == len(tasks)
    for t in tasks:
        assert lo <= t.num_candidates <= min(hi, len(labels))
        assert any(t.correct) and not all(t.correct)
        assert t.labels.count(1.0) <= labels.count(1.0)
        assert all(a == str(int(x)) for a, x in zip(t.candidate_answers, t.labels))  # answer travels with label
        assert t.prompt_id.startswith("p/p") and t.problem_id == "p"


def test_index_tracking_with_duplicate_texts():
    # two identical texts with different labels (e.g. one is flagged by a verifier detail); each keeps its own.
    p = problem("d", [1, 0, 0, 0], texts=["dup", "dup", "other", "other2"], answers=["a1", "a2", "b", "c"])
    for seed in range(30):
        for t in builder.build_tasks(p, 2, 4, 4, 4000, random.Random(seed), builder.BuildStats()):
            for text, answer, label in zip(t.candidates, t.candidate_answers, t.labels):
                src = {"a1": 0, "a2": 1, "b": 2, "c": 3}[answer]
                assert text == p.candidates[src] and label == p.labels[src]
            # the prompt shows candidate i as "Solution i"
            for i, text in enumerate(t.candidates):
                assert f"Solution {i}:\n{text}" in t.prompt
            assert parse_judgment(f"Judgment: {t.labels.index(1.0)}", t.num_candidates).ok


def test_prompts_per_problem_and_no_repeated_draws():
    p = problem("q", [1, 0])  # only one possible set of 2: at most 2 orders
    tasks = builder.build_tasks(p, 2, 8, 4, 4000, random.Random(0), builder.BuildStats())
    orders = [t.candidate_answers for t in tasks]
    assert len(orders) == len(set(orders)) <= 2


def test_the_configured_prompt_style_renders_every_prompt():
    from core.algo.genselect import PromptStyle, build_prompt

    probs = [problem(f"p{i}", [1, 0, 0]) for i in range(5)]
    from tiny_recipe.config import TinyRecipeConfig
    from driver.data.dataset import settings

    recipe = TinyRecipeConfig(solution_end_line=True, line_labels=True)  # the layout keys the recipe sets
    cfg = settings(DataConfig(prompts_per_problem=2, max_candidates=3), recipe)
    tasks = builder.build_all(probs, cfg, "train", builder.BuildStats())
    assert tasks and all(t.prompt == build_prompt(t.problem, t.candidates, style=PromptStyle(True, True))
                         for t in tasks)
    assert all(f"{i}| " in t.prompt for t in tasks for i in range(t.num_candidates))


def test_split_is_by_problem():
    probs = [problem(f"p{i}", [1, 0, 0]) for i in range(50)]
    train, held = builder.split_by_problem(probs, 0.2, seed=0)
    assert len(held) == 10 and len(train) == 40
    assert not {p.id for p in train} & {p.id for p in held}
    cfg = DataConfig(prompts_per_problem=4, max_candidates=3)
    tasks_train = builder.build_all(train, cfg, "train", builder.BuildStats())
    tasks_held = builder.build_all(held, cfg, "heldout", builder.BuildStats())
    assert not {t.problem_id for t in tasks_train} & {t.problem_id for t in tasks_held}
    assert builder.split_by_problem(probs, 0.2, seed=0) == (train, held)
    assert builder.split_by_problem(probs, 0.2, seed=1) != (train, held)


def test_budget_drops_and_counts_never_truncates():
    p = problem("b", [1, 0, 0, 0, 0, 0, 0, 0])
    tasks = builder.build_tasks(p, 2, 8, 4, 4000, random.Random(0), builder.BuildStats())
    stats = builder.BuildStats()
    limit = sorted(len(t.prompt) for t in tasks)[1]
    kept = builder.apply_budget(tasks, len, limit, stats)
    assert all(len(t.prompt) <= limit for t in kept)
    assert stats.prompts_over_token_budget == len(tasks) - len(kept) > 0
    assert {t.prompt for t in kept} <= {t.prompt for t in tasks}  # kept prompts are untouched


def test_summarize_majority_and_random():
    p = problem("s", [1, 0, 0, 0], answers=["7", "5", "5", "6"])
    t = builder.build_tasks(p, 4, 4, 1, 4000, random.Random(0), builder.BuildStats())[0]
    s = builder.summarize([t])
    assert s.majority_at_n == 0.0  # "5" wins the vote and is wrong
    assert s.random_at_n == pytest.approx(0.25) and s.candidates_histogram == {"4": 1}

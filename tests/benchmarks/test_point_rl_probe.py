"""benchmarks/point_rl_probe.py: the split of held-out prompts by whether a candidate states the model's answer."""
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "benchmarks"))

from point_rl_probe import own_answer_split  # noqa: E402


def _task(answers, correct):
    return SimpleNamespace(candidate_answers=answers, correct=correct, num_candidates=len(answers))


def test_prompts_split_by_whether_a_candidate_states_the_models_answer():
    tasks = [_task(["4", "5"], [True, False]),          # own 4 stated, chosen 0: a hit
             _task(["7", "8", "9"], [False, False, True]),  # own 8 stated, chosen 2: a miss
             _task(["1", "2"], [False, True]),           # own 3 unstated, chosen 1: correct there
             _task(["6", "6", "2", "3"], [True, True, False, False])]  # no answer line: unstated, chosen 2: wrong
    hits, unstated = own_answer_split(tasks, [0, 2, 1, 2], ["4", "8", "3", None], str.strip)
    assert hits == [True, False]
    assert unstated == [(True, 0.5), (False, 0.5)]


def test_answers_are_compared_after_normalising():
    hits, unstated = own_answer_split([_task([" 12", "13"], [True, False])], [0], ["12"], str.strip)
    assert hits == [True] and unstated == []


def test_the_prior_decision_reads_the_prompt_alone_and_ends_at_the_mark():
    from point_rl_probe import PRIOR_MARK, decision_contexts

    prompt = "Solution 0:\n2 + 2 = 4\nAnswer: 4\nEnd of solution 0.\n\nSolution 1:\n2 + 2 = 5\nAnswer: 5\nEnd of solution 1."
    task = SimpleNamespace(prompt=prompt, problem="Compute 2 + 2.")
    seen = []

    def tokenizer(text):
        seen.append(text)
        return {"input_ids": [len(text)]}

    [(ids, own)] = decision_contexts(None, tokenizer, [task], "prior")  # no model: nothing is generated
    assert own is None and ids == [len(seen[0])]
    assert seen[0].endswith("\n\n" + PRIOR_MARK) and "Answer: 5 #1\nEnd of solution 1." in seen[0]
    assert "Compute 2 + 2." not in seen[0]  # no restated problem, no solution

"""Session 19's probes of the route from the model's arithmetic to its judgment: route_probe.py (the disputed line,
its shared beginning, the masked warm-start target), learnability.with_diff_view, context_likelihood.py's contexts
and draft_pretrain.py's corpus."""
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from context_likelihood import contexts, continuations, filler_for  # noqa: E402
from draft_pretrain import draft_texts  # noqa: E402
from learnability import DIFF_HEADER, with_diff_view  # noqa: E402
from route_probe import (OPEN_LINE, SEPARATOR, disputed_line, open_prefix, read_response,  # noqa: E402
                         response_example, route_prompt)

from core.algo.genselect import PROMPT_FOOTER  # noqa: E402
from core.records import SelectionTask  # noqa: E402

RIGHT = "2 * 8 = 16\n16 + 9 = 25\nAnswer: 25"
SLIPPED = "2 * 8 = 16\n16 + 9 = 15\nAnswer: 15"


def pair(first=SLIPPED, second=RIGHT, labels=(0.0, 1.0)) -> SelectionTask:
    prompt = (f"Problem:\nCompute 2 * 8 + 9.\n\nSolution 0:\n{first}\n\nSolution 1:\n{second}\n\n"
              + PROMPT_FOOTER.format(last=1))
    answers = tuple(c.rsplit(" ", 1)[1] for c in (first, second))
    return SelectionTask("p/p0", "p", "math", "Compute 2 * 8 + 9.", (first, second), answers, labels, "25", prompt)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    from core.config import TinyModelConfig
    from driver.models.tiny import build_tiny_model

    folder = tmp_path_factory.mktemp("tiny") / "m"
    build_tiny_model(TinyModelConfig(), [pair().prompt + SEPARATOR + "16 + 9 = 25\nJudgment: 1"] * 4, folder, seed=0)
    return AutoTokenizer.from_pretrained(folder)


def test_disputed_line_is_the_first_line_the_candidates_disagree_on():
    assert disputed_line([SLIPPED, RIGHT]) == (1, ["16 + 9 = 15", "16 + 9 = 25"], 9)
    assert disputed_line([RIGHT, RIGHT]) is None
    assert disputed_line([RIGHT, RIGHT + "\nextra"])[:2] == (3, ["", "extra"])


def test_open_prefix_is_the_shared_beginning_cut_to_whole_words():
    assert open_prefix(["16 + 9 = 15", "16 + 9 = 25"], 9) == "16 + 9 = "
    assert open_prefix(["2 * 8 = 10", "2 * 8 = 16"], 9) == "2 * 8 = "  # the shared "1" of 10 / 16 left out
    assert open_prefix(["9 + 16 = 25", "16 + 9 = 25"], 0) == ""


def test_warm_start_target_names_a_candidate_and_never_trains_the_disputed_tokens(tokenizer):
    task = pair()
    for open_line in (False, True):
        for k in (0, 1):
            prompt, response, mask = response_example(tokenizer, task, k, open_line)
            assert tokenizer.decode(prompt) == route_prompt(task, open_line)
            text = tokenizer.decode(response[:-1])
            assert text.endswith(f"Judgment: {k}") and response[-1] == tokenizer.eos_token_id
            trained = tokenizer.decode([t for t, m in zip(response, mask) if m])
            assert "5" not in trained.split("Judgment")[0]  # the result digits, where 15 and 25 differ
            assert ("16 + 9 =" in trained) != open_line  # the shared beginning: written, or already in the prompt
    assert route_prompt(task, True).endswith(SEPARATOR + OPEN_LINE + "16 + 9 = ")


def test_read_response_checks_judgment_rewrite_and_their_agreement():
    task = pair()
    assert read_response(task, "16 + 9 = 25\nJudgment: 1") == {
        "judgment": 1, "correct": True, "rewrite_correct": True, "consistent": True}
    assert read_response(task, "16 + 9 = 15\nJudgment: 1")["consistent"] is False
    assert read_response(task, "25\nJudgment: 0", open_line=True) == {
        "judgment": 0, "correct": False, "rewrite_correct": True, "consistent": False}
    assert read_response(task, "no judgment")["judgment"] == -1


def test_diff_view_repeats_the_first_disputed_row_before_the_question():
    shown = with_diff_view(pair()).prompt
    assert shown.endswith(f"{DIFF_HEADER}\n0| 16 + 9 = 15\n1| 16 + 9 = 25\n\n" + PROMPT_FOOTER.format(last=1))
    assert shown.startswith(pair().prompt.split(PROMPT_FOOTER[:10])[0])


def test_contexts_end_at_the_shared_beginning_and_show_what_each_name_says():
    task = pair(RIGHT, SLIPPED, (1.0, 0.0))
    texts = contexts(task, "Problem:\nCompute 1 + 1.\n\nSolution:\n1 + 1 = 2\nAnswer: 2\n\n")
    assert all(t.endswith("16 + 9 = ") for t in texts.values())
    assert texts["far_worked_solution"].endswith(texts["worked_solution"]) and "1 + 1 = 2" in texts["far_worked_solution"]
    assert texts["worked_solution"] == "Problem:\nCompute 2 * 8 + 9.\n\nSolution:\n2 * 8 = 16\n16 + 9 = "
    assert "15" not in texts["worked_solution"] and "15" in texts["prompt_then_worked_solution"]
    assert DIFF_HEADER in texts["selection_diff_open_line"] and DIFF_HEADER not in texts["selection_open_line"]
    assert continuations(task) == ["25\n", "15\n"]
    assert contexts(pair("9 + 16 = 25\nAnswer: 25", "16 + 9 = 15\nAnswer: 15")) == {}


def test_draft_corpus_targets_correct_solutions_beside_mostly_slipped_drafts():
    from driver.data.procedural import problem_key

    texts = draft_texts(600, 5, frozenset())
    excluded = draft_texts(600, 5, frozenset({re.search(r"Problem:\n(.*)\n", texts[0][0])[1]}))
    assert len(excluded) == len(texts) - 1
    same_answer = 0
    for context, target in texts:
        problem = re.search(r"Problem:\n(.*)\n", context)[1]
        assert context.endswith("\n\nSolution:\n") and "Draft:\n" in context
        expr = problem_key(problem).replace(" ", "")
        assert eval(expr) == int(target.rsplit("Answer: ", 1)[1])  # every target is correct  # noqa: S307
        same_answer += context.split("Answer: ")[1].split("\n")[0] == target.rsplit("Answer: ", 1)[1].strip()
    assert 0.2 < same_answer / len(texts) < 0.5  # about a third of the drafts are correct


def test_filler_is_other_problems_worked_solutions_as_long_as_the_prompt():
    other = pair(RIGHT.replace("25", "26"), SLIPPED, (1.0, 0.0))
    filler = filler_for(pair(), [other] * 40)
    assert len(filler) >= len(pair().prompt) and "15" not in filler
    assert filler.startswith("Problem:\nCompute 2 * 8 + 9.\n\nSolution:\n2 * 8 = 16\n16 + 9 = 26")


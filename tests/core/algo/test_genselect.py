"""GenSelect prompt rendering, judgment parsing (last match wins) and the selection reward."""
from types import SimpleNamespace

import pytest
from hypothesis import given, strategies as st

from core.algo.genselect import (PROMPT_FOOTER, PROMPT_STYLE_FILE, CandidateTooLong, ParseStatus, PromptStyle, build_prompt,
                                 mirrored_task, parse_judgment, read_prompt_style, render_judgment,
                                 reordered_task, selection_reward, strip_thinking, write_prompt_style)


def test_prompt_numbers_candidates_in_order_and_keeps_duplicates():
    prompt = build_prompt("What is 2+2?", ["Answer: 4", "Answer: 5", "Answer: 4"])
    assert prompt.index("Solution 0:\nAnswer: 4") < prompt.index("Solution 1:\nAnswer: 5") \
        < prompt.index("Solution 2:\nAnswer: 4")
    assert "Judgment: IDX" in prompt and "0 to 2" in prompt


def test_prompt_strips_reasoning_and_refuses_long_candidates():
    prompt = build_prompt("p", ["<think>secret scratch</think>Answer: 1", "Answer: 2"])
    assert "secret" not in prompt
    with pytest.raises(CandidateTooLong, match="candidate 1"):
        build_prompt("p", ["short", "x" * 50], max_candidate_chars=10)
    with pytest.raises(ValueError, match="at least 2"):
        build_prompt("p", ["only one"])


@pytest.mark.parametrize("text, n, index, status", [
    ("Judgment: 2", 3, 2, ParseStatus.OK),
    ("Judgement: 0", 3, 0, ParseStatus.OK),
    ("Judgment: 1 ... on reflection Judgment: 0", 3, 0, ParseStatus.OK),
    ("I pick solution 1", 3, None, ParseStatus.NO_JUDGMENT),
    ("", 3, None, ParseStatus.NO_JUDGMENT),
    ("Judgment: 3", 3, None, ParseStatus.OUT_OF_RANGE),
    ("Judgment: -1", 3, None, ParseStatus.OUT_OF_RANGE),
    ("Judgment:7", 8, 7, ParseStatus.OK),
    ("Judgment: 2 then Judgment: 9", 3, None, ParseStatus.OUT_OF_RANGE),
    ("Judgment: 00000000000000000000000000000", 3, None, ParseStatus.MALFORMED_INDEX),
    ("Judgment: 01", 3, None, ParseStatus.MALFORMED_INDEX),
    ("Judgment: 0", 1, 0, ParseStatus.OK),
    ("Judgment: 10", 16, 10, ParseStatus.OK),
    ("3 + 4 = 7\nAnswer: 7 #2", 3, 2, ParseStatus.OK),  # the solve-then-point response: its answer line's pointer
    ("Answer: 7 #1\nAnswer: 8 #2\n", 3, 2, ParseStatus.OK),  # the last one
    ("Answer: 7 #2\nJudgment: 0", 3, 0, ParseStatus.OK),  # a Judgment line wins
    ("Answer: 7 #5", 3, None, ParseStatus.OUT_OF_RANGE),
    ("Answer: 7 #", 3, None, ParseStatus.NO_JUDGMENT),  # cut before the index
    ("Answer: 7 #2 because", 3, None, ParseStatus.NO_JUDGMENT),  # not an answer line ending in an index
    ("Check: 7 #2", 3, None, ParseStatus.NO_JUDGMENT),
])
def test_parse_table(text, n, index, status):
    judgment = parse_judgment(text, n)
    assert (judgment.index, judgment.status) == (index, status)
    assert judgment.ok == (status == ParseStatus.OK)
    assert judgment.ok or judgment.reason


@pytest.mark.parametrize("text, n, index, status", [
    ("<think>Judgment: 1 looks right</think>\nJudgment: 0", 3, 0, ParseStatus.OK),  # the trace is not the answer
    ("<think>Solution 1 is right. Judgment: 1</think>\nSolution 1.", 3, None, ParseStatus.NO_JUDGMENT),
    ("<think>Solution 1 is right. Judgment: 1", 3, None, ParseStatus.NO_JUDGMENT),  # never closed: still reasoning
    ("reasoning the prompt's <think> opened</think>Judgment: 2", 3, 2, ParseStatus.OK),
    ("Judgment: 12", 16, 12, ParseStatus.OK),  # several tokens (SmolLM2 writes digits one token each)
    ("Judgment: 12", 12, None, ParseStatus.OUT_OF_RANGE),
])
def test_thinking_and_multi_token_indices(text, n, index, status):
    judgment = parse_judgment(text, n)
    assert (judgment.index, judgment.status) == (index, status) and (judgment.ok or judgment.reason)


@pytest.mark.parametrize("text, index, status", [
    ("Solution 1 checks out.\nJudgment: 1", None, ParseStatus.CUT_INDEX),  # maybe `Judgment: 12` cut after the 1
    ("Judgment: 1\nOn second tho", 1, ParseStatus.OK),  # the index was complete: text follows it
    ("Judgment: 1 ", 1, ParseStatus.OK),
    ("Solution 1 checks out. Judgm", None, ParseStatus.NO_JUDGMENT),
    ("<think>Judgment: 1 or maybe", None, ParseStatus.NO_JUDGMENT),  # cut while thinking
])
def test_a_response_cut_at_the_budget_never_yields_a_shortened_index(text, index, status):
    judgment = parse_judgment(text, 16, truncated=True)
    assert (judgment.index, judgment.status) == (index, status) and (judgment.ok or judgment.reason)
    # the same text ended by the model itself (EOS, finish reason `stop`) is complete
    if status == ParseStatus.CUT_INDEX:
        assert parse_judgment(text, 16).index == 1


@given(st.integers(2, 16).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1))), st.text(max_size=40))
def test_rendered_judgment_round_trips(n_and_index, rationale):
    n, index = n_and_index
    rationale = rationale.replace("Judg", "")  # a rationale must not contain its own judgment
    assert parse_judgment(render_judgment(index, rationale), n).index == index


@pytest.mark.parametrize("text, scores, mode, expected", [
    ("Judgment: 1", [0.0, 1.0], "binary", 1.0),
    ("Judgment: 0", [0.0, 1.0], "binary", 0.0),
    ("Judgment: 0", [0.6, 1.0], "binary", 0.0),
    ("Judgment: 0", [0.6, 1.0], "partial", 0.6),
    ("no answer", [1.0, 1.0], "binary", 0.0),
    ("Judgment: 5", [1.0, 1.0], "partial", 0.0),
])
def test_selection_reward_table(text, scores, mode, expected):
    assert selection_reward(parse_judgment(text, len(scores)), scores, mode) == expected


def test_unknown_reward_mode_is_an_error():
    with pytest.raises(ValueError, match="reward mode"):
        selection_reward(parse_judgment("Judgment: 0", 2), [1, 0], "fuzzy")


def test_strip_thinking_unclosed_prefix():
    assert strip_thinking("scratch without open tag</think> Answer: 3") == "Answer: 3"


def test_solution_end_lines_repeat_each_index_after_its_block():
    plain = build_prompt("p", ["Answer: 1", "Answer: 2"])
    closed = build_prompt("p", ["Answer: 1", "Answer: 2"], style=PromptStyle(end_lines=True))
    assert "End of solution" not in plain and "| " not in plain
    assert "Solution 0:\nAnswer: 1\nEnd of solution 0.\n\nSolution 1:\nAnswer: 2\nEnd of solution 1.\n\n" in closed


def test_line_labels_prefix_every_candidate_line_with_its_index():
    texts = ["2 * 8 = 16\n\nAnswer: 16", "<think>scratch</think>2 * 8 = 17\nAnswer: 17"]
    prompt = build_prompt("Evaluate 2 * 8.", texts, style=PromptStyle(end_lines=True, line_labels=True))
    assert "Solution 0:\n0| 2 * 8 = 16\n\n0| Answer: 16\nEnd of solution 0." in prompt  # blank lines stay blank
    assert "Solution 1:\n1| 2 * 8 = 17\n1| Answer: 17\nEnd of solution 1." in prompt  # after the trace is stripped
    assert "| Evaluate" not in prompt  # the problem is not a candidate
    with pytest.raises(CandidateTooLong):  # the cap is on the candidate's own text, not its labels
        build_prompt("p", ["x" * 11, "y"], max_candidate_chars=10, style=PromptStyle(line_labels=True))
    assert build_prompt("p", ["x" * 10, "y"], max_candidate_chars=10, style=PromptStyle(line_labels=True))


def test_side_by_side_puts_the_versions_of_each_line_next_to_each_other():
    texts = ["5 + 2 = 7\n7 * 7 = 49\n\nAnswer: 49", "<think>x</think>5 + 2 = 6\n6 * 7 = 42\nAnswer: 42", "Answer: 49"]
    prompt = build_prompt("Compute (2 + 5) * 7.", texts, style=PromptStyle(side_by_side=True))
    section = ("Solutions 0 to 2, line by line:\n0| 5 + 2 = 7\n1| 5 + 2 = 6\n2| Answer: 49\n"
               "0| 7 * 7 = 49\n1| 6 * 7 = 42\n0| Answer: 49\n1| Answer: 42\n\nWhich solution")
    assert section in prompt  # blank lines dropped, a shorter candidate simply ends, the trace stripped
    assert "Solution 0:" not in prompt and prompt.startswith("You are given a problem and 3 candidate solutions.")
    ended = build_prompt("p", ["a", "b"], style=PromptStyle(end_lines=True, side_by_side=True))
    assert ended.endswith("0| a\n1| b\n0| End of solution 0.\n1| End of solution 1.\n\n" + PROMPT_FOOTER.format(last=1))
    with pytest.raises(CandidateTooLong):
        build_prompt("p", ["x" * 11, "y"], max_candidate_chars=10, style=PromptStyle(side_by_side=True))


def test_answer_labels_write_each_index_beside_its_final_answer():
    texts = ["2 * 8 = 16\nAnswer: 16", "<think>Answer: 9</think>2 * 8 = 17\nI am not sure.\nAnswer: 17  ", "17"]
    prompt = build_prompt("Evaluate 2 * 8.", texts, style=PromptStyle(end_lines=True, answer_labels=True))
    assert "Solution 0:\n2 * 8 = 16\nAnswer: 16 #0\nEnd of solution 0." in prompt
    assert "Solution 1:\n2 * 8 = 17\nI am not sure.\nAnswer: 17 #1\nEnd of solution 1." in prompt  # trace stripped
    assert "Solution 2:\n17\nEnd of solution 2." in prompt  # no answer line: nothing to label
    assert "#" not in build_prompt("p", texts, style=PromptStyle(end_lines=True))
    spaced = build_prompt("p", ["Answer: 3\nAnswer:4", "x"], style=PromptStyle(answer_labels=True))
    assert "Answer: 3 #0\nAnswer:4 #0" in spaced  # every answer line of the block


def test_the_prompt_style_round_trips_through_a_model_folder(tmp_path):
    assert read_prompt_style(tmp_path) == PromptStyle()  # a folder not trained here: the plain prompt
    style = PromptStyle(end_lines=True, line_labels=True)
    write_prompt_style(tmp_path, style)
    assert read_prompt_style(tmp_path) == style
    (tmp_path / PROMPT_STYLE_FILE).write_text('{"solution_end_line": true}')  # the older file's key
    assert read_prompt_style(tmp_path) == PromptStyle(end_lines=True)
    (tmp_path / PROMPT_STYLE_FILE).write_text('{"end_lines": true, "speak_louder": true}')
    with pytest.raises(ValueError, match="speak_louder"):
        read_prompt_style(tmp_path)
    assert PromptStyle.of(SimpleNamespace(solution_end_line=True, line_labels=False)) == PromptStyle(end_lines=True)
    assert PromptStyle.of(SimpleNamespace(solution_end_line=True)) == PromptStyle(end_lines=True)  # older manifest
    write_prompt_style(tmp_path, PromptStyle(side_by_side=True))
    assert read_prompt_style(tmp_path) == PromptStyle(side_by_side=True)
    assert PromptStyle.of(SimpleNamespace(side_by_side=True)) == PromptStyle(side_by_side=True)
    write_prompt_style(tmp_path, PromptStyle(end_lines=True, answer_labels=True))
    assert read_prompt_style(tmp_path) == PromptStyle(end_lines=True, answer_labels=True)


def test_mirrored_task_reverses_candidates_answers_labels_and_prompt():
    from core.records import SelectionTask

    style = PromptStyle(end_lines=True)
    cands = ("x = 1\nAnswer: 1", "x = 2\nAnswer: 2", "x = 3\nAnswer: 3")
    task = SelectionTask(prompt_id="q1/p0", problem_id="q1", domain="math", problem="P?", candidates=cands,
                         candidate_answers=("1", "2", "3"), labels=(1.0, 0.0, 0.0), reference="1",
                         prompt=build_prompt("P?", cands, style=style))
    twin = mirrored_task(task, style)
    assert twin.prompt_id == "q1/p0/mirror" and twin.problem_id == "q1"
    assert twin.candidates == cands[::-1] and twin.candidate_answers == ("3", "2", "1")
    assert twin.labels == (0.0, 0.0, 1.0) and twin.correct == (False, False, True)
    assert twin.prompt == build_prompt("P?", cands[::-1], style=style) != task.prompt
    assert twin.prompt.index("x = 3") < twin.prompt.index("x = 1")
    pair = reordered_task(task, [1, 0], style, "q1/p0/ko1-0")
    assert pair.candidates == (cands[1], cands[0]) and pair.correct == (False, True)

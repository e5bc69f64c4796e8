"""Session 20's pointer pretraining probe (benchmarks/pointer_pretrain.py): its episodes query only answers one
candidate states, name that candidate, and the held-out items end where the index is predicted."""
import random
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from pointer_pretrain import QUERY, episode, probe_items, short_episode, unique_answers  # noqa: E402

from core.algo.genselect import build_prompt  # noqa: E402
from core.records import SelectionTask  # noqa: E402

SOLUTIONS = ("3 + 4 = 7\nAnswer: 7", "3 + 4 = 8\nAnswer: 8", "3 + 4 = 7\nAnswer: 7", "3 + 4 = 9\nAnswer: 9")


def task(solutions=SOLUTIONS) -> SelectionTask:
    answers = tuple(s.rsplit(" ", 1)[1] for s in solutions)
    labels = tuple(float(a == "7") for a in answers)
    return SelectionTask("p/p0", "p", "math", "Compute 3 + 4.", tuple(solutions), answers, labels, "7",
                         build_prompt("Compute 3 + 4.", solutions))


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    from core.config import TinyModelConfig
    from driver.models.tiny import build_tiny_model

    folder = tmp_path_factory.mktemp("tiny") / "m"
    build_tiny_model(TinyModelConfig(), [short_episode(task(), random.Random(0))] * 4, folder, seed=0)
    return AutoTokenizer.from_pretrained(folder)


def queried(text: str) -> list:
    """(answer, index) of every pointer query in an episode's text."""
    return [(a, int(i)) for a, i in re.findall(r"Find:\nAnswer: (\S+)\nIt is in Solution (\d+)\.", text)]


def test_unique_answers_leave_out_answers_two_candidates_state():
    assert unique_answers(task()) == [(1, "8"), (3, "9")]


def test_episode_is_the_prompt_then_one_true_query_per_unique_answer():
    t = task()
    text = episode(t, random.Random(0))
    assert text.startswith(t.prompt)
    assert sorted(queried(text)) == [("8", 1), ("9", 3)]
    for answer, index in queried(text):
        assert t.candidate_answers[index] == answer


def test_short_episode_keeps_each_candidates_answer_and_index_only():
    text = short_episode(task(), random.Random(0))
    assert "3 + 4" not in text and "Problem" not in text
    assert "Solution 2:\nAnswer: 7\nEnd of solution 2." in text
    assert sorted(queried(text)) == [("8", 1), ("9", 3)]


def test_probe_items_end_before_the_index_and_skip_tasks_without_a_unique_answer():
    none_unique = task(("3 + 4 = 7\nAnswer: 7",) * 2)
    items = probe_items([task(), none_unique])
    assert len(items) == 1
    text, target, n = items[0]
    assert n == 4 and text.endswith("It is in Solution ")
    assert text.endswith(QUERY.format(answer=task().candidate_answers[target]))
    assert target in (1, 3)
    short_text, short_target, _ = probe_items([task()], short=True)[0]
    assert short_target == target and "Problem" not in short_text


def test_synthetic_episodes_query_every_answer_twice_and_items_name_the_right_block():
    from pointer_pretrain import QUERIES, synthetic_episode, synthetic_items

    text = synthetic_episode(random.Random(3), QUERIES["echo"], repeats=2, answer_max=50)
    blocks = dict(re.findall(r"Solution (\d+):\nAnswer: (\S+)", text))
    queries = [(a, int(i)) for a, i in re.findall(r"Find:\nAnswer: (\S+)\nEnd of solution (\d+)\.", text)]
    assert 2 <= len(blocks) <= 8 and len(queries) == 2 * len(blocks)
    assert all(blocks[str(i)] == a and int(a) < 50 for a, i in queries)
    for head, target, n in synthetic_items(20, 7, QUERIES["echo"], 50):
        answer = head.rsplit("Find:\nAnswer: ", 1)[1].split("\n")[0]
        assert f"Solution {target}:\nAnswer: {answer}\n" in head and head.count("End of solution ") == n + 1


def test_target_rows_weigh_exactly_the_queried_indices(tokenizer):
    from pointer_pretrain import QUERIES, target_rows

    texts = [short_episode(task(), random.Random(k), QUERIES["echo"]) for k in range(3)]
    rows = target_rows(tokenizer, texts, 512)
    assert max(map(len, rows)) <= 512 and len(rows) < len(texts)  # packed
    weighted = [(row[k - 1][0], token) for row in rows for k, (token, w) in enumerate(row) if w]
    assert len(weighted) == 6  # two unique answers per episode
    assert {tokenizer.decode([t]) for _, t in weighted} == {"1", "3"}
    assert all(tokenizer.decode([before]).strip() == "" for before, _ in weighted)  # the space after "solution"


def test_weighted_loss_is_the_pointer_loss_when_language_modelling_is_off():
    import torch

    from pointer_pretrain import weighted_loss

    logits = torch.randn(1, 5, 7)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    mask = torch.ones_like(ids)
    weights = torch.tensor([[0, 0, 1, 0, 0]])
    expected = torch.nn.functional.cross_entropy(logits[0, 1:2], ids[0, 2:3])
    assert torch.allclose(weighted_loss(logits, ids, mask, weights, 0.0), expected)
    assert weighted_loss(logits, ids, mask, weights, 1.0) > expected


def test_beside_episodes_write_each_index_after_its_answer_and_query_up_to_it():
    from pointer_pretrain import QUERIES, TARGET

    text = short_episode(task(), random.Random(0), QUERIES["beside"])
    assert "Answer: 8 #1\n" in text and "Answer: 7 #2\n" in text
    assert sorted(m.group(1) for m in TARGET.finditer(text)) == ["1", "3"]
    head, target, _ = probe_items([task()], short=True, query=QUERIES["beside"])[0]
    assert head.endswith(" #") and f"Answer: {task().candidate_answers[target]} #{target}\n" in head

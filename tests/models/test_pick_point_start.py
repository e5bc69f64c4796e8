"""The pick-then-point warm-start (tiny_recipe/pick_point_start.py): the label-free pointer rule, the rows built from
the model's own solutions after a random pick, and the soft-target loss; the template and the config that go with it."""
import random

import pytest
import torch

from core.records import SelectionTask
from tiny_recipe import greedy as greedy_module
from driver.models import sft
from tiny_recipe import pick_point_start, warmstart


def task(answers, labels, problem="What is 3 + 4?"):
    n = len(answers)
    return SelectionTask("p/p0", "p", "math", problem, tuple("c" * n), tuple(answers), tuple(labels), "7",
                         f"Problem:\n{problem}\n\nSolution 0: ...")


def test_the_rule_names_the_candidates_stating_the_own_answer_else_the_pick():
    assert pick_point_start.rule_targets(["7", "9", " 7."], "7", pick=1) == [0, 2]
    assert pick_point_start.rule_targets(["5", "9"], "7", pick=1) == [1]
    assert pick_point_start.rule_targets(["5", "9"], None, pick=0) == [0]
    assert pick_point_start.normalize_answer(" 12. ") == "12" and pick_point_start.normalize_answer(" ") is None


def test_the_uniform_pointer_spreads_over_every_index_whatever_the_model_answered():
    t = task(["7", "9", "7"], [1.0, 0.0, 1.0])
    assert pick_point_start.pointer_targets(t, "7", pick=1, pointer="uniform") == [0, 1, 2]
    assert pick_point_start.pointer_targets(t, None, pick=1, pointer="uniform") == [0, 1, 2]
    assert pick_point_start.pointer_targets(t, "7", pick=1) == [0, 2]
    with pytest.raises(ValueError, match="own_answer.*uniform"):
        pick_point_start.pointer_targets(t, "7", pick=1, pointer="oracle")


def test_the_pick_pointer_is_half_the_pick_and_half_uniform_whatever_the_model_answered():
    import torch

    t = task(["7", "9", "7"], [1.0, 0.0, 1.0])
    for own in ("7", None):
        targets = pick_point_start.pointer_targets(t, own, pick=1, pointer="pick")
        weights = torch.bincount(torch.tensor(targets), minlength=3).float() / len(targets)
        assert torch.allclose(weights, torch.tensor([1 / 6, 1 / 2 + 1 / 6, 1 / 6]))


def test_the_template_ends_in_the_pick_mark_and_the_head_restates_the_problem(tiny_dir):
    from transformers import AutoTokenizer

    from core.chat import PICK_MARK, format_prompt
    from tiny_recipe.chat import PICK_POINT_TEMPLATE, is_pick_point, pick_point_head

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    assert not is_pick_point(tokenizer)
    tokenizer.chat_template = PICK_POINT_TEMPLATE
    assert is_pick_point(tokenizer)
    assert format_prompt(tokenizer, "Problem:\nq\n\nSolution 0: x") == "Problem:\nq\n\nSolution 0: x\n\n" + PICK_MARK
    assert pick_point_head("What is 3?") == "\n\nProblem:\nWhat is 3?\n\nSolution:\n"


def test_rows_train_the_pick_towards_uniform_and_the_pointer_towards_the_rule(tiny_dir, monkeypatch):
    """Each row: the prompt; the response g, the head, the model's own solution cut after its first `Answer:` line,
    ` #k`, a newline and EOS; soft targets at the pick (every index) and at the pointer (the rule's indices). The
    greedy solutions are read after the prompt, the pick and the head; one without an answer line is left out."""
    from transformers import AutoTokenizer

    from core.chat import index_token_ids, prompt_token_ids
    from tiny_recipe.chat import PICK_POINT_TEMPLATE, pick_point_head

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    tokenizer.chat_template = PICK_POINT_TEMPLATE
    seen = []

    def greedy(model, tok, contexts, n, dtype=None):
        seen.extend(contexts)
        return ["3 + 4 = 7\nAnswer: 7\nAnswer: 9", "no answer here", "Answer: 12\nmore"]

    monkeypatch.setattr(greedy_module, "greedy_continuations", greedy)
    tasks = [task(["7", "5", "7"], [1.0, 0.0, 1.0]), task(["1", "2"], [1.0, 0.0]), task(["5", "9"], [0.0, 1.0])]
    rng = random.Random(0)
    rows = pick_point_start.pick_point_rows(None, tokenizer, tasks, rng)
    ids = index_token_ids(tokenizer, 3)
    assert [i for i, *_ in rows] == [0, 2]
    for (i, prompt, response, soft), cut in zip(rows, ["3 + 4 = 7\nAnswer: 7", "Answer: 12"]):
        head = tokenizer(pick_point_head(tasks[i].problem), add_special_tokens=False)["input_ids"]
        assert prompt == prompt_token_ids(tokenizer, tasks[i].prompt)
        assert seen[i] == prompt + response[:1] + head and response[1:1 + len(head)] == head
        assert response[-1] == tokenizer.eos_token_id
        written = tokenizer.decode(response[1 + len(head):-1])
        assert written.startswith(cut + " #") and written.endswith("\n")
        (pick_at, pick_spread), (pointer_at, pointer_spread) = soft
        assert pick_at == 0 and pick_spread == ids[:tasks[i].num_candidates] and response[0] in pick_spread
        assert response[pointer_at] in pointer_spread
        rule = {0: [0, 2], 2: [ids.index(response[0])]}[i]  # own 7: candidates 0 and 2; own 12: unstated -> the pick
        assert pointer_spread == [ids[j] for j in rule]


def test_soft_target_loss_spreads_over_the_given_ids_and_reads_every_other_response_token():
    torch.manual_seed(0)
    logits = torch.randn(2, 6, 11, requires_grad=True)
    _, _, labels = sft.collate([([1, 2], [3, 4, 5, 6]), ([1, 2], [7, 8])], pad_id=0)
    loss = warmstart.soft_target_loss(logits, labels, [[(1, [3, 9]), (3, [5])], []])
    logp = torch.log_softmax(logits[:, :-1], -1)
    expected = -(logp[0, 1, [3, 9]].mean() + logp[0, 3, 5] + logp[0, 2, 4] + logp[0, 4, 6]
                 + logp[1, 1, 7] + logp[1, 2, 8]) / 6
    assert torch.allclose(loss, expected)


def test_the_pick_point_config_loads_and_refuses_what_does_not_go_with_it():
    from core.config import ConfigError, load_config

    cfg = load_config("default")
    assert cfg.tiny.model.response == "pick_point" and cfg.tiny.warm_start.target == "pick_point"
    assert cfg.tiny.pretrain.pick_line and cfg.tiny.answer_labels and not cfg.tiny.sample_index_only
    with pytest.raises(ConfigError, match="tiny.warm_start.target.*pick_point"):
        load_config("default", ["tiny.warm_start.target=pointer"])
    with pytest.raises(ConfigError, match="tiny.warm_start.target"):
        load_config("selector", ["tiny.warm_start.target=pick_point"])
    with pytest.raises(ConfigError, match="tiny.model.response.*answer_labels"):
        load_config("default", ["tiny.answer_labels=false", "tiny.pretrain.pointer_share=0"])
    with pytest.raises(ConfigError, match="tiny.sample_index_only"):
        load_config("default", ["tiny.sample_index_only=true"])
    assert load_config("default", ["tiny.warm_start.pointer=uniform"]).tiny.warm_start.pointer == "uniform"
    assert load_config("default", ["tiny.warm_start.pointer=pick"]).tiny.warm_start.pointer == "pick"
    with pytest.raises(ConfigError, match="tiny.warm_start.pointer"):
        load_config("default", ["tiny.warm_start.pointer=copy"])

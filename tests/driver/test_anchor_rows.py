"""tiny_recipe/anchor_rows.py: the worked solutions stage 3b adds to a step (tiny.anchor_corpus_rows)."""
import pytest

from tiny_recipe.chat import pick_point_head
from core.config import ConfigError, load_config
from core.records import Rollout, RolloutGroup, SelectionTask
from tiny_recipe.anchor_rows import corpus_anchor_sequences, fresh_worked_solutions
from driver.data.procedural import problem_key


class CharTokenizer:
    """One token per character (ids 2..), EOS 1: enough to read the rows back."""
    eos_token_id = 1

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(c) + 2 for c in text]}

    @staticmethod
    def decode(ids):
        return "".join(chr(i - 2) for i in ids if i > 1)


def _group(prompt: list, allowed: list, version: int) -> RolloutGroup:
    task = SelectionTask("p", "q", "math", "Compute 1 + 2.", ("a", "b"), ("3", "4"), (1.0, 0.0), "3", "x")
    rollouts = [Rollout("p", prompt, [allowed[0] if allowed else 9], [-0.5], "0", version, "stop",
                        allowed_token_ids=allowed or None, loss_mask=[1]) for _ in range(2)]
    return RolloutGroup(task=task, rollouts=rollouts, policy_version=version)


def test_rows_are_anchor_only_worked_solutions_after_the_steps_prompts():
    groups = [_group([5, 6, 7], [40, 41], 3), _group([5, 6, 8], [40, 41], 4)]
    rows = corpus_anchor_sequences(groups, CharTokenizer(), 5, seed=0, step=7, exclude_keys=frozenset())
    solutions = fresh_worked_solutions(5, 0, 7, frozenset())
    assert len(rows) == 5
    for i, (row, (problem, solution)) in enumerate(zip(rows, solutions)):
        group = groups[i % 2]
        assert row.prompt_token_ids is group.rollouts[0].prompt_token_ids  # packed with the group's prompt
        assert row.response_token_ids[0] in (40, 41) and row.allowed_token_ids == [40, 41]
        # the rollout's form up to the pointer mark: no newline and EOS after the answer, which would teach the model
        # to end its solution without a pointer
        assert CharTokenizer.decode(row.response_token_ids[1:]) == pick_point_head(problem) + solution.strip() + " #"
        assert solution.strip().splitlines()[-1].startswith("Answer:")
        assert CharTokenizer.eos_token_id not in row.response_token_ids
        assert row.num_loss_tokens == 0 and row.advantage == 0.0  # the DAPO loss does not see them
        assert row.anchor_mask == [0] + [1] * (len(row.response_token_ids) - 1)
        assert row.policy_version == group.policy_version
        assert "Answer:" in solution
    again = corpus_anchor_sequences(groups, CharTokenizer(), 5, seed=0, step=7, exclude_keys=frozenset())
    assert [r.response_token_ids for r in again] == [r.response_token_ids for r in rows]  # resume builds the same
    other = corpus_anchor_sequences(groups, CharTokenizer(), 5, seed=0, step=8, exclude_keys=frozenset())
    assert [r.response_token_ids[1:] for r in other] != [r.response_token_ids[1:] for r in rows]  # fresh each step
    assert corpus_anchor_sequences(groups, CharTokenizer(), 0, 0, 7, frozenset()) == []


def test_held_out_problems_are_never_anchor_rows():
    first = fresh_worked_solutions(6, 0, 3, frozenset())
    held_out = frozenset(problem_key(p) for p, _ in first[:3])
    kept = fresh_worked_solutions(6, 0, 3, held_out)
    assert not {problem_key(p) for p, _ in kept} & held_out and len(kept) == 6


def test_rows_need_pick_then_point_rollouts():
    with pytest.raises(ValueError, match="pick_point"):
        corpus_anchor_sequences([_group([5], [], 0)], CharTokenizer(), 1, 0, 0, frozenset())


@pytest.mark.parametrize("override", [["tiny.anchor_corpus_rows=4", "algorithm.solution_anchor=0.0"],
                                      ["tiny.anchor_corpus_rows=-1", "algorithm.solution_anchor=1.0"]])
def test_the_config_refuses_rows_without_their_anchor_or_response(override):
    with pytest.raises(ConfigError, match=r"tiny\.anchor_corpus_rows"):
        load_config("default", override)
    with pytest.raises(ConfigError, match=r"tiny\.anchor_corpus_rows"):
        load_config("selector", ["tiny.anchor_corpus_rows=4", "algorithm.solution_anchor=1.0"])
    cfg = load_config("default", ["tiny.anchor_corpus_rows=4", "algorithm.solution_anchor=1.0"])
    assert cfg.tiny.anchor_corpus_rows == 4

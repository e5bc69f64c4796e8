"""driver/eval_sets.py and driver/heldout.py: the validation, test and no-cue sets of a selector run, and which
evaluations read them."""
from types import SimpleNamespace

import pytest

from driver.eval_sets import NOCUE_SUFFIX, nocue_tasks, split_heldout, missing_test_prompts


def heldout(problems: int, per_problem: int = 4) -> list:
    return [SimpleNamespace(problem_id=f"p{i}", prompt_id=f"p{i}/p{k}") for i in range(problems)
            for k in range(per_problem)]


def test_the_test_set_holds_no_problem_of_the_validation_set():
    tasks = heldout(10)
    validation, test = split_heldout(tasks, 6, 8)  # the validation set ends inside problem p1
    assert [t.prompt_id for t in validation] == [t.prompt_id for t in tasks[:6]]
    assert {t.problem_id for t in test} == {"p2", "p3"} and len(test) == 8
    assert split_heldout(tasks, 6, 0) == (tasks[:6], [])
    assert split_heldout(tasks, 0, 0)[0] == tasks
    assert missing_test_prompts(validation, test, 8) == ""
    assert "eval_test_prompts=40" in missing_test_prompts(*split_heldout(tasks, 6, 40), 40)


def test_the_no_cue_set_is_the_test_set_without_hedging_sentences():
    from core.algo.genselect import PromptStyle
    from driver.data.dataset import prompt_style
    from driver.data.procedural import HEDGES

    import dataclasses

    from core.records import SelectionTask

    hedged = f"Step 1: 2 + 3 = 5\n{HEDGES[0]}\nAnswer: 5"
    task = SelectionTask(prompt_id="p0/p0", problem_id="p0", domain="math", problem="Compute 2 + 3.",
                         candidates=(hedged, "Step 1: 2 + 3 = 6\nAnswer: 6"), candidate_answers=("5", "6"),
                         labels=(1.0, 0.0), reference="5", prompt="")
    cfg = SimpleNamespace(eval_without_cue=True, data=SimpleNamespace(hedge_wrong_rate=0.7, hedge_correct_rate=0.15,
                                                                      source="procedural_math"))
    [twin] = nocue_tasks(cfg, [task], [])
    assert twin.prompt_id == "p0/p0" + NOCUE_SUFFIX and HEDGES[0] not in twin.prompt and "Solution 1" in twin.prompt
    assert twin.candidates[0] == "Step 1: 2 + 3 = 5\nAnswer: 5" and twin.labels == task.labels
    assert [t.prompt_id for t in nocue_tasks(cfg, [task], [dataclasses.replace(task, prompt_id="t")])] == [
        "t" + NOCUE_SUFFIX]  # the test set's twins when there is a test set
    cfg.data.source = "model"
    assert nocue_tasks(cfg, [task], []) == []
    assert prompt_style(cfg) == PromptStyle()


def test_the_nocue_set_is_read_at_the_start_the_end_and_every_eval_without_cue_every_steps():
    from driver.heldout import nocue_due

    assert [s for s in range(0, 101, 25) if nocue_due(s, 100, 0)] == [0, 100]
    assert [s for s in range(0, 101, 25) if nocue_due(s, 100, 50)] == [0, 50, 100]
    assert [s for s in range(0, 121, 10) if nocue_due(s, 120, 50)] == [0, 50, 100, 120]
    assert [s for s in range(0, 101, 25) if nocue_due(s, 100, 0, at_start=False)] == [100]


@pytest.mark.parametrize("bad", [-1])
def test_a_negative_test_set_is_refused(bad):
    from core.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="eval_test_prompts"):
        load_config("default", [f"eval_test_prompts={bad}"])


def test_the_out_of_distribution_set_is_reasoning_gym_problems_built_as_the_data_keys_say(tmp_path):
    """eval_ood_tasks: a dataset of reasoning-gym problems of those tasks (one prompt a problem), candidates with the
    run's hedge cue and candidate counts, prompts in its style; none without the key."""
    from core.config import load_config
    from driver.eval_sets import ood_tasks

    keys = [f"data.out_dir={tmp_path}", f"model.cache_dir={tmp_path / 'models'}", "data.max_candidates=4"]
    assert ood_tasks(load_config("selector", keys), progress=False) == []
    cfg = load_config("selector", keys + ["eval_ood_tasks=[chain_sum]", "eval_ood_prompts=12"])
    tasks = ood_tasks(cfg, progress=False)
    assert len(tasks) == 12 and len({t.problem_id for t in tasks}) == 12
    assert all(2 <= t.num_candidates <= 4 and any(t.labels) and "Solution 0" in t.prompt for t in tasks)
    assert all(t.problem_id.startswith("rg-chain_sum") for t in tasks)

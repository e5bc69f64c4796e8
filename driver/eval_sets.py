"""The held-out sets a selector run reads (driver/heldout.py reads them). Every held-out problem, of every set, is
kept out of every training stage: RL, pretraining, the warm-start and the anchor rows exclude the dataset's whole
held-out split.

- **validation**: the first `eval_prompts` held-out prompts, read at every evaluation (the progress bar's figure,
  and the set a recipe's choices are read on);
- **test**: `eval_test_prompts` prompts of held-out problems the validation set does not hold, read at the start
  and the end only: problems no choice is tuned on;
- **no cue**: the test prompts (the validation ones without a test split) with every hedging sentence taken out
  of their candidates: the same problems, candidates, labels and numbers of candidates, decided only by reading
  the solutions (the hedge cue is the procedural source's verbal-confidence sentence, driver/data/procedural.py).
"""
from __future__ import annotations

from dataclasses import replace

NOCUE_SUFFIX = "/nocue"  # prompt id of a task's twin without its hedging sentences


def split_heldout(heldout: list, eval_prompts: int, test_prompts: int) -> tuple:
    """(validation, test) lists of SelectionTasks from the dataset's held-out prompts, in their order: the first
    `eval_prompts` (0: all), and the first `test_prompts` of the prompts whose problem no validation prompt has
    (0: none)."""
    validation = heldout[:eval_prompts] if eval_prompts else list(heldout)
    if not test_prompts:
        return validation, []
    seen = {t.problem_id for t in validation}
    return validation, [t for t in heldout if t.problem_id not in seen][:test_prompts]


def missing_test_prompts(validation: list, test: list, test_prompts: int) -> str:
    """A one-line reason when `split_heldout` gave fewer than `test_prompts` test prompts beside the validation
    ones, else ''."""
    if test_prompts and len(test) < test_prompts:
        return (f"eval_test_prompts={test_prompts}: the held-out split has {len(test)} prompts of problems outside "
                f"the {len(validation)} validation prompts; raise data.num_problems or data.heldout_fraction, or "
                f"lower eval_test_prompts")
    return ""


def without_cue(task, style):
    """`task` (a SelectionTask) with the hedging sentences taken out of its candidates and its prompt rendered
    again in `style` (core.algo.genselect.PromptStyle), id `{prompt_id}/nocue`: the same candidates, answers and
    labels."""
    from core.algo.genselect import build_prompt
    from driver.data.procedural import strip_hedges

    candidates = tuple(strip_hedges(c) for c in task.candidates)
    return replace(task, prompt_id=task.prompt_id + NOCUE_SUFFIX, candidates=candidates,
                   prompt=build_prompt(task.problem, candidates, style=style))


def nocue_tasks(cfg, validation: list, test: list) -> list:
    """The no-cue set of a run (see the module docstring); [] when the data carries no hedge cue, for a model
    source, or with `eval_without_cue` off."""
    from driver.data.dataset import prompt_style

    d = cfg.data
    if not cfg.eval_without_cue or not (d.hedge_wrong_rate or d.hedge_correct_rate) or d.source == "model":
        return []
    style = prompt_style(cfg)
    return [without_cue(t, style) for t in (test or validation)]


def ood_tasks(cfg, progress: bool = True) -> list:
    """The out-of-distribution set of a run (`eval_ood_tasks`): up to `eval_ood_prompts` prompts, one a problem, of
    reasoning-gym problems of those tasks, candidates and prompts built as the run's data keys say with
    `data.source=reasoning_gym` (a dataset of its own, cached like any other; none of its problems is trained on);
    [] without `eval_ood_tasks`."""
    import dataclasses

    from driver.data.dataset import load_dataset
    from driver.prepare import prepare

    if not cfg.eval_ood_tasks:
        return []
    data = dataclasses.replace(cfg.data, source="reasoning_gym", reasoning_gym_tasks=list(cfg.eval_ood_tasks),
                               num_problems=2 * cfg.eval_ood_prompts, prompts_per_problem=1, path="", max_rows=0)
    built = prepare(data, cfg.model, with_model=False, progress=progress, eval_prompts=0, tiny_cfg=cfg.tiny)
    dataset = load_dataset(built.dataset_dir)
    return (dataset.heldout + dataset.train)[:cfg.eval_ood_prompts]

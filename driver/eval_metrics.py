"""The metrics of a selector's choices on held-out selection prompts (driver/evaluate.py and the training run's
readings, driver/heldout.py, compute them): GenSelect@N next to pass@1, majority@N, random@N and pass@N with 95%
bootstrap CIs over problems (core/algo/metrics.py), accuracy by number of candidates and by the kind of mistake
picked, the sampled accuracy, the own-answer breakdown of a selector that solves before it points, and every
selector's per-prompt scores. Pure: no Ray, no model.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Optional, Sequence

from core.algo import metrics as M
from core.algo.genselect import OWN_ANSWER_RE, parse_judgment

BASELINES = ("genselect", "pass_at_1", "majority", "random", "pass_at_n")


def per_prompt_scores(task, choice: Optional[int]) -> dict:
    """The five accuracies of one prompt. pass@1 = the generator's single-sample accuracy = random@N."""
    correct = task.correct
    return {
        "genselect": float(choice is not None and correct[choice]),
        "pass_at_1": M.random_at_n(correct),
        "majority": M.majority_at_k(list(task.candidate_answers), correct),
        "random": M.random_at_n(correct),
        "pass_at_n": M.pass_at_n(correct),
    }


def selection_metrics(tasks: Sequence, choices: Sequence[Optional[int]], seed: int = 0) -> dict:
    """Aggregate per-prompt scores by problem, then mean and bootstrap CI over problems.

    Args:
        tasks: P SelectionTask objects.
        choices: P chosen candidate indices (None = parse failure).
    Returns: {metric: value, metric_lo, metric_hi for each of BASELINES and for `over_majority` (GenSelect@N
              minus majority@N, paired by problem), prompts, problems, parse_failure_rate}.
    """
    by_problem = defaultdict(lambda: defaultdict(list))
    for task, choice in zip(tasks, choices):
        for key, value in per_prompt_scores(task, choice).items():
            by_problem[task.problem_id][key].append(value)
    out = {"prompts": len(tasks), "problems": len(by_problem),
           "parse_failure_rate": sum(c is None for c in choices) / max(1, len(choices))}
    for key in BASELINES:
        values = [sum(v[key]) / len(v[key]) for v in by_problem.values()]
        out[key], out[f"{key}_lo"], out[f"{key}_hi"] = M.bootstrap_ci(values, seed=seed)
    # the selector's margin over majority voting, paired by problem (tighter than comparing the two CIs)
    margins = [(sum(v["genselect"]) - sum(v["majority"])) / len(v["genselect"]) for v in by_problem.values()]
    out["over_majority"], out["over_majority_lo"], out["over_majority_hi"] = M.bootstrap_ci(margins, seed=seed)
    return out


def prompt_scores(tasks: Sequence, choices_by_key: dict) -> dict:
    """The per-prompt scores of every selector read on `tasks`, kept in the eval record so that two selectors can be
    compared paired by problem from the run folder alone (core.algo.paired; driver/report.py, driver/compare.py).

    Args:
        tasks: P SelectionTask objects; choices_by_key: {metric key (`genselect`, `knockout/genselect`,
            `rule/cue/genselect`, ...): P chosen indices (None = parse failure)}.
    Returns: {problem_id: P problem ids, each key: P 1/0 (the chosen candidate is correct), majority, random: P
              expected accuracies of majority voting and of a uniform choice}.
    """
    out = {"problem_id": [t.problem_id for t in tasks]}
    for key, choices in choices_by_key.items():
        out[key] = [int(c is not None and t.correct[c]) for t, c in zip(tasks, choices)]
    out["majority"] = [round(M.majority_at_k(list(t.candidate_answers), t.correct), 6) for t in tasks]
    out["random"] = [round(M.random_at_n(t.correct), 6) for t in tasks]
    return out


def by_size(tasks: Sequence, choices: Sequence[Optional[int]]) -> dict:
    """Accuracy by number of candidates N: {N: {prompts, genselect, majority, random, pass_at_n}} (prompt
    means)."""
    rows: dict = defaultdict(lambda: defaultdict(list))
    for task, choice in zip(tasks, choices):
        scores = per_prompt_scores(task, choice)
        for key in ("genselect", "majority", "random", "pass_at_n"):
            rows[task.num_candidates][key].append(scores[key])
    return {n: {"prompts": len(r["genselect"]), **{k: sum(v) / len(v) for k, v in r.items()}}
            for n, r in sorted(rows.items())}


def by_slip_kind(tasks: Sequence, choices: Sequence[Optional[int]]) -> dict:
    """Which candidates the selector picks, by what is wrong with them (driver.data.slips; procedural
    math) and whether they hedge: {kind: {shown, picked, pick_rate}} where `shown` is the number of
    candidates of that kind and `pick_rate` = picks / (sum over prompts of count/N), i.e. 1.0 = picked as
    often as a uniform choice would, below 1 = avoided (a mistake the selector catches), above 1 = preferred.
    """
    from driver.data.slips import is_hedged, slip_kind

    shown, expected, picked = defaultdict(int), defaultdict(float), defaultdict(int)
    for task, choice in zip(tasks, choices):
        kinds = [slip_kind(c) + (" (hedged)" if is_hedged(c) else "") for c in task.candidates]
        for kind in kinds:
            shown[kind] += 1
            expected[kind] += 1 / task.num_candidates
        if choice is not None:
            picked[kinds[choice]] += 1
    return {k: {"shown": shown[k], "picked": picked[k], "pick_rate": picked[k] / expected[k]}
            for k in sorted(shown)}


def sampled_accuracy(groups: Sequence) -> float:
    """Mean correctness of every sampled response (temperature 1): what the policy gets right on average,
    which moves before the greedy choice flips. A parse failure counts as wrong."""
    hits = [float(j.ok and g.task.correct[j.index])
            for g in groups for j in (parse_judgment(r.response_text, g.task.num_candidates, r.truncated)
                                      for r in g.rollouts)]
    return sum(hits) / max(1, len(hits))


def own_answer_breakdown(tasks: Sequence, responses: Sequence[str], choices: Sequence[Optional[int]]) -> dict:
    """Why a solve-then-point selector (`tiny.model.response=solve_point`: a worked solution ending
    `Answer: X #k`) is right or wrong: its own answer X against the candidates' answers (string equality after
    stripping spaces, which is exact for the procedural generator's integer answers).

    Args:
        tasks: P SelectionTask objects; responses: their P greedy responses; choices: the P indices parsed from them
            (None = parse failure).
    Returns: {} when no response has an `Answer: X #k` line (another response format), else
        {answered: share of prompts with an `Answer: X` line, solved: share whose X is a correct candidate's
         answer, stated: share where some candidate states X, follows: of those, the share whose k names one
         stating X, follow_ceiling: accuracy if k named a candidate stating X whenever one does (the same choice
         otherwise): with follows = 1.0, what the selector reads is its own solving, unstated_accuracy: accuracy
         on the prompts where no candidate states X (or no X was written): what the choice reads there (the hedge
         cue, or nothing)}.
    """
    answered = solved = stated = follows = unstated_hits = 0
    for task, own, choice in zip(tasks, own_answers(responses), choices):
        answered += own is not None
        stating = [i for i, a in enumerate(task.candidate_answers) if own is not None and str(a).strip() == own]
        if stating:
            stated += 1
            solved += task.correct[stating[0]]  # one answer: all its candidates are right or all wrong
            follows += choice in stating
        else:
            unstated_hits += choice is not None and task.correct[choice]
    if not answered:
        return {}
    prompts = max(1, len(tasks))
    # following X wherever a candidate states it scores exactly the solved prompts there; elsewhere the same choice
    return {"answered": answered / prompts, "solved": solved / prompts, "stated": stated / prompts,
            "follows": follows / max(1, stated), "follow_ceiling": (solved + unstated_hits) / prompts,
            "unstated_accuracy": unstated_hits / max(1, len(tasks) - stated)}


def own_answers(responses: Sequence[str]) -> list:
    """The answer X of each response's last `Answer: X #k` line (a model that solves, then points), else None."""
    found = [OWN_ANSWER_RE.findall(r) for r in responses]
    return [f[-1].strip() if f else None for f in found]

"""Label every candidate of every problem with a real verifier (math answers or the code sandbox), or as the user
says: a file's own `candidate_labels` are kept, and `data.label_function` replaces both verifiers
(driver/data/user_labels.py).

Candidates the verifier could not judge (a timeout or an error: label None) are left out of their problem's
pool and counted (`LabelStats`, per verifier, with examples), so every label that reaches the builder was
actually verified and every candidate read is accounted for: read = correct + wrong + unverified.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from driver.data.problem import RawProblem
from driver.data.user_labels import label_with_function, record_file_labels
from driver.data.verify import LabelStats, label_code, label_math


def label_problems(problems: list, sandbox_cfg=None, processes: int = 2, timeout_s: float = 10.0,
                   label_function: str = "", keep_unverified: bool = False,
                   label_params: Optional[dict] = None) -> tuple:
    """(labeled problems without their unverified candidates, LabelStats). A problem whose file gave its labels
    keeps them. The others: with `label_function` (a dotted path) the user's function labels each candidate, called
    with the keyword parameters `label_params` (the `data.label_function` section's); else
    math: each candidate answer against the reference (`sandbox.math_answer.check_answer`); code: the unit-test
    pass fraction in the sandbox. `keep_unverified`: an unverified candidate stays, labelled 0.0 (still counted as
    a timeout or error), so every problem keeps all its candidates (Best-of-N over a fixed number of samples)."""
    stats = LabelStats()
    record_file_labels([p for p in problems if p.labels is not None], stats)
    rest = [p for p in problems if p.labels is None]
    math = [p for p in rest if p.domain == "math"]
    code = [p for p in rest if p.domain == "code"]
    labels: dict = {}
    if label_function:
        _scatter(rest, label_with_function(rest, label_function, processes, stats, params=label_params), labels)
        math, code = [], []
    if math:
        pairs = [(a, p.reference) for p in math for a in p.candidate_answers]
        flat = label_math(pairs, processes=processes, timeout_s=timeout_s, stats=stats, names=_names(math))
        _scatter(math, flat, labels)
    if code:
        items = [(c, p.reference, p.entry_point) for p in code for c in p.candidate_answers]
        flat = label_code(items, sandbox_cfg=sandbox_cfg, stats=stats, names=_names(code))
        _scatter(code, flat, labels)
    if keep_unverified:
        return [p if p.labels is not None else p.with_labels([x or 0.0 for x in labels[p.id]])
                for p in problems], stats
    return [p if p.labels is not None else _verified(p, labels[p.id]) for p in problems], stats


def _names(problems: list) -> list:
    return [f"{p.id}#{i}" for p in problems for i in range(len(p.candidate_answers))]


def _scatter(problems: list, flat: list, out: dict) -> None:
    i = 0
    for p in problems:
        n = len(p.candidate_answers)
        out[p.id] = flat[i:i + n]
        i += n


def _verified(p: RawProblem, labels: list) -> RawProblem:
    """The problem with labels, keeping only the candidates that have one."""
    keep = [i for i, x in enumerate(labels) if x is not None]
    if len(keep) < len(labels):
        p = replace(p, candidates=tuple(p.candidates[i] for i in keep),
                    candidate_answers=tuple(p.candidate_answers[i] for i in keep))
    return p.with_labels([labels[i] for i in keep])


__all__ = ["label_problems", "RawProblem"]

"""Label every candidate of every problem with a real verifier (math-verify or the code sandbox)."""
from __future__ import annotations

from driver.data.problem import RawProblem
from driver.data.verify import LabelStats, label_code, label_math


def label_problems(problems: list, sandbox_cfg=None, processes: int = 2, timeout_s: float = 10.0) -> tuple:
    """(labeled problems, LabelStats). Math: candidate answer vs reference through `verify_math_answer`;
    code: unit-test pass fraction of each candidate program, run in the sandbox."""
    stats = LabelStats()
    math = [p for p in problems if p.domain == "math"]
    code = [p for p in problems if p.domain == "code"]
    labels: dict = {}
    if math:
        pairs = [(a, p.reference) for p in math for a in p.candidate_answers]
        flat = label_math(pairs, processes=processes, timeout_s=timeout_s, stats=stats)
        _scatter(math, flat, labels)
    if code:
        items = [(c, p.reference, p.entry_point) for p in code for c in p.candidate_answers]
        flat = label_code(items, sandbox_cfg=sandbox_cfg, stats=stats)
        _scatter(code, flat, labels)
    return [p.with_labels(labels[p.id]) for p in problems], stats


def _scatter(problems: list, flat: list, out: dict) -> None:
    i = 0
    for p in problems:
        n = len(p.candidate_answers)
        out[p.id] = flat[i:i + n]
        i += n


__all__ = ["label_problems", "RawProblem"]

"""Problems for generator training (`task=generator`): the problems of `data.source` as `SolveTask`s, split
train/held-out by problem, and the worked solutions the embedded generator is warm-started on.

No candidates are shown to the policy: it writes its own solutions, and the verifier pool scores them against
the problem's reference answer (math) or tests (code). For `procedural_math` the problems are generated with
`candidate_error_rate=0` and no hedges, so every candidate the source writes is a correct worked solution
(`driver/data/worked.py`: one operation per line, then `Answer: X`); those are the supervised targets of the
embedded generator's warm-start (driver/models/generator_warmstart.py), on training problems only.

Refused before any actor starts (`DataError`, one line): a code problem without tests (nothing could score its
solutions), and a source that yields fewer than two problems (no held-out set).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from core.records import SolveTask
from driver.data.builder import split_by_problem
from driver.data.problem import DataError


@dataclass
class SolveData:
    """The generator's problems: `train` and `heldout` SolveTasks (split by problem), and for the training
    problems of `procedural_math` their correct worked solutions (`worked[problem_id]`, for the warm-start)."""
    train: list
    heldout: list
    worked: dict
    source: str


def load_solve_data(data_cfg) -> SolveData:
    """The problems of `data_cfg.source` for `task=generator` (see the module docstring)."""
    from driver.data import sources

    cfg = data_cfg
    if cfg.source == "procedural_math":  # every candidate correct: worked solutions, not slips
        cfg = dataclasses.replace(cfg, candidate_error_rate=0.0, hedge_wrong_rate=0.0, hedge_correct_rate=0.0)
    loaded = sources.load_problems(cfg, problems_only=True)  # a user file's candidates are not needed
    problems = loaded.problems
    no_tests = [e for e in loaded.bad_rows.examples if "'tests'" in e]
    if no_tests:  # a user file's code row without tests is a bad row for a selector; here it is refused
        raise DataError(f"data.source={cfg.source}: a code problem without tests ({no_tests[0]}): a generator's "
                        f"program for it could not be scored")
    for p in problems:
        if p.domain == "code" and not p.reference.strip():
            raise DataError(f"data.source={cfg.source}: code problem {p.id} ({p.origin or 'no origin'}) has no "
                            f"tests: a generator's program for it could not be scored")
        if p.domain == "math" and not p.reference.strip():
            raise DataError(f"data.source={cfg.source}: math problem {p.id} has no reference answer")
    if len(problems) < 2:
        raise DataError(f"data.source={cfg.source}: {len(problems)} problem(s); task=generator needs at least 2 "
                        f"(some are held out for pass@k)")
    train, heldout = split_by_problem(problems, cfg.heldout_fraction, cfg.seed)
    worked = {p.id: list(dict.fromkeys(p.candidates)) for p in train} if cfg.source == "procedural_math" else {}
    return SolveData([solve_task(p) for p in train], [solve_task(p) for p in heldout], worked, cfg.source)


def solve_task(problem) -> SolveTask:
    """A RawProblem as a generator's task (its candidates left out)."""
    return SolveTask(prompt_id=problem.id, problem_id=problem.id, domain=problem.domain, problem=problem.problem,
                     reference=problem.reference, entry_point=problem.entry_point)

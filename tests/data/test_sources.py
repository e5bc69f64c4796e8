"""Problem sources: procedural, reasoning-gym (offline, seeded), HumanEval (package file), and the registry."""
import ast
import json
import random

import pytest

from core.config import DataConfig
from driver.data import sources
from driver.data.mutations import code_candidates, mutants
from driver.data.verify import verify_math_answer


def test_every_configured_source_is_registered():
    from core.config_rules import _CHOICES

    assert set(_CHOICES["data.source"]) == set(sources.SOURCES) | {"model"}  # model: driver.data.generated
    with pytest.raises(ValueError, match="not one of"):
        sources.load_problems(DataConfig(source="nope"))
    with pytest.raises(ValueError, match="load_model_source"):
        sources.load_problems(DataConfig(source="model"))


def test_procedural_source_rows():
    res = sources.load_problems(DataConfig(num_problems=30, candidates_per_problem=6))
    assert len(res.problems) == 30 and res.bad_rows.count == 0
    for p in res.problems:
        assert p.domain == "math" and len(p.candidates) == 6 == len(p.candidate_answers)
        assert all(c.endswith(f"Answer: {a}") for c, a in zip(p.candidates, p.candidate_answers))


@pytest.mark.parametrize("task", ["basic_arithmetic", "chain_sum", "simple_equations"])
def test_reasoning_gym_source_is_seeded_and_has_a_correct_candidate_path(task):
    cfg = DataConfig(source="reasoning_gym", reasoning_gym_tasks=[task], num_problems=8, candidate_error_rate=0.5)
    a, b = sources.load_problems(cfg).problems, sources.load_problems(cfg).problems
    assert a == b and len(a) == 8
    assert all(len(p.candidates) == cfg.candidates_per_problem and p.reference for p in a)
    labels = [verify_math_answer(ans, p.reference) for p in a for ans in p.candidate_answers]
    assert any(labels) and not all(labels)


def test_reasoning_gym_expression_tasks_get_worked_steps():
    cfg = DataConfig(source="reasoning_gym", reasoning_gym_tasks=["basic_arithmetic"], num_problems=5,
                     candidate_error_rate=0.0)
    for p in sources.load_problems(cfg).problems:
        assert all(verify_math_answer(a, p.reference) for a in p.candidate_answers)
        assert all(" = " in c for c in p.candidates)


def test_humaneval_is_read_from_the_installed_package():
    tasks = sources.read_humaneval()
    assert len(tasks) == 164 and {"prompt", "canonical_solution", "test", "entry_point"} <= set(tasks[0])
    res = sources.load_problems(DataConfig(source="humaneval", num_problems=5))
    p = res.problems[0]
    assert p.domain == "code" and p.entry_point == tasks[0]["entry_point"] and "def check" in p.reference


def test_mutants_are_realistic_single_site_changes_and_candidates_hide_formatting():
    task = sources.read_humaneval()[0]
    source = task["prompt"] + task["canonical_solution"]
    kinds = {k for k, _ in mutants(source)}
    assert {"swap_comparison", "return_value"} <= kinds
    cands = code_candidates(source, 16, 0.5, random.Random(0))
    for c in cands:
        ast.parse(c)
        assert '"""' not in c and "#" not in c  # docstrings and comments never tell candidates apart
    assert len(set(cands)) > 2


def test_source_versions_name_packages_and_file_identity(tmp_path):
    v = sources.source_versions(DataConfig())
    assert v["math-verify"] != "not installed" and "tokenizers" in v
    f = tmp_path / "x.jsonl"
    f.write_text("{}\n")
    v1 = sources.source_versions(DataConfig(source="file", path=str(f)))
    f.write_text("{}\n{}\n")
    assert sources.source_versions(DataConfig(source="file", path=str(f)))["file"] != v1["file"]


def _user_file(tmp_path, n):
    rows = [{"id": f"m{i}", "problem": f"{i}+1?", "answer": str(i + 1), "candidates": [f"Answer: {i + 1}", "Answer: 0"]}
            for i in range(n)]
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_user_file_is_read_whole_whatever_num_problems_says(tmp_path):
    """`data.num_problems` (600 by default) caps generated problems only: a user file is never truncated by it."""
    cfg = DataConfig(source="file", path=str(_user_file(tmp_path, 20)), num_problems=10)
    assert len(sources.load_problems(cfg).problems) == 20


def test_a_row_cap_on_a_user_file_says_how_many_rows_it_left_out(tmp_path, caplog):
    cfg = DataConfig(source="file", path=str(_user_file(tmp_path, 20)), max_rows=10)
    with caplog.at_level("WARNING"):
        res = sources.load_problems(cfg)
    assert [p.id for p in res.problems] == [f"m{i}" for i in range(10)]
    assert res.rows_read == 20 and res.rows_over_cap == 10
    assert any("10 of 20" in r.getMessage() and "data.max_rows" in r.getMessage() for r in caplog.records)


def _passes_its_tests(task: dict, program: str) -> bool:
    """Run a rendering of a (trusted) HumanEval canonical solution against the task's tests, in-process."""
    namespace: dict = {}
    try:
        exec(compile(program, "<candidate>", "exec"), namespace)  # noqa: S102 -- the package's own reference code
        exec(compile(task["test"], "<tests>", "exec"), namespace)  # noqa: S102
        namespace["check"](namespace[task["entry_point"]])
    except Exception:  # noqa: BLE001 -- any failure means the rendering broke the code
        return False
    return True


@pytest.mark.parametrize("task_id", ["HumanEval/19", "HumanEval/108", "HumanEval/145"])
def test_renaming_locals_never_breaks_nested_scopes_that_rebind_a_name(task_id):
    """The renamer leaves a name alone inside lambdas and nested functions that rebind it."""
    from driver.data.mutations import render

    task = next(t for t in sources.read_humaneval() if t["task_id"] == task_id)
    tree = ast.parse(task["prompt"] + task["canonical_solution"])
    broken = [seed for seed in range(40) if not _passes_its_tests(task, render(tree, random.Random(seed)))]
    assert broken == []

"""Bad input: a clear result every time, never an exception in the caller, never a stuck worker."""

from __future__ import annotations

import json

import pytest

from sandbox.config import CodeTask
from sandbox.result import STATUSES

pytestmark = pytest.mark.slow

CHECK3 = ("def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(2) == 3\n"
          "    assert candidate(3) == 4\n")


def a(solution: str, tests: str = CHECK3) -> CodeTask:
    return CodeTask(solution=solution, tests=tests, entry_point="f")


def stdio(solution: str, cases: list[tuple[str, str]]) -> CodeTask:
    return CodeTask(solution=solution, tests=json.dumps([{"input": i, "output": o} for i, o in cases]),
                    format="stdio")


# (id, task, expected status, expected passed, substring expected in error / first failing test's error)
CASES = [
    ("syntax_error", a("def f(x) return x + 1\n"), "solution_error", 0, "SyntaxError"),
    ("missing_import", a("import numpyy\ndef f(x):\n    return x + 1\n"), "solution_error", 0, "ModuleNotFoundError"),
    ("null_bytes", a("def f(x):\n    return x\x00 + 1\n"), "solution_error", 0, "null"),
    ("lone_surrogate", a("def f(x):\n    return '\ud800'\n"), None, 0, None),
    ("no_entry_point", a("def g(x):\n    return x + 1\n"), "solution_error", 0, "no 'f'"),
    ("raises_at_import", a("raise RuntimeError('boom')\n"), "solution_error", 0, "boom"),
    ("partial_credit", a("def f(x):\n    return 2 if x == 1 else 0\n"), "completed", 1, "AssertionError"),
    ("sys_exit_in_call", a("import sys\ndef f(x):\n    if x == 2:\n        sys.exit(0)\n    return x + 1\n"),
     "completed", 2, "SystemExit"),
    ("kills_interpreter", a("import os\ndef f(x):\n    if x == 2:\n        os._exit(0)\n    return x + 1\n"),
     "crashed", 1, "not run"),
    ("sigkills_itself", a("import os, signal\ndef f(x):\n    os.kill(os.getpid(), signal.SIGKILL)\n"),
     "crashed", 0, "not run"),
    ("invalid_tests", a("def f(x):\n    return x\n", "def check(candidate)\n    assert 1\n"), "invalid_tests", 0,
     "tests do not parse"),
    ("stdio_ok_and_wrong", stdio("print(int(input()) * 2)\n", [("2\n", "4\n"), ("3", "7")]), "completed", 1,
     "wrong answer"),
    ("stdio_runtime_error", stdio("import sys\nprint(1 / int(sys.stdin.read()))\n", [("0", "0")]), "completed", 0,
     "ZeroDivisionError"),
    ("stdio_syntax_error", stdio("print(\n", [("", "")]), "solution_error", 0, "SyntaxError"),
    ("stdio_bad_tests", CodeTask(solution="print(1)", tests="{not json", format="stdio"), "invalid_tests", 0, "stdio"),
    ("stdio_huge_output", stdio("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", [("", "")]),
     "completed", 0, "exit status"),
]


@pytest.mark.parametrize("name,task,status,passed,needle", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gives_a_clear_result(pool, name, task, status, passed, needle):
    r = pool.run(task)
    assert r.status in STATUSES
    if status is not None:
        assert r.status == status, r
    assert r.passed == passed, r
    if needle is not None:
        failing = [t.error for t in r.tests if not t.passed]
        assert needle in (r.error or "") or any(needle in (e or "") for e in failing), r
    assert 0.0 <= r.pass_fraction <= 1.0


def test_gigabytes_of_output_are_cut_and_never_buffered(pool):
    r = pool.run(a("import sys\ndef f(x):\n    for _ in range(4096):\n        sys.stdout.write('y' * 2 ** 20)\n"))
    assert r.status == "output_limit" and r.output_exceeded
    assert len(r.stdout_tail) <= pool.cfg.tail_bytes and set(r.stdout_tail) <= {"y"}
    assert r.stdout_bytes < 64 * pool.cfg.max_output_bytes  # cut long before the 4 GiB it meant to write


def test_a_hanging_case_costs_only_its_own_credit(pool):
    """With a per-case deadline, one case that never returns fails and the others still count."""
    from dataclasses import replace

    from sandbox.pool import SandboxPool

    with SandboxPool(replace(pool.cfg, case_timeout_s=0.5, workers=1)) as p:
        r = p.run(a("def f(x):\n    while x == 2:\n        pass\n    return x + 1\n"))
    assert r.status == "completed" and r.passed == 2 and r.total == 3
    assert "timed out" in r.tests[1].error


def test_never_returning_solution_times_out_and_the_worker_survives(pool):
    results = pool.run_many([a("def f(x):\n    while True:\n        pass\n"), a("def f(x):\n    return x + 1\n")])
    assert results[0].status == "timeout" and results[0].pass_fraction == 0.0
    assert results[1].all_passed

"""Turn a task's tests into the test cases the harness runs; done by the supervisor, before any sandbox starts.

Assert tests: if the tests define ``check(candidate)``, each top-level statement of its body that contains an
``assert`` (anywhere inside: a ``for`` loop of asserts is one case) is one test case; the other statements are
setup steps, run in order in the same namespace (HumanEval). A docstring is skipped. If ``check`` has no assert
at top level, or a statement cannot stand alone (a bare ``return``), ``check(candidate)`` is the one case.
Without ``check``, each top-level statement of the tests that contains an ``assert`` is a case and the rest
are setup, run in the solution's namespace (MBPP style).

Stdin/stdout tests: a JSON list of ``{"input": str, "output": str}``.

Planning here keeps the parser (``ast``, ``json``) out of the sandboxed interpreter's start-up and lets
unusable tests be reported (``invalid_tests``) without starting a sandbox at all.
"""

from __future__ import annotations

import ast
import json
import threading
from dataclasses import dataclass

#: CPython 3.11 keeps the AST constructor's recursion depth in the `ast` module's shared state (python/cpython
#: gh-106905): two threads building AST objects at once can fail with `SystemError: AST constructor recursion depth
#: mismatch` (a HumanEval reference failed so, 1 in 164, on the pool's threads). The pool plans tests on several
#: threads, so every parse here holds this lock.
_PARSE_LOCK = threading.Lock()


class InvalidTests(ValueError):
    """The tests cannot be turned into cases (a data problem, not the solution's fault)."""


@dataclass
class AssertPlan:
    """``mode``: ``"check"`` or ``"module"``; ``arg``: check's parameter name; ``steps``: (label or None for a
    setup step, standalone source) in execution order."""

    mode: str
    arg: str | None
    steps: list[tuple[str | None, str]]

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.steps if name is not None]


def _has_assert(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Assert) for n in ast.walk(node))


def plan_assert(tests: str) -> AssertPlan:
    """Split assert-style tests into steps; raises InvalidTests."""
    try:
        with _PARSE_LOCK:
            tree = ast.parse(tests)
    except (SyntaxError, ValueError) as exc:
        raise InvalidTests(f"tests do not parse: {type(exc).__name__}: {exc}") from None
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if checks:
        check = checks[-1]
        arg = check.args.args[0].arg if check.args.args else "candidate"
        body = list(check.body)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]
        mode = "check"
    else:
        arg, body, mode = None, list(tree.body), "module"
    steps: list[tuple[str | None, str]] = []
    cases = 0
    try:
        for stmt in body:
            source = ast.unparse(stmt)
            compile(source, "<tests>", "exec")  # e.g. a top-level `return` of check cannot stand alone
            if _has_assert(stmt):
                steps.append((f"assert {cases}: {source.splitlines()[0][:80]}", source))
                cases += 1
            else:
                steps.append((None, source))
    except SyntaxError:
        steps = []
    if mode == "check" and not any(name for name, _ in steps):
        steps = [(f"check({arg})", f"check({arg})")]
    if not any(name for name, _ in steps):
        raise InvalidTests("tests contain no assert statement and no check function")
    return AssertPlan(mode, arg, steps)


def parse_stdio(tests: str) -> list[dict]:
    """The list of ``{"input", "output"}`` cases; raises InvalidTests."""
    try:
        cases = json.loads(tests)
    except ValueError as exc:
        raise InvalidTests(f"stdio tests are not JSON: {exc}") from None
    if not isinstance(cases, list) or not cases or not all(
            isinstance(c, dict) and isinstance(c.get("input"), str) and isinstance(c.get("output"), str)
            for c in cases):
        raise InvalidTests("stdio tests must be a non-empty JSON list of {\"input\": str, \"output\": str}")
    return [{"input": c["input"], "output": c["output"]} for c in cases]

"""A program checked against its tests in the sandbox (sandbox/): the code half of the verifier pool
(actors/verifier/verifier_pool.py; the math half: actors/verifier/math_check.py)."""
from __future__ import annotations

import logging
from typing import Any, NamedTuple

from actors.verifier.math_check import ERROR, OK, TIMEOUT, Verdict
from core.config import VerifierConfig

log = logging.getLogger(__name__)


def start_sandbox(cfg: VerifierConfig) -> Any:
    """A started `SandboxPool` for `cfg` (raises `SandboxUnavailable` naming what is missing)."""
    from sandbox.pool import SandboxConfig, SandboxPool
    if cfg.sandbox_timeout_s >= cfg.timeout_s:
        log.warning("verifier.sandbox_timeout_s=%s >= verifier.timeout_s=%s: slow code runs will be scored as "
                    "verifier timeouts instead of partial credit", cfg.sandbox_timeout_s, cfg.timeout_s)
    sandbox_cfg = SandboxConfig(backend=cfg.sandbox_backend, timeout_s=cfg.sandbox_timeout_s,
                                case_timeout_s=min(3.0, cfg.sandbox_timeout_s), memory_mb=cfg.sandbox_memory_mb,
                                workers=cfg.processes_per_worker)
    return SandboxPool(sandbox_cfg)


class Check(NamedTuple):
    """One verification: a math answer against its reference, or a program against its tests."""
    domain: str
    answer: str          # math: the answer string; code: the program
    reference: str       # math: the reference answer; code: the test program or stdin/stdout cases
    entry_point: str     # code: the function under test ("" for stdin/stdout cases)
    task_id: str         # for the sandbox and the logs


def check_program(sandbox: Any, check: Check, deadline_s: float) -> tuple:
    """Run `check.answer` (a program) against `check.reference` in the sandbox: (Verdict, sandbox status).

    HumanEval-style `check(candidate)` tests when `check.entry_point` is set, else stdin/stdout cases (a JSON
    list). The verdict's score is the unit-test pass fraction; what the *solution* does (fails, hangs, floods
    its output, runs out of memory) is a verdict about the candidate ("ok", with the tests it passed); a
    sandbox failure or unparseable tests is "error"; no result within `deadline_s` is "timeout".
    """
    from concurrent.futures import TimeoutError as FutureTimeout
    from sandbox.pool import CodeTask
    code_task = CodeTask(solution=check.answer, tests=check.reference,
                         format="assert" if check.entry_point else "stdio", entry_point=check.entry_point or None,
                         task_id=check.task_id)
    future = sandbox.submit(code_task)
    try:
        result = future.result(timeout=deadline_s)
    except FutureTimeout:
        future.cancel()
        return Verdict(0.0, TIMEOUT, f"no sandbox result within {deadline_s:.1f}s"), "verifier_timeout"
    if result.status in ("sandbox_error", "invalid_tests"):
        return Verdict(0.0, ERROR, f"{result.status}: {result.error}"), result.status
    return Verdict(result.pass_fraction, OK, f"{result.status}: {result.passed}/{result.total}"), result.status

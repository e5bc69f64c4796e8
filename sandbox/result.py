"""Result types of one sandboxed execution.

An :class:`ExecutionResult` is what every backend returns, for every input, good or bad: a solution that does
not parse, hangs, floods its output or kills its own process still yields a result whose fields say what
happened. ``pass_fraction`` (tests passed / tests planned, in [0, 1]) is the continuous reward that max@k
training uses; a run that never reported a test plan has ``total == 0`` and ``pass_fraction == 0.0``.

``status`` is one of :data:`STATUSES`, chosen by the first rule that applies:

- ``sandbox_error``: the sandbox itself failed (the backend could not start the run); ``error`` says why.
- ``invalid_tests``: the tests could not be parsed (a data problem, not the solution's fault).
- ``timeout``: the wall deadline passed and the whole process tree was killed.
- ``output_limit``: stdout + stderr went over ``max_output_bytes``; the run was killed.
- ``memory_limit``: the cgroup's OOM killer fired, or the solution hit ``MemoryError`` under the rlimit.
- ``solution_error``: the solution did not compile or raised while it was being defined (``error`` has it).
- ``crashed``: the harness never reported completion (the solution killed its own interpreter, ...).
- ``completed``: every planned test ran; ``passed`` of ``total`` passed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

STATUSES = (
    "completed",
    "solution_error",
    "crashed",
    "memory_limit",
    "output_limit",
    "timeout",
    "invalid_tests",
    "sandbox_error",
)


@dataclass
class TestOutcome:
    """One test case: an assert statement of ``check`` or one stdin/stdout case.

    Attributes:
        name: a short label (``"assert 3"`` or ``"case 3"``) with, for asserts, the start of its source.
        passed: whether the case passed; a case that never ran (timeout, crash) is ``False``.
        error: why it failed (exception type and message, or expected/got), capped; ``None`` when passed.
        duration_s: wall time of the case inside the sandbox, ``None`` when it never ran.
    """

    __test__ = False  # not a pytest test class

    name: str
    passed: bool
    error: str | None = None
    duration_s: float | None = None


@dataclass
class ExecutionResult:
    """Everything known about one run of a solution against its tests.

    Attributes:
        status: see the module docstring; one of :data:`STATUSES`.
        tests: one :class:`TestOutcome` per planned test case, in order.
        exit_code: the sandboxed program's exit status (``None`` when killed or never started); ``signal`` holds
            the signal number when it died of one.
        signal: the signal that ended the sandboxed program, if any.
        timed_out: the wall deadline passed and the process tree was killed.
        memory_exceeded: the memory limit was hit (cgroup OOM kill, Docker OOMKilled, or ``MemoryError``).
        output_exceeded: stdout + stderr exceeded ``max_output_bytes``.
        duration_s: wall time from start of the sandbox to its end, as seen by the supervisor.
        stdout_tail / stderr_tail: the last ``tail_bytes`` of the program's own output (harness frames removed),
            decoded as UTF-8 with replacement.
        stdout_bytes / stderr_bytes: total bytes the program wrote to each stream.
        error: the solution's compile/definition error, the tests' parse error, or the sandbox failure.
        backend: name of the backend that ran it.
        cgroup_limits: whether per-run cgroup limits on memory and process count were applied.
    """

    status: str
    tests: list[TestOutcome] = field(default_factory=list)
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    memory_exceeded: bool = False
    output_exceeded: bool = False
    duration_s: float = 0.0
    stdout_tail: str = ""
    stderr_tail: str = ""
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    error: str | None = None
    backend: str = ""
    cgroup_limits: bool = False

    @property
    def total(self) -> int:
        """Number of planned test cases."""
        return len(self.tests)

    @property
    def passed(self) -> int:
        """Number of test cases that passed."""
        return sum(1 for t in self.tests if t.passed)

    @property
    def pass_fraction(self) -> float:
        """Fraction of planned tests that passed, in [0, 1]; 0.0 when no test was planned."""
        return self.passed / self.total if self.total else 0.0

    @property
    def all_passed(self) -> bool:
        """True when the run completed and every planned test passed (at least one)."""
        return self.status == "completed" and self.total > 0 and self.passed == self.total

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, including the derived ``passed``, ``total`` and ``pass_fraction``."""
        d = asdict(self)
        d.update(passed=self.passed, total=self.total, pass_fraction=self.pass_fraction)
        return d

    def to_json(self, **kwargs: Any) -> str:
        """Serialise with :func:`json.dumps` (keyword arguments are passed through)."""
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ExecutionResult":
        """Inverse of :meth:`to_dict` (derived keys are ignored)."""
        fields = {k: v for k, v in d.items() if k not in ("passed", "total", "pass_fraction")}
        fields["tests"] = [TestOutcome(**t) for t in fields.get("tests", [])]
        return cls(**fields)

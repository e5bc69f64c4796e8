"""What every backend shares: the start-up check contract, the never-raise wrapper, the self-test."""

from __future__ import annotations

import threading
import time

from sandbox.config import CodeTask, SandboxConfig
from sandbox.plan import InvalidTests
from sandbox.protocol import RawRun, assemble, build_spec, new_nonce
from sandbox.result import ExecutionResult

SELF_TEST = CodeTask(solution="def f(x):\n    return x + 1\n",
                     tests="def check(candidate):\n    assert candidate(1) == 2\n", entry_point="f")


class SandboxUnavailable(RuntimeError):
    """The configured backend cannot run on this machine. The message says what is missing and how to get it;
    the pool never falls back to another backend."""


class Backend:
    """A way to run the harness in isolation. Subclasses set ``name`` and implement :meth:`_start` (checks;
    raise :class:`SandboxUnavailable`), :meth:`_launch`/:meth:`_alive`/:meth:`_discard` (a sandbox waiting for
    its spec) and :meth:`_run` (one run of a built spec on :meth:`_take_launch`; may raise: :meth:`execute`
    turns any exception into a ``sandbox_error`` result). :meth:`execute` must be thread-safe."""

    name = "?"
    rlimit_nproc = True  # set RLIMIT_NPROC in the harness (right where each run has its own user namespace)

    def __init__(self, cfg: SandboxConfig) -> None:
        self.cfg = cfg
        self.cgroup_note = "not applicable"
        self._local = threading.local()  # per thread: one sandbox started ahead of time (prestart)
        self._lock = threading.Lock()
        self._prestarted: set = set()

    def start(self) -> None:
        """Start-up check, then a real self-test run; raises SandboxUnavailable with the reason."""
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        result = self.execute(SELF_TEST)
        if not result.all_passed:
            self.close()
            raise SandboxUnavailable(
                f"{self.name} backend failed its self-test (status {result.status}): {result.error or ''} "
                f"{result.stderr_tail.strip()[-800:]}".strip())

    def execute(self, task: CodeTask) -> ExecutionResult:
        """Run one task; never raises for anything the solution does, nor for a sandbox failure. Tests that
        cannot be planned give ``invalid_tests`` without starting a sandbox."""
        start, nonce = time.monotonic(), new_nonce()
        try:
            raw = self._run(build_spec(task, self.cfg, nonce, nproc=self.rlimit_nproc), nonce)
        except InvalidTests as exc:
            raw = RawRun(frames=[{"t": "fatal", "kind": "invalid_tests", "error": str(exc)}])
        except Exception as exc:  # infrastructure failure: reported as a result, counted by the caller
            raw = RawRun(error=f"{type(exc).__name__}: {exc}", duration_s=time.monotonic() - start)
        return assemble(raw, self.name)

    def prepare(self) -> None:
        """Start this thread's next sandbox now, so that it is booted (namespaces, cgroup, interpreter) and
        waiting for its spec on stdin when the next task arrives (``cfg.prestart``). The pool's workers call this
        between runs; a failure here only means the next run starts cold."""
        if not self.cfg.prestart or getattr(self._local, "ready", None) is not None:
            return
        try:
            launch = self._launch()
        except Exception:
            return
        with self._lock:
            self._prestarted.add(launch)
        self._local.ready = launch

    def _take_launch(self):
        """This thread's prestarted sandbox if it is still alive and untouched, else a fresh one."""
        launch, self._local.ready = getattr(self._local, "ready", None), None
        if launch is not None:
            with self._lock:
                self._prestarted.discard(launch)
            if not self._alive(launch):
                self._discard(launch)
                launch = None
        return launch if launch is not None else self._launch()

    def _close_prestarted(self) -> None:
        with self._lock:
            launches, self._prestarted = list(self._prestarted), set()
        for launch in launches:
            self._discard(launch)

    def describe(self) -> dict:
        """Facts about the backend for ``python -m sandbox --check`` and logs."""
        return {"backend": self.name, "cgroups": self.cgroup_note}

    def close(self) -> None:
        """Release what the backend holds (cgroups, janitor, engine connection). Idempotent."""

    def _start(self) -> None:
        raise NotImplementedError

    def _run(self, spec: bytes, nonce: str) -> RawRun:
        """Run the harness on ``spec`` (from :func:`~sandbox.protocol.build_spec`) in isolation."""
        raise NotImplementedError

    def _launch(self):
        """Start a sandbox whose harness waits for its spec on stdin; returns an opaque launch."""
        raise NotImplementedError

    def _alive(self, launch) -> bool:
        """Whether a prestarted launch is still waiting, untouched."""
        raise NotImplementedError

    def _discard(self, launch) -> None:
        """Kill an unused launch and release what it holds."""
        raise NotImplementedError

"""A pool of sandboxed executions: N worker threads behind a bounded queue.

    from sandbox.pool import SandboxPool, SandboxConfig, CodeTask
    with SandboxPool(SandboxConfig(backend="bubblewrap", workers=2)) as pool:
        result = pool.run(CodeTask(solution=src, tests=tests, format="assert", entry_point="f"))
        result.pass_fraction  # in [0, 1]

Construction runs the backend's start-up check and a self-test run, and raises
:class:`~sandbox.backends.base.SandboxUnavailable` (with the reason and the fix) when the configured backend
cannot run; it never falls back to another backend. After that, ``run``/``run_many``/``submit`` never raise
for anything a solution does: every outcome, including a sandbox failure, is an
:class:`~sandbox.result.ExecutionResult`. Every run has its own wall deadline (``timeout_s``) after which its
whole process tree is killed, so a worker is never stuck. ``submit`` blocks while the queue is full.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Iterable

from sandbox.backends.base import Backend, SandboxUnavailable
from sandbox.config import CodeTask, SandboxConfig
from sandbox.result import ExecutionResult

__all__ = ["SandboxPool", "SandboxConfig", "CodeTask", "ExecutionResult", "SandboxUnavailable", "make_backend"]


def _bubblewrap(cfg: SandboxConfig) -> Backend:
    from sandbox.backends.bubblewrap import BubblewrapBackend
    return BubblewrapBackend(cfg)


def _docker(cfg: SandboxConfig) -> Backend:
    from sandbox.backends.docker import DockerBackend
    return DockerBackend(cfg)


def _unsafe(cfg: SandboxConfig) -> Backend:
    from sandbox.backends.subprocess_unsafe import UnsafeSubprocessBackend
    return UnsafeSubprocessBackend(cfg)


BACKEND_FACTORIES = {"bubblewrap": _bubblewrap, "docker": _docker, "unsafe_subprocess": _unsafe}


def make_backend(cfg: SandboxConfig) -> Backend:
    """The (not yet started) backend named by ``cfg.backend``."""
    return BACKEND_FACTORIES[cfg.backend](cfg)


_STOP = object()


class SandboxPool:
    """Thread-safe pool of sandboxed runs; see the module docstring."""

    def __init__(self, cfg: SandboxConfig | None = None) -> None:
        self.cfg = cfg or SandboxConfig()
        self.backend = make_backend(self.cfg)
        self.backend.start()  # raises SandboxUnavailable
        self._queue: queue.Queue = queue.Queue(maxsize=self.cfg.queue_size)
        self._lock = threading.Lock()
        self._closed = False
        self._threads = [threading.Thread(target=self._work, name=f"sandbox-{i}", daemon=True)
                         for i in range(self.cfg.workers)]
        for t in self._threads:
            t.start()

    def submit(self, task: CodeTask) -> "Future[ExecutionResult]":
        """Queue a run; blocks while the queue is full. Raises RuntimeError if the pool is closed."""
        fut: Future = Future()
        with self._lock:  # held across put so that close() cannot slip its stop markers in first
            if self._closed:
                raise RuntimeError("SandboxPool is closed")
            self._queue.put((fut, task))
        return fut

    def run(self, task: CodeTask) -> ExecutionResult:
        """Run one task and wait for its result."""
        return self.submit(task).result()

    def run_many(self, tasks: Iterable[CodeTask]) -> list[ExecutionResult]:
        """Run tasks in parallel; results in input order."""
        futures = [self.submit(t) for t in tasks]
        return [f.result() for f in futures]

    def _work(self) -> None:
        while True:
            self.backend.prepare()  # boot the next sandbox while waiting (cfg.prestart)
            item = self._queue.get()
            if item is _STOP:
                return
            fut, task = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(self.backend.execute(task))
            except BaseException as exc:  # execute() never raises; this is a last line of defence
                fut.set_exception(exc)

    def describe(self) -> dict:
        """Backend facts plus the pool's size."""
        return {**self.backend.describe(), "workers": self.cfg.workers, "queue_size": self.cfg.queue_size}

    def close(self) -> None:
        """Finish queued runs, stop the workers, release the backend (cgroups, janitor). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for _ in self._threads:
            self._queue.put(_STOP)
        for t in self._threads:
            t.join()
        self.backend.close()

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

"""Long-lived worker processes that run one call at a time under a wall deadline, killed and replaced on expiry.

Why processes: math-verify bounds every parse and comparison with `signal.alarm`, which only works in a
process's main thread, and a C-level computation (a huge integer power inside sympy) may not return to the
interpreter for any alarm to fire. A worker process runs each call in its own main thread, and the pool's outer
wall deadline kills and replaces a worker that overruns it, so a hang becomes a counted "timeout", never a stuck
caller or a silent zero. Used by the dataset labeler (`driver.data.verify.label_math`) and the training-time
verifier (`actors.verifier.verifier_pool.VerifierPool`): one implementation for both.
"""
from __future__ import annotations

import importlib
import multiprocessing
import queue
import resource
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

OK, TIMEOUT, ERROR = "ok", "timeout", "error"


def _worker_main(conn: Any, preload: Sequence[str], memory_mb: Optional[int], warmup: Optional[Callable]) -> None:
    """Loop of one worker process: receive (fn, args), send ("ok", value) or ("error", reason).

    Exits when the parent closes its end of the pipe (EOF) or sends None, so an orphaned idle worker does not
    outlive its actor. `memory_mb` caps the address space (RLIMIT_AS): an answer that makes sympy build a
    gigantic integer fails with MemoryError instead of exhausting the host. `warmup()` runs once before the
    worker reports ready, so that first-use costs (sympy's lazy imports and caches) are not paid inside a
    deadline.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    if memory_mb:
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb * 2**20, memory_mb * 2**20))
    for name in preload:
        importlib.import_module(name)
    if warmup is not None:
        try:
            warmup()
        except BaseException:  # noqa: BLE001 -- a failed warm-up shows up in the first real call instead
            pass
    conn.send(("ready", None))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        fn, args = message
        try:
            reply = ("ok", fn(*args))
        except BaseException as e:  # noqa: BLE001 -- includes math-verify's TimeoutException(BaseException)
            reply = ("error", f"{type(e).__name__}: {e}")
        try:
            conn.send(reply)
        except (BrokenPipeError, EOFError, OSError):
            return
        except Exception as e:  # noqa: BLE001 -- an unpicklable result
            conn.send(("error", f"result could not be sent back: {type(e).__name__}: {e}"))


class _Worker:
    def __init__(self, ctx: Any, index: int, *args: Any):
        self.conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=_worker_main, args=(child, *args), daemon=True,
                                   name=f"verifier-worker-{index}")
        self.process.start()
        child.close()
        self.ready = False

    def wait_ready(self, timeout_s: float) -> None:
        if self.ready:
            return
        if not self.conn.poll(timeout_s):
            raise TimeoutError(f"worker process did not start within {timeout_s:.0f}s")
        self.conn.recv()
        self.ready = True

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


@dataclass(frozen=True)
class Outcome:
    """One call through the pool: `status` "ok" (then `value` is the function's return value), "timeout"
    (the worker was killed at the deadline and replaced) or "error" (`value` is the reason)."""
    status: str
    value: Any
    seconds: float


class ProcessPool:
    """`processes` long-lived worker processes; each runs one call at a time, each call under a deadline.

    Thread-safe: callers block in `run` until a worker is idle (at most `processes` calls are in flight).
    A worker that overruns its deadline, or dies, is killed and replaced by a fresh one, so the pool never
    stays stuck. `context` is the multiprocessing start method: "forkserver" (default: workers fork from a
    clean single-threaded server that has imported `preload` already, so a replacement is ready in ~0.1 s
    instead of ~1 s) or "spawn"; never "fork" inside a threaded Ray worker. `preload` names modules each
    worker imports before it reports ready (and the fork server imports, if it is not running yet).
    `memory_mb` caps each worker's address space (None: no cap). `warmup`, a picklable function without
    arguments, runs in each new worker before it takes calls.
    """

    def __init__(self, processes: int, context: str = "forkserver", preload: Sequence[str] = (),
                 memory_mb: Optional[int] = 2048, warmup: Optional[Callable] = None,
                 start_timeout_s: float = 120.0):
        if processes < 1:
            raise ValueError(f"processes must be >= 1, got {processes}")
        if context not in ("forkserver", "spawn"):
            raise ValueError(f"context must be 'forkserver' or 'spawn', got {context!r}")
        self._ctx = multiprocessing.get_context(context)
        if context == "forkserver":
            self._ctx.set_forkserver_preload(list(preload))  # no effect once the server runs
        self._worker_args = (tuple(preload), memory_mb, warmup)
        self._start_timeout_s = start_timeout_s
        self._lock = threading.Lock()
        self._count = 0
        self._workers: set = set()
        self._idle: "queue.Queue[_Worker]" = queue.Queue()
        self._closed = False
        self.replaced = 0
        for _ in range(processes):
            self._idle.put(self._start())

    def _start(self) -> _Worker:
        with self._lock:
            self._count += 1
            worker = _Worker(self._ctx, self._count, *self._worker_args)
            self._workers.add(worker)
            return worker

    def _replace(self, worker: _Worker) -> _Worker:
        worker.kill()
        with self._lock:
            self._workers.discard(worker)
            if self._closed:
                return worker
            self.replaced += 1
        return self._start()

    def run(self, fn: Callable, args: tuple, deadline_s: float) -> Outcome:
        """Run `fn(*args)` in an idle worker; the deadline counts from the hand-over, not the wait."""
        if self._closed:
            raise RuntimeError("ProcessPool is closed")
        worker = self._idle.get()
        start = time.monotonic()
        try:
            worker.wait_ready(self._start_timeout_s)
            start = time.monotonic()
            worker.conn.send((fn, args))
            if not worker.conn.poll(deadline_s):
                worker = self._replace(worker)
                return Outcome(TIMEOUT, f"no result within {deadline_s:.1f}s; worker killed and replaced",
                               time.monotonic() - start)
            kind, value = worker.conn.recv()
            return Outcome(OK if kind == "ok" else ERROR, value, time.monotonic() - start)
        except (EOFError, OSError, TimeoutError) as e:  # the worker died (crash, OOM kill) or never started
            worker = self._replace(worker)
            return Outcome(ERROR, f"worker process failed: {type(e).__name__}: {e}", time.monotonic() - start)
        finally:
            self._idle.put(worker)

    def alive(self) -> int:
        """Worker processes currently alive."""
        with self._lock:
            return sum(w.process.is_alive() for w in self._workers)

    def close(self) -> None:
        """Stop every worker: idle ones exit on request, busy or stuck ones are killed; idempotent."""
        with self._lock:
            self._closed = True
            workers, self._workers = list(self._workers), set()
        for worker in workers:
            try:
                worker.conn.send(None)
            except OSError:
                pass
        end = time.monotonic() + 1.0
        for worker in workers:
            worker.process.join(timeout=max(0.0, end - time.monotonic()))
            worker.kill()


__all__ = ["ProcessPool", "Outcome", "OK", "TIMEOUT", "ERROR"]

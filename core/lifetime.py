"""Process lifetime (Linux): the processes a program starts die with it, also when it is SIGKILLed.

A SIGKILLed process runs no cleanup, and its children are re-parented (to init, or to the nearest *child
subreaper* above them) and live on. Two pieces prevent that:

- `start_parent_watch(parent_pid, on_gone)`: a daemon thread that notices this process's parent dying (its
  parent pid changes) within `poll_seconds` and then runs `on_gone` (default: SIGKILL this process). vLLM's
  engine processes run it through actors/rollout/vllm_plugin.py.
- `guarded(module, argv)`: runs `python -m module argv` as the child of the process the user started (the
  *guard*). Both are child subreapers (`PR_SET_CHILD_SUBREAPER`), so whatever any of their descendants starts
  stays reachable in their process tree, even after its own parent died. The child watches the guard with
  `start_parent_watch`; when the guard is killed, it kills every process below it and then itself. When the
  child dies (killed, crashed, or after a clean stop), the guard kills every process left below it and exits
  with the child's status. Signals sent to the guard (SIGINT, SIGTERM) are passed on to the child as SIGTERM.

Not covered: both processes killed at the same instant (e.g. SIGKILL to the whole process group).
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, Optional

POLL_SECONDS = 1.0
GUARD_ENV = "GENSELECT_GUARD_PID"  # set by the guard in its child's environment: the guard's pid
PR_SET_CHILD_SUBREAPER = 36


def _kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def start_parent_watch(parent_pid: int, on_gone: Optional[Callable[[], None]] = None,
                       poll_seconds: float = POLL_SECONDS) -> threading.Thread:
    """Daemon thread: once this process's parent is no longer `parent_pid`, run `on_gone` (default: SIGKILL this
    process; nothing it holds can be cleaned up by it anyway once its owner is gone)."""
    def watch():
        while os.getppid() == parent_pid:
            time.sleep(poll_seconds)
        (on_gone or _kill_self)()

    thread = threading.Thread(target=watch, name="genselect-parent-watch", daemon=True)
    thread.start()
    return thread


def become_subreaper() -> bool:
    """Make this process a child subreaper: orphaned descendants are re-parented to it, not to init. False where
    the kernel or platform has no such call (the guarantee then covers direct descendants only)."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def kill_descendants(rounds: int = 5, timeout_s: float = 5.0) -> int:
    """SIGKILL every live descendant of this process and wait until each is gone (a subreaper sees orphans too);
    repeated while a round finds new ones (a process may start children while it is being killed). Returns how
    many were killed."""
    import psutil

    me, killed = psutil.Process(), 0
    for _ in range(rounds):
        procs = [p for p in me.children(recursive=True) if _alive(p)]
        for proc in procs:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        if not procs:
            break
        killed += len(procs)
        deadline = time.monotonic() + timeout_s
        while any(_alive(p) for p in procs) and time.monotonic() < deadline:
            time.sleep(0.05)
    return killed


def _alive(proc) -> bool:
    """Whether `proc` still runs; a dead child of this process (orphans re-parented here included) is reaped."""
    import psutil

    try:
        os.waitpid(proc.pid, os.WNOHANG)
    except ChildProcessError:  # not our child (yet): its own parent reaps it
        pass
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _stop_tree() -> None:
    """The guard is gone: every process below this one, then this one."""
    kill_descendants()
    _kill_self()


def guarded(module: str, argv: list) -> Optional[int]:
    """In the process the user started: run `python -m module *argv` as its guarded child and return the exit
    status to exit with. In that child: arm the watch of the guard and return None (the caller goes on with the
    real work)."""
    guard = os.environ.pop(GUARD_ENV, "")
    if guard == str(os.getppid()):
        become_subreaper()
        start_parent_watch(int(guard), on_gone=_stop_tree)
        return None
    return _run_guard(module, argv)


def _run_guard(module: str, argv: list) -> int:
    become_subreaper()
    child = subprocess.Popen([sys.executable, "-m", module, *argv], env={**os.environ, GUARD_ENV: str(os.getpid())})

    def forward(signum, frame):
        try:
            child.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    code = child.wait()
    left = kill_descendants()
    if code < 0:
        print(f"{module}: its process was killed by signal {-code}; the {left} processes it left were stopped",
              file=sys.stderr, flush=True)
        return 128 - code
    return code

"""Supervising one sandbox process: write its spec to stdin, drain stdout and stderr with caps, enforce the
wall deadline and the output limit by calling the backend's kill function (which kills the whole tree).
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from dataclasses import dataclass
from typing import Callable

from sandbox.protocol import FrameDemux, Tail

DRAIN_GRACE_S = 1.0  # after a kill, how long to wait for the pipes to close before abandoning them


@dataclass
class Drained:
    """How the conversation with the process ended."""

    timed_out: bool = False
    output_exceeded: bool = False
    stdin_broken: bool = False  # the process closed stdin before taking the whole spec


def drain(proc: subprocess.Popen, spec: bytes, demux: FrameDemux, stderr: Tail, deadline: float,
          max_output_bytes: int, kill: Callable[[], None]) -> Drained:
    """Write ``spec`` to ``proc``'s stdin (then close it) while reading stdout (through ``demux``) and stderr
    until both close.

    Calls ``kill()`` once, when the monotonic clock passes ``deadline`` or when the candidate's output exceeds
    ``max_output_bytes``; output after that is discarded.
    """
    sel = selectors.DefaultSelector()
    for stream, sink in ((proc.stdout, demux.feed), (proc.stderr, stderr.feed)):
        os.set_blocking(stream.fileno(), False)
        sel.register(stream, selectors.EVENT_READ, sink)
    out = Drained()
    pending = memoryview(spec)
    os.set_blocking(proc.stdin.fileno(), False)
    sel.register(proc.stdin, selectors.EVENT_WRITE, None)
    killed, give_up = False, None
    try:
        while any(key.events & selectors.EVENT_READ for key in sel.get_map().values()):
            now = time.monotonic()
            if not killed and now >= deadline:
                out.timed_out = killed = True
                kill()
                give_up = now + DRAIN_GRACE_S
            if give_up is not None and now >= give_up:
                break  # something outside the tree still holds the pipe: stop listening
            wait = (give_up if killed else deadline) - now
            for key, _ in sel.select(timeout=max(0.0, min(wait, 1.0))):
                if key.fileobj is proc.stdin:
                    try:
                        pending = pending[os.write(proc.stdin.fileno(), pending):]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        out.stdin_broken = True
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                try:
                    data = os.read(key.fileobj.fileno(), 65536)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(key.fileobj)
                    continue
                if killed:
                    continue
                key.data(data)
                if demux.tail.total + stderr.total > max_output_bytes:
                    out.output_exceeded = killed = True
                    kill()
                    give_up = time.monotonic() + DRAIN_GRACE_S
    finally:
        sel.close()
        demux.close()
        if not proc.stdin.closed:
            proc.stdin.close()
    return out


def reap(proc: subprocess.Popen, kill: Callable[[], None], timeout: float = 5.0) -> tuple[int | None, int | None]:
    """Wait for ``proc`` (killing it if it lingers); returns ``(exit_code, signal)``, one of them None."""
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill()
        code = proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    return (None, -code) if code < 0 else (code, None)

"""NOT a sandbox: a bare subprocess with the harness's rlimits, in a throwaway cwd.

It exists as the baseline of the overhead benchmark (the same harness and program, minus the isolation) and
for trusted code. It must be named explicitly (``backend="unsafe_subprocess"``), logs a warning when started,
and is never chosen as a fallback. A candidate run this way can reach the network and 127.0.0.1, write
wherever the supervisor's user can, read what it can, and leave ``setsid`` orphans behind.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
import warnings

from sandbox.backends.base import Backend
from sandbox.config import default_python
from sandbox.process import drain, reap
from sandbox.protocol import FrameDemux, RawRun, Tail, harness_source, python_flags


class UnsafeSubprocessBackend(Backend):
    """See the module docstring."""

    name = "unsafe_subprocess"

    def _start(self) -> None:
        warnings.warn("sandbox backend 'unsafe_subprocess' gives NO isolation; use it for benchmarks and trusted "
                      "code only", RuntimeWarning, stacklevel=3)
        self.python = self.cfg.python or default_python()
        self.cgroup_note = "none: no isolation at all"

    def _launch(self) -> tuple[subprocess.Popen, str]:
        work = tempfile.mkdtemp(prefix="sandbox-unsafe-")
        try:
            proc = subprocess.Popen([self.python, *python_flags(self.cfg), "-c", harness_source()],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=work,
                                    start_new_session=True, close_fds=True)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        return proc, work

    def _alive(self, launch: tuple[subprocess.Popen, str]) -> bool:
        proc = launch[0]
        return proc.poll() is None and not select.select([proc.stdout, proc.stderr], [], [], 0)[0]

    def _discard(self, launch: tuple[subprocess.Popen, str]) -> None:
        proc, work = launch
        _killpg(proc)
        reap(proc, lambda: _killpg(proc))
        proc.stdin.close()
        shutil.rmtree(work, ignore_errors=True)

    def _run(self, spec: bytes, nonce: str) -> RawRun:
        cfg = self.cfg
        stdout, stderr = Tail(cfg.tail_bytes), Tail(cfg.tail_bytes)
        demux = FrameDemux(nonce, stdout)
        proc, work = self._take_launch()
        start = time.monotonic()
        try:
            done = drain(proc, spec, demux, stderr, start + cfg.timeout_s, cfg.max_output_bytes,
                         lambda: _killpg(proc))
            exit_code, sig = reap(proc, lambda: _killpg(proc))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return RawRun(frames=demux.frames, stdout=stdout, stderr=stderr, exit_code=exit_code, signal=sig,
                      timed_out=done.timed_out, output_exceeded=done.output_exceeded,
                      duration_s=time.monotonic() - start)

    def close(self) -> None:
        self._close_prestarted()


def _killpg(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass

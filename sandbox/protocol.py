"""Supervisor side of the harness protocol: build the spec, split stdout into candidate output and frames,
and turn what a run left behind into an :class:`~sandbox.result.ExecutionResult`.

The frame format is defined in :mod:`sandbox.harness`. Frames are recognised only with the run's random nonce
(128 bits), so text the candidate prints cannot pass for a result. Candidate output is counted in full and only
its tail is kept: a solution that prints gigabytes costs the supervisor ``tail_bytes`` of memory.
"""

from __future__ import annotations

import functools
import json
import marshal
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.config import CodeTask, SandboxConfig
from sandbox.plan import parse_stdio, plan_assert
from sandbox.result import ExecutionResult, TestOutcome

MAX_FRAME_BYTES = 1 << 20  # a frame longer than this is not the harness's: treat it as candidate output


@functools.lru_cache(maxsize=1)
def harness_source() -> str:
    """Source text of the in-sandbox harness (passed to ``python3 -c``)."""
    return (Path(__file__).parent / "harness.py").read_text(encoding="utf-8")


def python_flags(cfg: SandboxConfig) -> list[str]:
    """Interpreter flags inside the sandbox: isolated mode, and no ``site`` unless asked for."""
    return ["-I"] if cfg.site_packages else ["-I", "-S"]


def build_spec(task: CodeTask, cfg: SandboxConfig, nonce: str, *, nproc: bool = True) -> bytes:
    """The spec the harness reads from stdin (``marshal``, version 4: plain values only). Plans the tests
    first and raises :class:`~sandbox.plan.InvalidTests` when they are unusable. ``nproc=False`` leaves
    RLIMIT_NPROC unset (Docker: there it would count every container's processes of the same uid; the
    container's pids limit does the job)."""
    limits = {
        "cpu": cfg.cpu_time_s,
        "as": cfg.memory_mb * 1024 * 1024,
        "nproc": cfg.max_processes if nproc else None,
        "fsize": cfg.max_file_mb * 1024 * 1024,
        "nofile": 256,
        "core": 0,
    }
    spec = {"nonce": nonce, "format": task.format, "solution": task.solution, "case_timeout_s": cfg.case_timeout_s,
            "limits": limits, "python_flags": python_flags(cfg)}
    if task.format == "stdio":
        spec["cases"] = parse_stdio(task.tests)
    else:
        plan = plan_assert(task.tests)
        spec.update(mode=plan.mode, arg=plan.arg, steps=plan.steps, tests=task.tests, entry_point=task.entry_point)
    return marshal.dumps(spec, 4)


def new_nonce() -> str:
    """128 random bits, hex."""
    return secrets.token_hex(16)


class Tail:
    """Counts every byte written to a stream and keeps the last ``cap`` of them."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.total = 0
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        self._buf += data[-self.cap:] if self.cap else b""
        if len(self._buf) > self.cap:
            del self._buf[: len(self._buf) - self.cap]

    def text(self) -> str:
        return self._buf.decode("utf-8", "replace")


class FrameDemux:
    """Splits the harness's stdout into candidate output (fed to a :class:`Tail`) and nonce-tagged frames."""

    def __init__(self, nonce: str, tail: Tail) -> None:
        self.mark = b"\n\x1e" + nonce.encode("ascii") + b" "
        self.tail = tail
        self.frames: list[dict] = []
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data
        while True:
            start = self._buf.find(self.mark)
            if start < 0:
                keep = len(self.mark) - 1  # a mark may be split across reads
                if len(self._buf) > keep:
                    self.tail.feed(bytes(self._buf[: len(self._buf) - keep]))
                    del self._buf[: len(self._buf) - keep]
                return
            if start:
                self.tail.feed(bytes(self._buf[:start]))
                del self._buf[:start]
            end = self._buf.find(b"\n", len(self.mark))
            if end < 0:
                if len(self._buf) > MAX_FRAME_BYTES:  # not a frame of ours after all
                    self.tail.feed(bytes(self._buf))
                    self._buf.clear()
                return
            try:
                self.frames.append(json.loads(bytes(self._buf[len(self.mark): end])))
            except ValueError:
                self.tail.feed(bytes(self._buf[: end + 1]))
            del self._buf[: end + 1]

    def close(self) -> None:
        """Flush whatever is left as candidate output."""
        if self._buf:
            self.tail.feed(bytes(self._buf))
            self._buf.clear()


@dataclass
class RawRun:
    """What a backend observed of one run, before interpretation.

    ``exit_code``/``signal``: how the sandboxed program ended (both None when unknown); ``oom``: a memory
    limit fired outside the harness's view (cgroup OOM kill, Docker OOMKilled); ``error``: the sandbox failed.
    """

    frames: list[dict] = field(default_factory=list)
    stdout: Tail | None = None
    stderr: Tail | None = None
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    output_exceeded: bool = False
    oom: bool = False
    duration_s: float = 0.0
    cgroup_limits: bool = False
    error: str | None = None


def assemble(raw: RawRun, backend: str) -> ExecutionResult:
    """Interpret frames and process status into a result (status precedence: see :mod:`sandbox.result`)."""
    names: list[str] = []
    outcomes: dict[int, dict] = {}
    fatal: dict | None = None
    done = False
    for frame in raw.frames:
        kind = frame.get("t")
        if kind == "plan" and not names:
            names = [str(n) for n in frame.get("tests", [])]
        elif kind == "case" and isinstance(frame.get("i"), int):
            outcomes.setdefault(frame["i"], frame)
        elif kind == "fatal" and fatal is None:
            fatal = frame
        elif kind == "done":
            done = True
    tests = []
    for i, name in enumerate(names):
        o = outcomes.get(i)
        if o is None:
            tests.append(TestOutcome(name=name, passed=False, error="not run"))
        else:
            passed = bool(o.get("passed"))
            tests.append(TestOutcome(name=name, passed=passed, error=None if passed else str(o.get("error")),
                                     duration_s=o.get("dt")))
    memory = raw.oom or any(o.get("memory") for o in outcomes.values()) or bool(fatal and fatal.get("memory"))
    if raw.error is not None:
        status = "sandbox_error"
    elif fatal is not None and fatal.get("kind") == "invalid_tests":
        status = "invalid_tests"
    elif raw.timed_out:
        status = "timeout"
    elif raw.output_exceeded:
        status = "output_limit"
    elif memory:
        status = "memory_limit"
    elif fatal is not None:
        status = "solution_error"
    elif not done:
        status = "crashed"
    else:
        status = "completed"
    error = raw.error or (str(fatal.get("error")) if fatal else None)
    stdout, stderr = raw.stdout or Tail(0), raw.stderr or Tail(0)
    return ExecutionResult(
        status=status, tests=tests, exit_code=raw.exit_code, signal=raw.signal, timed_out=raw.timed_out,
        memory_exceeded=memory, output_exceeded=raw.output_exceeded, duration_s=raw.duration_s,
        stdout_tail=stdout.text(), stderr_tail=stderr.text(), stdout_bytes=stdout.total,
        stderr_bytes=stderr.total, error=error, backend=backend, cgroup_limits=raw.cgroup_limits,
    )

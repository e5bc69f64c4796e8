"""The trusted program that runs INSIDE the sandbox and judges a solution against its planned test cases.

The supervisor starts ``python3 -I -S -c <this file's source>`` in the sandbox and writes the spec to its stdin
(``marshal`` of a dict of plain values; see :func:`sandbox.protocol.build_spec`): nonce, format, solution,
the planned steps (:mod:`sandbox.plan`), per-case timeout, rlimits. The harness applies the rlimits, runs the
cases one at a time and reports over stdout in *frames*: ``"\\n" + "\\x1e" + nonce + " " + json + "\\n"``.
Frames: ``plan`` (test names, sent before any candidate code runs, so that the denominator is fixed), ``case``
(one outcome, sent as soon as the case ends, so that a later timeout keeps the credit already earned),
``fatal`` (the solution is unusable) and ``done``. The supervisor keeps only frames with the run's nonce;
everything else on stdout is the candidate's own output.

Forgery: with ``format="stdio"`` the candidate runs as a separate process whose stdout goes to a file, and the
harness is made non-dumpable, so the candidate can neither read the nonce nor reach the harness's stdout. With
``format="assert"`` the candidate's function runs inside this interpreter (``check`` calls it), so determined
code could dig the nonce out of memory, though not guess it; forked copies of the harness never report. The
isolation of the host never depends on this: that is the sandbox's job.

Start-up cost matters (one interpreter per run): stdlib only, nothing heavier than ``marshal``, ``resource`` and
``signal`` at import, no ``json``/``ast``/``subprocess`` unless needed; runs under any python3 >= 3.8.
"""

import marshal
import os
import resource
import signal
import sys
import time

MSG_CAP = 400  # characters of an error message kept per case
_RLIMITS = {"cpu": "RLIMIT_CPU", "as": "RLIMIT_AS", "nproc": "RLIMIT_NPROC", "fsize": "RLIMIT_FSIZE",
            "nofile": "RLIMIT_NOFILE", "core": "RLIMIT_CORE"}
_getpid = os.getpid


class CaseTimeout(BaseException):
    """Raised by SIGALRM when a case overruns (a BaseException: ``except Exception`` does not swallow it)."""


def describe(exc):
    """``"Type: message"``, capped at MSG_CAP characters."""
    try:
        text = type(exc).__name__ + (": " + str(exc) if str(exc) else "")
    except Exception:  # a candidate's exception whose __str__ raises
        text = type(exc).__name__
    return text[:MSG_CAP]


def to_json(value):
    """Minimal JSON encoder (None, bool, int, float, str, list, dict with str keys), ASCII output."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if value == value and abs(value) != float("inf") else "null"
    if isinstance(value, str):
        out = []
        for ch in value:
            o = ord(ch)
            if 0x20 <= o < 0x7F and ch != '"' and ch != "\\":
                out.append(ch)
            elif o < 0x10000:
                out.append("\\u%04x" % o)
            else:
                o -= 0x10000
                out.append("\\u%04x\\u%04x" % (0xD800 + (o >> 10), 0xDC00 + (o & 0x3FF)))
        return '"' + "".join(out) + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(to_json(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(to_json(str(k)) + ":" + to_json(v) for k, v in value.items()) + "}"
    return to_json(str(value))


def apply_limits(limits):
    """Set soft = hard = value for each rlimit given (None skipped); returns the names that failed."""
    failed = []
    for key, value in sorted(limits.items()):
        if value is None or key not in _RLIMITS:
            continue
        try:
            resource.setrlimit(getattr(resource, _RLIMITS[key]), (int(value), int(value)))
        except (ValueError, OSError):
            failed.append(key)
    return failed


def normalise_output(text):
    """Output as compared for stdin/stdout cases: trailing whitespace of each line and trailing blank lines
    removed, line endings unified."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


class Reporter:
    """Writes frames to a private duplicate of the original stdout; only the harness process itself reports
    (a process the candidate forks inherits this code but stays silent, so copies cannot race reports)."""

    def __init__(self, nonce):
        self._fd = os.dup(1)
        self._mark = b"\n\x1e" + nonce.encode("ascii") + b" "
        self._pid = _getpid()

    def emit(self, **frame):
        if _getpid() != self._pid:
            return
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        data = self._mark + to_json(frame).encode("ascii") + b"\n"
        while data:
            data = data[os.write(self._fd, data):]


def _alarm(_signum, _frame):
    raise CaseTimeout()


def _timed(code, namespace, timeout):
    """Exec ``code`` in ``namespace`` under the case timeout; returns (error or None, memory, seconds)."""
    start = time.monotonic()
    try:
        if timeout:
            signal.setitimer(signal.ITIMER_REAL, timeout)
        exec(code, namespace)
        return None, False, time.monotonic() - start
    except CaseTimeout:
        return "case timed out after %gs" % timeout, False, time.monotonic() - start
    except MemoryError as exc:
        return describe(exc) or "MemoryError", True, time.monotonic() - start
    except BaseException as exc:  # AssertionError, SystemExit, anything: fails this case only
        return describe(exc), False, time.monotonic() - start
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _compile(source, name, report):
    try:
        return compile(source, name, "exec")
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes, lone surrogates
        report.emit(t="fatal", kind="solution_error", error=describe(exc))
        return None


def run_assert(spec, report):
    """Run planned assert-style cases; reports plan, cases, fatal/done."""
    steps = spec["steps"]
    report.emit(t="plan", tests=[name for name, _ in steps if name is not None])
    timeout = spec.get("case_timeout_s")
    signal.signal(signal.SIGALRM, _alarm)
    solution = _compile(spec["solution"], "<solution>", report)
    if solution is None:
        return
    sol_ns = {"__name__": "__solution__"}
    error, memory, _ = _timed(solution, sol_ns, timeout)
    if error is not None:
        report.emit(t="fatal", kind="solution_error", error=error, memory=memory)
        return
    if spec["mode"] == "check":
        if spec["entry_point"] not in sol_ns:
            report.emit(t="fatal", kind="solution_error", error="solution defines no %r" % spec["entry_point"])
            return
        test_ns = dict(sol_ns, __name__="__tests__")  # tests see the solution's helpers, as in HumanEval
        error, memory, _ = _timed(compile(spec["tests"], "<tests>", "exec"), test_ns, timeout)
        if error is not None:
            report.emit(t="fatal", kind="solution_error", error="tests failed to load: " + error, memory=memory)
            return
        test_ns[spec["arg"]] = sol_ns[spec["entry_point"]]
    else:
        test_ns = sol_ns  # MBPP style: the tests name the solution's functions directly
    index = 0
    for name, source in steps:
        error, memory, seconds = _timed(compile(source, "<tests>", "exec"), test_ns, timeout)
        if name is not None:
            report.emit(t="case", i=index, passed=error is None, error=error, memory=memory, dt=round(seconds, 6))
            index += 1
    report.emit(t="done")


def _read_capped(path, cap):
    with open(path, "rb") as f:
        return f.read(cap).decode("utf-8", "replace")


def run_stdio(spec, report):
    """Run the solution as a program once per stdin/stdout case."""
    import subprocess

    cases = spec["cases"]
    report.emit(t="plan", tests=["case %d" % i for i in range(len(cases))])
    if _compile(spec["solution"], "<solution>", report) is None:
        return
    work = os.getcwd()
    sol_path = os.path.join(work, "solution.py")
    with open(sol_path, "w", encoding="utf-8", errors="surrogatepass") as f:
        f.write(spec["solution"])
    timeout = spec.get("case_timeout_s")
    paths = [os.path.join(work, ".case." + s) for s in ("in", "out", "err")]
    for i, case in enumerate(cases):
        with open(paths[0], "w", encoding="utf-8") as f:
            f.write(case["input"])
        start = time.monotonic()
        with open(paths[0], "rb") as fin, open(paths[1], "wb") as fout, open(paths[2], "wb") as ferr:
            proc = subprocess.Popen([sys.executable] + spec["python_flags"] + [sol_path], stdin=fin, stdout=fout,
                                    stderr=ferr, cwd=work, start_new_session=True)
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                code = None
        seconds = round(time.monotonic() - start, 6)
        got, err = _read_capped(paths[1], 1 << 20), _read_capped(paths[2], 1 << 16)
        if code is None:
            error = "case timed out after %gs" % timeout
        elif code != 0:
            error = ("exit status %d: " % code + err.strip()[-MSG_CAP:])[:MSG_CAP]
        elif normalise_output(got) != normalise_output(case["output"]):
            error = ("wrong answer: expected %r, got %r" % (case["output"][:150], got[:150]))[:MSG_CAP]
        else:
            error = None
        memory = code is not None and code != 0 and "MemoryError" in err
        report.emit(t="case", i=i, passed=error is None, error=error, memory=memory, dt=seconds)
    report.emit(t="done")


def _non_dumpable():
    """PR_SET_DUMPABLE 0: processes of the same uid cannot ptrace us or open /proc/<us>/fd or mem."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    except Exception:
        pass


def main():
    """Read the spec from stdin, apply limits, run the cases, exit without running candidate exit hooks."""
    spec = marshal.loads(sys.stdin.buffer.read())
    report = Reporter(spec.pop("nonce"))
    failed = apply_limits(spec.get("limits") or {})
    if failed:
        sys.stderr.write("harness: could not set rlimits %s\n" % failed)
    if spec["format"] == "stdio":
        _non_dumpable()
        run_stdio(spec, report)
    else:
        run_assert(spec, report)
    os._exit(0)  # also ends forked copies of the harness that reach this point


if __name__ == "__main__":
    main()

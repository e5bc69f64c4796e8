"""Unit tests without a sandbox: test planning, output comparison, frame parsing, result assembly."""

from __future__ import annotations

import json
import marshal

import pytest
from hypothesis import given, settings, strategies as st

from sandbox.config import CodeTask, SandboxConfig
from sandbox.harness import normalise_output, to_json
from sandbox.plan import InvalidTests, parse_stdio, plan_assert
from sandbox.protocol import FrameDemux, RawRun, Tail, assemble, build_spec
from sandbox.result import ExecutionResult, TestOutcome

HUMANEVAL_LIKE = '''
METADATA = {"author": "x"}

def check(candidate):
    """docstring is not a case"""
    import math
    assert candidate(1) == 2
    x = candidate(2)
    assert x == 3
    for i in range(3):
        assert candidate(i) == i + 1
    assert True, "trivial"
'''

# (tests source, expected mode, expected case labels' prefixes, expected number of setup steps)
PLANS = [
    (HUMANEVAL_LIKE, "check", ["assert 0: assert candidate(1) == 2", "assert 1: assert x == 3",
                               "assert 2: for i in range(3):", "assert 3: assert True"], 2),
    ("def check(c):\n    c(1)\n", "check", ["check(c)"], 0),
    ("def check(f):\n    if f(1) != 2:\n        return\n    assert f(2) == 3\n", "check", ["check(f)"], 0),
    ("from x import y\nassert add(1, 2) == 3\nassert add(0, 0) == 0\n", "module",
     ["assert 0: assert add(1, 2) == 3", "assert 1: assert add(0, 0) == 0"], 1),
]


@pytest.mark.parametrize("source,mode,labels,n_setup", PLANS)
def test_plan_assert(source, mode, labels, n_setup):
    plan = plan_assert(source)
    assert plan.mode == mode
    assert [n[: len(label)] for n, label in zip(plan.names, labels)] == labels and len(plan.names) == len(labels)
    assert sum(1 for n, _ in plan.steps if n is None) == n_setup
    for _, step in plan.steps:
        compile(step, "<step>", "exec")  # every step stands alone


@pytest.mark.parametrize("source,message", [("def check(c)\n", "do not parse"), ("x = 1\n", "no assert"),
                                            ("x = '\x00'\0", "do not parse")])
def test_plan_rejects_unusable_tests(source, message):
    with pytest.raises(InvalidTests, match=message):
        plan_assert(source)


@pytest.mark.parametrize("tests,ok", [('[{"input": "1", "output": "2"}]', True), ("[]", False), ("{", False),
                                      ('[{"input": 1, "output": "2"}]', False), ('{"input": "", "output": ""}', False)])
def test_parse_stdio(tests, ok):
    if ok:
        assert parse_stdio(tests) == [{"input": "1", "output": "2"}]
    else:
        with pytest.raises(InvalidTests):
            parse_stdio(tests)


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(), lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=20))
def test_harness_json_encoder_matches_json(value):
    """The harness's dependency-free encoder must produce what the supervisor's json parser reads back."""
    assert json.loads(to_json(value)) == value


@pytest.mark.parametrize("a,b,equal", [
    ("1 2\n3\n", "1 2\n3", True),
    ("1 2  \r\n3\n\n\n", "1 2\n3", True),
    ("1  2\n", "1 2\n", False),
    ("\n1\n", "1\n", False),
    ("", "\n\n", True),
])
def test_normalise_output(a, b, equal):
    assert (normalise_output(a) == normalise_output(b)) is equal


NONCE = "ab" * 16


def frame(obj: dict, nonce: str = NONCE) -> bytes:
    return b"\n\x1e" + nonce.encode() + b" " + json.dumps(obj).encode() + b"\n"


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=200),
       st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=30))
def test_demux_separates_frames_from_output_at_any_chunking(before, after, cuts):
    foreign = frame({"t": "done"}, nonce="cd" * 16)  # another run's nonce: plain output here
    stream = before + frame({"t": "case", "i": 0}) + after + foreign + frame({"t": "done"})
    tail = Tail(10_000)
    demux = FrameDemux(NONCE, tail)
    pos = 0
    for cut in cuts * 50:
        demux.feed(stream[pos: pos + cut])
        pos += cut
        if pos >= len(stream):
            break
    demux.feed(stream[pos:])
    demux.close()
    assert demux.frames == [{"t": "case", "i": 0}, {"t": "done"}]
    assert tail.text() == (before + after + foreign).decode("utf-8", "replace")


@given(st.lists(st.binary(max_size=50), max_size=30), st.integers(min_value=0, max_value=64))
def test_tail_counts_everything_and_keeps_the_end(chunks, cap):
    tail = Tail(cap)
    for c in chunks:
        tail.feed(c)
    data = b"".join(chunks)
    assert tail.total == len(data)
    assert tail.text() == (data[-cap:] if cap else b"").decode("utf-8", "replace")


def _raw(frames, **kw) -> RawRun:
    return RawRun(frames=frames, stdout=Tail(10), stderr=Tail(10), **kw)


PLAN = {"t": "plan", "tests": ["a", "b"]}
CASE0 = {"t": "case", "i": 0, "passed": True, "dt": 0.1}
CASE1 = {"t": "case", "i": 1, "passed": False, "error": "AssertionError"}

# (frames, RawRun flags, expected status, expected pass fraction)
ASSEMBLY = [
    ([PLAN, CASE0, CASE1, {"t": "done"}], {}, "completed", 0.5),
    ([PLAN, CASE0, {"t": "case", "i": 1, "passed": True}, {"t": "done"}], {}, "completed", 1.0),
    ([PLAN, CASE0], {"timed_out": True}, "timeout", 0.5),
    ([PLAN, CASE0], {}, "crashed", 0.5),
    ([PLAN, CASE0], {"output_exceeded": True}, "output_limit", 0.5),
    ([PLAN, CASE0, CASE1, {"t": "done"}], {"oom": True}, "memory_limit", 0.5),
    ([PLAN, {"t": "case", "i": 0, "passed": False, "memory": True}, {"t": "done"}], {}, "memory_limit", 0.0),
    ([PLAN, {"t": "fatal", "kind": "solution_error", "error": "SyntaxError"}], {}, "solution_error", 0.0),
    ([{"t": "fatal", "kind": "invalid_tests", "error": "x"}], {"timed_out": True}, "invalid_tests", 0.0),
    ([], {"error": "boom"}, "sandbox_error", 0.0),
    # a repeated case keeps its first report; an index outside the plan is ignored
    ([PLAN, CASE0, {"t": "case", "i": 0, "passed": False}, {"t": "case", "i": 7, "passed": True}, {"t": "done"}], {},
     "completed", 0.5),
]


@pytest.mark.parametrize("frames,flags,status,fraction", ASSEMBLY)
def test_assemble(frames, flags, status, fraction):
    r = assemble(_raw(frames, **flags), "test")
    assert r.status == status and r.pass_fraction == pytest.approx(fraction)
    assert r.total == (2 if any(f.get("t") == "plan" for f in frames) else 0)


def test_result_json_round_trip():
    r = ExecutionResult(status="completed", tests=[TestOutcome("a", True, None, 0.1), TestOutcome("b", False, "E")],
                        exit_code=0, backend="bubblewrap", cgroup_limits=True)
    d = json.loads(r.to_json())
    assert d["passed"] == 1 and d["total"] == 2 and d["pass_fraction"] == 0.5
    assert ExecutionResult.from_dict(d) == r
    assert ExecutionResult(status="crashed").pass_fraction == 0.0


def test_spec_carries_limits_and_nonce():
    cfg = SandboxConfig(memory_mb=100, max_processes=7, cpu_time_s=3)
    task = CodeTask("s", "def check(c):\n    assert c()\n", entry_point="f")
    spec = marshal.loads(build_spec(task, cfg, "n" * 32))
    assert spec["nonce"] == "n" * 32 and spec["limits"]["as"] == 100 * 1024 * 1024
    assert spec["limits"]["nproc"] == 7 and spec["limits"]["cpu"] == 3
    assert spec["steps"] == [("assert 0: assert c()", "assert c()")] and spec["python_flags"] == ["-I", "-S"]
    assert marshal.loads(build_spec(task, cfg, "n", nproc=False))["limits"]["nproc"] is None
    with pytest.raises(InvalidTests):
        build_spec(CodeTask("s", "[]", format="stdio"), cfg, "n")


@pytest.mark.parametrize("kwargs", [{"backend": "subprocess"}, {"use_cgroups": "maybe"}, {"timeout_s": 0},
                                    {"workers": 0}])
def test_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError):
        SandboxConfig(**kwargs)


@pytest.mark.parametrize("kwargs", [{"format": "xml"}, {"format": "assert", "entry_point": None}])
def test_task_rejects_bad_values(kwargs):
    with pytest.raises(ValueError):
        CodeTask(solution="", tests="", **kwargs)

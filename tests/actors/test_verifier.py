"""VerifierPool: real math-verify in worker processes, the sandbox for code, deadlines, metrics, Ray actor.

Tables in the SkyRL style: (response, candidate answers, reference) -> expected reward and statuses. Every task
carries labels of 0.0, so a reward of 1.0 can only come from a real verification of the chosen candidate.
"""
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.verifier.math_check import Verdict, check_answer
from actors.verifier.verifier_pool import VerifierPool, merge_metrics
from core.config import VerifierConfig
from core.records import Rollout, SelectionTask

ROOT = Path(__file__).resolve().parents[2]


def make_task(answers, reference, domain="math", entry_point="", prompt_id=None):
    n = len(answers)
    return SelectionTask(prompt_id=prompt_id or f"t-{uuid.uuid4().hex[:10]}", problem_id="prob", domain=domain,
                         problem="?", candidates=tuple(f"candidate {i}" for i in range(n)),
                         candidate_answers=tuple(answers), labels=(0.0,) * n, reference=reference,
                         prompt="prompt", entry_point=entry_point)


def rollout(text):
    return Rollout(prompt_id="x", prompt_token_ids=[], response_token_ids=[], behaviour_logprobs=[],
                   response_text=text, policy_version=0, finish_reason="stop")


def scripted_check(answer, reference, timeout_s):
    """Injected check (runs in the worker process): markers hang, sleep, raise, crash, or return garbage."""
    if answer == "HANG":
        time.sleep(600)
    if answer == "SLOW":
        time.sleep(0.4)
        return Verdict(1.0)
    if answer == "RAISE":
        raise RuntimeError("scripted failure")
    if answer == "CRASH":
        os._exit(3)
    if answer == "NOT_A_VERDICT":
        return 1.0
    if answer == "HOG":
        return Verdict(float(len(bytearray(3 * 2**30))))  # over the worker's 2 GiB address-space cap
    return check_answer(answer, reference, timeout_s)


@pytest.fixture(scope="module")
def math_pool():
    pool = VerifierPool(VerifierConfig(processes_per_worker=2, timeout_s=4.0))
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def scripted_pool():
    pool = VerifierPool(VerifierConfig(processes_per_worker=1, timeout_s=1.0), check_fn=scripted_check)
    yield pool
    pool.close()


# (id, response, candidate answers, reference, reward, verifier_status, parse_status, judgment)
MATH_CASES = [
    ("correct_pick", "Solution 1 checks out.\nJudgment: 1", ("3", "4"), "4", 1.0, "ok", "ok", 1),
    ("wrong_pick", "Judgment: 0", ("3", "4"), "4", 0.0, "ok", "ok", 0),
    ("frac_vs_decimal", "Judgment: 0", ("\\frac{1}{2}", "0.7"), "0.5", 1.0, "ok", "ok", 0),
    ("decimal_vs_frac", "Judgment: 1", ("0.7", "0.5"), "\\frac{1}{2}", 1.0, "ok", "ok", 1),
    ("commuted_polynomial", "Judgment: 0", ("2x+1", "2x-1"), "1+2x", 1.0, "ok", "ok", 0),
    ("other_polynomial", "Judgment: 1", ("2x+1", "2x-1"), "1+2x", 0.0, "ok", "ok", 1),
    ("assignment", "Judgment: 0", ("x = 3", "4"), "3", 1.0, "ok", "ok", 0),
    ("thousands_separator", "Judgment: 0", ("1,000", "100"), "1000", 1.0, "ok", "ok", 0),
    ("boxed_in_text", "Judgment: 1", ("11", "so the answer is \\boxed{12}"), "12", 1.0, "ok", "ok", 1),
    ("sqrt_numeric", "Judgment: 0", ("\\sqrt{2}", "2"), "1.41421356", 1.0, "ok", "ok", 0),
    ("unparseable_answer", "Judgment: 0", ("no idea", "5"), "5", 0.0, "ok", "ok", 0),
    ("no_judgment", "I cannot decide.", ("3", "4"), "4", 0.0, "parse_failure", "no_judgment", None),
    ("out_of_range", "Judgment: 2", ("3", "4"), "4", 0.0, "parse_failure", "out_of_range", None),
    ("negative_index", "Judgment: -1", ("3", "4"), "4", 0.0, "parse_failure", "out_of_range", None),
    ("last_judgment_wins", "Judgment: 0\nOn reflection, Judgment: 1", ("3", "4"), "4", 1.0, "ok", "ok", 1),
    ("last_judgment_wrong", "Judgment: 1\nNo wait. Judgment: 0", ("3", "4"), "4", 0.0, "ok", "ok", 0),
    ("judgement_spelling", "Judgement: 1", ("3", "4"), "4", 1.0, "ok", "ok", 1),
]


@pytest.mark.parametrize("case", MATH_CASES, ids=[c[0] for c in MATH_CASES])
def test_math_table(math_pool, case):
    _, response, answers, reference, reward, status, parse_status, judgment = case
    [r] = math_pool.score(make_task(answers, reference), [rollout(response)])
    assert (r.reward, r.verifier_status, r.parse_status, r.judgment) == (reward, status, parse_status, judgment)
    assert r.timings["verify_s"] >= 0.0


def test_group_metrics_and_cache(math_pool):
    math_pool.metrics(reset=True)
    task = make_task(("\\frac{1}{2}", "0.7", "1/3"), "0.5")
    texts = ["Judgment: 0"] * 4 + ["Judgment: 1", "no answer", "Judgment: 9", "Judgment: 0"]
    rollouts = math_pool.score(task, [rollout(t) for t in texts])
    assert [r.reward for r in rollouts] == [1.0] * 4 + [0.0, 0.0, 0.0, 1.0]
    assert sum(r.timings["verify_s"] > 0 for r in rollouts) == 2  # charged once per verified candidate
    m = math_pool.metrics(reset=True)
    assert (m["rollouts"], m["verified"], m["ok"], m["cache_hits"]) == (8, 2, 2, 4)
    assert (m["parse_failures"], m["parse_failures/no_judgment"], m["parse_failures/out_of_range"]) == (2, 1, 1)
    assert m["rollout_status/ok"] == 6 and m["timeouts"] == m["errors"] == 0
    assert 0 < m["verify_s_mean"] <= m["verify_s_max"]
    again = math_pool.score(task, [rollout("Judgment: 0"), rollout("Judgment: 1")])  # a later round: cached
    assert [r.reward for r in again] == [1.0, 0.0]
    m = math_pool.metrics(reset=False)
    assert (m["verified"], m["cache_hits"]) == (0, 2)
    assert math_pool.metrics(reset=True)["cache_hits"] == 2 and math_pool.metrics()["cache_hits"] == 0


ADVERSARIAL = ("1000000!", "2^{2^{2^{2^{2^{2^{2}}}}}}", "9^{9^{9^{9}}}", "2^2^2^2^2^2^2^2", "10^{10^{9}}", "3")


def test_adversarial_math_returns_within_deadline(math_pool):
    task = make_task(ADVERSARIAL, "3")
    start = time.monotonic()
    rollouts = math_pool.score(task, [rollout(f"Judgment: {i}") for i in range(len(ADVERSARIAL))])
    assert time.monotonic() - start < 3 * math_pool.cfg.timeout_s  # 6 candidates on 2 processes
    assert all(r.timings["verify_s"] < math_pool.cfg.timeout_s for r in rollouts)
    assert [r.reward for r in rollouts] == [0.0] * 5 + [1.0]
    assert all(r.verifier_status in ("ok", "timeout") for r in rollouts)


def test_math_verify_timeout_is_counted_not_silent(math_pool):
    math_pool.metrics(reset=True)
    [r] = math_pool.score(make_task(("1000000!", "3"), "5"), [rollout("Judgment: 0")])
    assert (r.reward, r.verifier_status) == (0.0, "timeout")
    assert math_pool.metrics()["timeouts"] == 1


def test_hanging_verification_times_out_and_the_pool_recovers(scripted_pool):
    scripted_pool.metrics(reset=True)
    task = make_task(("HANG", "7"), "7")
    start = time.monotonic()
    [r] = scripted_pool.score(task, [rollout("Judgment: 0")])
    # cut by the timeout, long before the 600 s hang ends (on a busy 2-core CI machine the call took 13 s: the
    # replacement worker's start; a speed bound belongs in a benchmark, not here)
    assert time.monotonic() - start < scripted_pool.cfg.timeout_s + 60.0
    assert (r.reward, r.verifier_status, r.judgment) == (0.0, "timeout", 0)
    m = scripted_pool.metrics()
    assert (m["timeouts"], m["workers_replaced"], m["rollout_status/timeout"]) == (1, 1, 1)
    [ok] = scripted_pool.score(task, [rollout("Judgment: 1")])  # the replacement worker verifies for real
    assert (ok.reward, ok.verifier_status) == (1.0, "ok")
    [again] = scripted_pool.score(task, [rollout("Judgment: 0")])  # a timeout is not cached: re-run
    assert again.verifier_status == "timeout"
    m = scripted_pool.metrics()
    assert (m["verified"], m["timeouts"], m["workers_replaced"]) == (2, 1, 1)
    health = scripted_pool.health()
    assert health["ok"] and health["math_processes_alive"] == 1


@pytest.mark.parametrize("answer,reason", [("RAISE", "RuntimeError: scripted failure"),
                                           ("NOT_A_VERDICT", "TypeError"), ("HOG", "MemoryError"),
                                           ("CRASH", "worker process failed")])
def test_exception_is_an_error_counted_and_logged(scripted_pool, caplog, answer, reason):
    scripted_pool.metrics(reset=True)
    task = make_task((answer, "7"), "7")
    with caplog.at_level("WARNING", logger="actors.verifier.verifier_pool"):
        [r] = scripted_pool.score(task, [rollout("Judgment: 0")])
    assert (r.reward, r.verifier_status) == (0.0, "error")
    assert scripted_pool.metrics()["errors"] == 1
    assert any(reason in rec.getMessage() and task.prompt_id in rec.getMessage() for rec in caplog.records)
    scripted_pool.score(task, [rollout("Judgment: 0")])  # errors may be transient: retried, not cached
    assert scripted_pool.metrics()["verified"] == 1
    [ok] = scripted_pool.score(task, [rollout("Judgment: 1")])
    assert (ok.reward, ok.verifier_status) == (1.0, "ok")


def test_at_most_processes_per_worker_in_flight(scripted_pool):
    task = make_task(("SLOW", "SLOW", "SLOW"), "1")
    start = time.monotonic()
    rollouts = scripted_pool.score(task, [rollout(f"Judgment: {i}") for i in range(3)])
    assert [r.reward for r in rollouts] == [1.0, 1.0, 1.0]
    assert time.monotonic() - start >= 3 * 0.4  # one process: the three verifications ran one after another


def test_math_verify_in_a_thread_is_the_pitfall_the_pool_avoids(math_pool):
    task = make_task(("0.5", "2"), "\\frac{1}{2}")
    with ThreadPoolExecutor(1) as ex:
        with pytest.raises(ValueError, match="thread"):  # in-process math-verify off the main thread
            ex.submit(check_answer, "0.5", "\\frac{1}{2}", 1).result()
        [r] = ex.submit(math_pool.score, task, [rollout("Judgment: 0")]).result()
    assert (r.reward, r.verifier_status) == (1.0, "ok")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.sampled_from(["Judgment: ", "Judgement: ", "Judgment:", "\n", " "]),
                          st.integers(-2, 4).map(str), st.text(max_size=8)), max_size=6).map("".join))
def test_reward_follows_the_parsed_judgment(math_pool, text):
    from core.algo.genselect import parse_judgment
    task = make_task(("1", "2", "3"), "2", prompt_id="hypothesis-task")
    [r] = math_pool.score(task, [rollout(text)])
    expected = parse_judgment(text, 3)
    assert (r.parse_status, r.judgment) == (expected.status, expected.index)
    assert r.reward == (1.0 if expected.index == 1 else 0.0)
    assert (r.verifier_status == "parse_failure") == (not expected.ok)


def test_config_validation_and_close():
    with pytest.raises(ValueError, match=r"verifier\.reward\.name is neither one of"):
        VerifierPool(VerifierConfig(reward={"name": "dense"}), domains=())
    with pytest.raises(ValueError,
                       match=r"verifier\.reward\.k is a parameter, but verifier\.reward\.name='binary' takes none"):
        VerifierPool(VerifierConfig(reward={"name": "binary", "k": 2}), domains=())
    with pytest.raises(ValueError, match="domains"):
        VerifierPool(VerifierConfig(), domains=("chess",))
    pool = VerifierPool(VerifierConfig(), domains=())
    with pytest.raises(ValueError, match="domain"):
        pool.score(make_task(("1", "2"), "1", domain="chess"), [rollout("Judgment: 0")])
    pool.close()
    pool.close()
    assert pool.health()["ok"] is False
    with pytest.raises(RuntimeError, match="closed"):
        pool.score(make_task(("1", "2"), "1"), [rollout("Judgment: 0")])


# ----------------------------------------------------------------------------------------------------------
# Code: the sandbox

CHECK = ("def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(2) == 3\n"
         "    assert candidate(0) == 1\n    assert candidate(5) == 6\n")
# (id, candidate, tests, partial reward, binary reward, verifier_status)
CODE_CASES = [
    ("all_pass", "def f(x):\n    return x + 1\n", CHECK, 1.0, 1.0, "ok"),
    ("half_pass", "def f(x):\n    return x + 1 if x < 2 else 0\n", CHECK, 0.5, 0.0, "ok"),
    ("syntax_error", "def f(x) return x", CHECK, 0.0, 0.0, "ok"),
    ("invalid_tests", "def f(x):\n    return x + 1\n", "def check(candidate):\n    assert (", 0.0, 0.0, "error"),
]


@pytest.fixture(scope="module")
def code_pools():
    from sandbox.backends.base import SandboxUnavailable
    cfg = dict(timeout_s=10.0, sandbox_timeout_s=4.0, processes_per_worker=2)
    try:
        partial = VerifierPool(VerifierConfig(reward={"name": "partial"}, **cfg), domains=("code",))
    except SandboxUnavailable as e:
        pytest.skip(f"sandbox unavailable on this machine: {e}")
    binary = VerifierPool(VerifierConfig(reward={"name": "binary"}, **cfg), domains=())  # sandbox starts at first use
    yield partial, binary
    partial.close()
    binary.close()


@pytest.mark.slow
@pytest.mark.parametrize("case", CODE_CASES, ids=[c[0] for c in CODE_CASES])
def test_code_table(code_pools, case):
    _, candidate, tests, partial_reward, binary_reward, status = case
    task = make_task(("def f(x):\n    return -1\n", candidate), tests, domain="code", entry_point="f")
    for pool, reward in zip(code_pools, (partial_reward, binary_reward)):
        [r] = pool.score(task, [rollout("Judgment: 1")])
        assert (r.reward, r.verifier_status, r.judgment) == (reward, status, 1)


@pytest.mark.slow
def test_code_stdio_and_status_metrics(code_pools):
    partial, _ = code_pools
    partial.metrics(reset=True)
    tests = '[{"input": "2 3\\n", "output": "5\\n"}, {"input": "4 4\\n", "output": "8\\n"}]'
    task = make_task(("print(sum(map(int, input().split())))", "print(5)"), tests, domain="code")
    rollouts = partial.score(task, [rollout("Judgment: 0"), rollout("Judgment: 1"), rollout("Judgment: 1")])
    assert [r.reward for r in rollouts] == [1.0, 0.5, 0.5]
    m = partial.metrics()
    assert (m["verified"], m["cache_hits"], m["code_status/completed"]) == (2, 1, 2)


def test_sandbox_unavailable_propagates_at_first_code_task(monkeypatch):
    from sandbox.backends.base import SandboxUnavailable
    import actors.verifier.verifier_pool as verifier

    def unavailable(cfg):
        raise SandboxUnavailable("bubblewrap backend: `bwrap` is not installed")
    monkeypatch.setattr(verifier, "start_sandbox", unavailable)
    with pytest.raises(SandboxUnavailable, match="bwrap"):
        VerifierPool(VerifierConfig(), domains=("code",))
    pool = VerifierPool(VerifierConfig(), domains=())
    task = make_task(("def f(x):\n    return x\n", "x"), CHECK, domain="code", entry_point="f")
    with pytest.raises(SandboxUnavailable, match="bwrap"):
        pool.score(task, [rollout("Judgment: 0")])
    pool.close()


# ----------------------------------------------------------------------------------------------------------
# As a Ray actor: methods run off the main thread, where in-process math-verify raises


@pytest.mark.slow
def test_as_ray_actor_where_in_process_math_verify_fails():
    import ray

    class AsyncVerifier(VerifierPool):
        """An async actor: its methods run in an event-loop thread, not the process's main thread."""
        async def score_async(self, task, rollouts):
            return self.score(task, rollouts)

        async def inline_math_verify(self):
            """The pitfall itself: math-verify called in the actor's own thread."""
            try:
                return str(check_answer("0.5", "\\frac{1}{2}", 1))
            except ValueError as e:
                return f"ValueError: {e}"

    ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR",
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    try:
        actor = ray.remote(num_cpus=0)(AsyncVerifier).remote(VerifierConfig(timeout_s=5.0))
        assert "thread" in ray.get(actor.inline_math_verify.remote(), timeout=120)  # the pitfall is real here
        task = make_task(("\\frac{1}{2}", "0.7", "2x+1"), "0.5")
        group = [rollout("Judgment: 0"), rollout("Judgment: 1"), rollout("nothing")]
        scored = ray.get(actor.score_async.remote(task, group), timeout=60)
        assert [(r.reward, r.verifier_status) for r in scored] == [(1.0, "ok"), (0.0, "ok"), (0.0, "parse_failure")]
        [r] = ray.get(actor.score.remote(make_task(("2x", "2x+1"), "1+2x"), group[1:2]), timeout=60)
        assert (r.reward, r.verifier_status) == (1.0, "ok")
        assert ray.get(actor.metrics.remote(), timeout=30)["verified"] == 3
        assert ray.get(actor.health.remote(), timeout=30)["ok"]
        ray.get(actor.close.remote(), timeout=30)
    finally:
        ray.shutdown()


def test_merge_metrics_adds_counts_and_weights_the_mean_time():
    a = {"rollouts": 4, "verified": 3, "timeouts": 1, "parse_failures": 0, "verify_s_mean": 0.2, "verify_s_max": 0.5}
    b = {"rollouts": 2, "verified": 1, "timeouts": 0, "parse_failures": 2, "verify_s_mean": 0.6, "verify_s_max": 0.6}
    merged = merge_metrics([a, b])
    assert merged["rollouts"] == 6 and merged["verified"] == 4 and merged["timeouts"] == 1
    assert merged["parse_failures"] == 2
    assert merged["verify_s_mean"] == pytest.approx((0.2 * 3 + 0.6) / 4)
    assert merged["verify_s_max"] == 0.6
    assert merge_metrics([{"verified": 0, "verify_s_mean": 0.0, "verify_s_max": 0.0}])["verify_s_mean"] == 0.0


def test_the_pick_reward_credits_the_picked_candidate_by_the_same_verifier():
    """The tiny recipe's pick-then-point form credits its pick through the general interface (`credited_candidates`,
    `credit`): the verifier checks the picked candidate too and blends the two by `tiny.pick_reward`."""
    from tiny_recipe.pick_point import PickThenPoint

    pool = VerifierPool(VerifierConfig(processes_per_worker=1, timeout_s=4.0), check_fn=scripted_check,
                        response_form=PickThenPoint(pick_reward=0.5))
    try:
        task = make_task(("5", "7", "RAISE"), "7")
        texts = ["Pick: #1\n3 + 4 = 7\nAnswer: 7 #1", "Pick: #0\n3 + 4 = 7\nAnswer: 7 #1",
                 "Pick: #1\n3 + 2 = 5\nAnswer: 5 #0", "Pick: #0\n3 + 2 = 5\nAnswer: 5 #0",
                 "Pick: #1\n3 + 4 = 7", "Judgment: 1"]
        rollouts = pool.score(task, [rollout(t) for t in texts])
        assert [r.reward for r in rollouts] == [1.0, 0.5, 0.5, 0.0, 0.0, 0.5]  # last: no pick, scored 0
        assert [r.judgment for r in rollouts] == [1, 1, 0, 0, None, 1]
        assert rollouts[4].verifier_status == "parse_failure"
        assert pool.metrics()["rollout_status/ok"] == 5  # the parse failure is counted as one
        [failed] = pool.score(task, [rollout("Pick: #2\n3 + 4 = 7\nAnswer: 7 #1")])  # the pick's check raises
        assert failed.reward == 0.0 and failed.verifier_status == "error"
        m = pool.metrics()  # the masked rollout counts under its status, as a failed check of the final answer does
        assert (m["rollout_status/error"], m["rollout_status/ok"]) == (1, 0)
        plain = VerifierPool(VerifierConfig(processes_per_worker=1, timeout_s=4.0), check_fn=scripted_check)
        try:
            assert [r.reward for r in plain.score(task, [rollout(t) for t in texts])] == [1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
        finally:
            plain.close()
    finally:
        pool.close()


def test_a_verification_run_for_a_pick_alone_is_charged_to_its_first_picker():
    from tiny_recipe.pick_point import PickThenPoint

    pool = VerifierPool(VerifierConfig(processes_per_worker=1, timeout_s=4.0), check_fn=scripted_check,
                        response_form=PickThenPoint(pick_reward=0.5))
    try:
        task = make_task(("SLOW", "7"), "7")  # candidate 0's check takes 0.4 s; only picks name it
        rollouts = pool.score(task, [rollout("Pick: #1\n3 + 4 = 7\nAnswer: 7 #1"),
                                     rollout("Pick: #0\n3 + 4 = 7\nAnswer: 7 #1"),
                                     rollout("Pick: #0\n3 + 4 = 7\nAnswer: 7 #1")])
        assert [r.reward for r in rollouts] == [1.0, 1.0, 1.0]
        _, second, third = (r.timings["verify_s"] for r in rollouts)
        assert second >= 0.4 and third == 0.0  # the pick-only check of candidate 0 went to its first picker
        m = pool.metrics()
        assert m["verified"] == 2 and m["verify_s_max"] >= 0.4
    finally:
        pool.close()

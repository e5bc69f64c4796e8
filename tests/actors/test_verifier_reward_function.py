"""verifier.reward.name=package.module:function: a user's reward scores the named candidate in the verifier pool, in
killable worker processes; parse failures, hangs, exceptions and bad return values are counted verdicts, never silent
zeros."""
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from actors.verifier.user_reward import RewardFunction, reward_args, stored_label
from actors.verifier.verifier_pool import VerifierPool
from core.config import VerifierConfig
from core.plugins import PluginError
from core.records import Rollout, SelectionTask

ROOT = Path(__file__).resolve().parents[2]

#: the worked example: a judge that reads the candidate's last line, with markers for the failure cases
EXAMPLE = '''
    import time

    def score(problem, candidate, response, label, *, reference="", hedged=1.0, **extra):
        """1.0 when the named candidate's last line states the reference, `hedged` (a parameter of the config's
        section) when the response hedges."""
        if "HANG" in candidate:
            time.sleep(600)
        if "RAISE" in candidate:
            raise RuntimeError("judge unavailable")
        if "BAD" in candidate:
            return "yes"
        right = candidate.strip().splitlines()[-1].endswith(reference)
        return (hedged if "maybe" in response else 1.0) if right else 0.0

    def no_params(problem, candidate, response, label):
        return 1.0
'''


@pytest.fixture(scope="module")
def example_path(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user_code")
    (folder / "judge_rewards.py").write_text(textwrap.dedent(EXAMPLE))
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))
    sys.modules.pop("judge_rewards", None)


@pytest.fixture(scope="module")
def pool(example_path):
    pool = VerifierPool(VerifierConfig(processes_per_worker=1, timeout_s=3.0,
                                       reward={"name": "judge_rewards:score", "hedged": 0.5}))
    yield pool
    pool.close()


def make_task(candidates, reference="12", labels=None):
    n = len(candidates)
    return SelectionTask(prompt_id=f"t-{uuid.uuid4().hex[:8]}", problem_id="p", domain="math", problem="6 + 6?",
                         candidates=tuple(candidates), candidate_answers=tuple(c[-2:] for c in candidates),
                         labels=tuple(labels or (0.0,) * n), reference=reference, prompt="prompt")


def rollout(text):
    return Rollout(prompt_id="x", prompt_token_ids=[], response_token_ids=[], behaviour_logprobs=[],
                   response_text=text, policy_version=0, finish_reason="stop")


def test_the_named_candidate_is_scored_by_the_users_function(pool):
    task = make_task(["6 + 6 = 12\nAnswer: 12", "6 + 6 = 13\nAnswer: 13"])
    group = [rollout("Judgment: 0"), rollout("Judgment: 1"), rollout("maybe... Judgment: 0"), rollout("Judgment: 0"),
             rollout("no judgment")]
    pool.metrics(reset=True)
    scored = pool.score(task, group)
    assert [r.reward for r in scored] == [1.0, 0.0, 0.5, 1.0, 0.0]
    assert [r.verifier_status for r in scored] == ["ok", "ok", "ok", "ok", "parse_failure"]
    assert [r.judgment for r in scored] == [0, 1, 0, 0, None]
    m = pool.metrics()
    assert (m["verified"], m["ok"], m["cache_hits"], m["parse_failures/no_judgment"]) == (3, 3, 1, 1)
    assert scored[3].timings["verify_s"] == 0.0  # the same response for the same candidate: one call
    health = pool.health()
    assert health["ok"] and not health["math_started"] and health["reward_function"] == "judge_rewards:score"


def test_binary_reward_needs_a_full_score():
    task = make_task(["Answer: 12", "Answer: 13"])
    pool = VerifierPool.__new__(VerifierPool)
    pool.reward_mode = "binary"
    from core.algo.genselect import parse_judgment
    from sandbox.math_answer import Verdict

    assert pool._reward(task, parse_judgment("Judgment: 0", 2), Verdict(0.5)) == 0.0
    assert pool._reward(task, parse_judgment("Judgment: 0", 2), Verdict(1.0)) == 1.0


@pytest.mark.parametrize("candidate, status, reason", [
    ("RAISE", "error", "RuntimeError: judge unavailable"),
    ("BAD", "error", "returned 'yes'"),
    ("HANG", "timeout", "no result within"),
])
def test_a_failing_reward_function_is_a_counted_verdict(pool, caplog, candidate, status, reason):
    pool.metrics(reset=True)
    [r] = pool.score(make_task([candidate, "Answer: 12"]), [rollout("Judgment: 0")])
    assert (r.reward, r.verifier_status) == (0.0, status)
    assert any(reason in rec.getMessage() and "reward function" in rec.getMessage() for rec in caplog.records)
    m = pool.metrics()
    assert m["timeouts" if status == "timeout" else "errors"] == 1
    [ok] = pool.score(make_task(["Answer: 12", "x"]), [rollout("Judgment: 0")])  # the pool goes on
    assert (ok.reward, ok.verifier_status) == (1.0, "ok")


def test_the_call_carries_the_documented_arguments():
    task = make_task(["a\nAnswer: 12", "b"], labels=(1.0, 0.0))
    args, extras = reward_args(task, 0, rollout("Judgment: 0"))
    assert args == ("6 + 6?", "a\nAnswer: 12", "Judgment: 0", 1.0)
    assert extras["reference"] == "12" and extras["index"] == 0 and extras["num_candidates"] == 2
    assert stored_label(*args) == 1.0


def test_a_path_that_does_not_fit_is_refused_at_construction(example_path):
    with pytest.raises(PluginError, match=r"verifier\.reward\.name='judge_rewards:nope'.*no attribute"):
        VerifierPool(VerifierConfig(reward={"name": "judge_rewards:nope"}))
    with pytest.raises(PluginError,
                       match=r"cannot be called as fn\(problem, candidate, response, label, strict=\.\.\.\)"):
        VerifierPool(VerifierConfig(reward={"name": "judge_rewards:no_params", "strict": True}))
    from tiny_recipe.pick_point import PickThenPoint

    with pytest.raises(ValueError, match="credits beyond the final judgment"):
        VerifierPool(VerifierConfig(reward={"name": "judge_rewards:score"}), response_form=PickThenPoint(0.5))


def test_stored_labels_as_the_reward():
    pool = VerifierPool(VerifierConfig(processes_per_worker=1, reward={"name": "stored_label"}), domains=())
    try:
        task = make_task(["x", "y"], reference="", labels=(0.0, 1.0))
        assert [r.reward for r in pool.score(task, [rollout("Judgment: 1"), rollout("Judgment: 0")])] == [1.0, 0.0]
    finally:
        pool.close()


@pytest.mark.slow
def test_in_a_ray_actor_the_users_module_is_loaded_from_the_python_path(example_path):
    import ray

    ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR",
             runtime_env={"env_vars": {"PYTHONPATH": f"{ROOT}:{example_path}"}})
    try:
        actor = ray.remote(num_cpus=0)(VerifierPool).remote(
            VerifierConfig(processes_per_worker=1, reward={"name": "judge_rewards:score"}))
        task = make_task(["6 + 6 = 12\nAnswer: 12", "Answer: 13"])
        scored = ray.get(actor.score.remote(task, [rollout("Judgment: 0"), rollout("Judgment: 1")]), timeout=120)
        assert [(r.reward, r.verifier_status) for r in scored] == [(1.0, "ok"), (0.0, "ok")]
        ray.get(actor.close.remote(), timeout=30)
    finally:
        ray.shutdown()


def test_reward_function_processes_are_replaced_after_a_hang(example_path):
    fn = RewardFunction("judge_rewards:score", processes=1, timeout_s=1.0)
    try:
        verdict, _ = fn.score(make_task(["HANG", "x"]), 0, rollout("Judgment: 0"))
        assert verdict.status == "timeout" and fn.replaced == 1
        verdict, _ = fn.score(make_task(["Answer: 12", "x"]), 0, rollout("Judgment: 0"))
        assert (verdict.status, verdict.score) == ("ok", 1.0)
    finally:
        fn.close()

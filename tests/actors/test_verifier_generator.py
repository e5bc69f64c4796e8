"""The verifier pool scoring a generator's code solutions (`task=generator`, `SolveTask` with tests): each
solution's program (a completion of the prompt, or a ```python block defining the entry point) runs in the
sandbox against the tests; the reward is the pass fraction with `verifier.reward.name=partial`, else 1 only when
every test passes. Slow: it starts the real sandbox."""
import pytest

from actors.verifier.verifier_pool import VerifierPool
from core.config import VerifierConfig
from core.records import Rollout, SolveTask

PROMPT = "def f(x):\n    \"\"\"x + 1\"\"\"\n"
CHECK = "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(2) == 3\n"
SOLUTIONS = [  # (text, partial reward, binary reward)
    ("    return x + 1\n", 1.0, 1.0),
    ("```python\ndef f(x):\n    return x + 1 if x < 2 else 0\n```", 0.5, 0.0),
    ("    return x +\n", 0.0, 0.0),
    ("    return x + 1\n", 1.0, 1.0),  # the same program again: verified once
]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["partial", "binary"])
def test_a_generators_programs_are_run_against_the_tests(mode):
    from sandbox.backends.base import SandboxUnavailable

    try:
        pool = VerifierPool(VerifierConfig(reward={"name": mode}, timeout_s=10.0, sandbox_timeout_s=4.0,
                                           processes_per_worker=2), domains=("code",))
    except SandboxUnavailable as e:
        pytest.skip(f"sandbox unavailable on this machine: {e}")
    try:
        task = SolveTask("he-0", "he-0", "code", PROMPT, CHECK, entry_point="f")
        rollouts = [Rollout("he-0", [1], [2], [0.0], text, 0, "stop") for text, _, _ in SOLUTIONS]
        pool.score(task, rollouts)
        want = [p if mode == "partial" else b for _, p, b in SOLUTIONS]
        assert [r.reward for r in rollouts] == want
        assert all(r.verifier_status == "ok" for r in rollouts)
        m = pool.metrics()
        assert m["verified"] == 3 and m["cache_hits"] == 1
    finally:
        pool.close()

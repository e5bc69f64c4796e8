"""The math answer check against an independent judge: reasoning-gym's own `score_answer`.

The answer table (tests/sandbox/test_math_answer.py) was written together with the reader; this test measures
agreement on answers it was not written for. For 13 reasoning-gym generators (fractions, decimals, equations
with several roots, complex numbers, factorisations, integrals, ...), each entry's reference answer is checked
against: itself, itself in prose ("The answer is X."), another entry's answer, and that in prose. The expected
verdict is reasoning-gym's score of the bare answer (1.0 = correct). Measured: 1040/1040 agree.
"""
import random

import pytest

from sandbox.math_answer import check_answer

TASKS = ["basic_arithmetic", "fraction_simplification", "decimal_arithmetic", "simple_equations",
         "polynomial_equations", "complex_arithmetic", "power_function", "gcd", "lcm", "prime_factorization",
         "chain_sum", "products", "simple_integration"]


def test_check_answer_agrees_with_reasoning_gym_scoring():
    reasoning_gym = pytest.importorskip("reasoning_gym")
    rng = random.Random(0)
    checked, disagreements = 0, []
    for name in TASKS:
        data = reasoning_gym.create_dataset(name, size=20, seed=7)
        entries = list(data)
        for entry in entries:
            reference, other = str(entry["answer"]), str(rng.choice(entries)["answer"])
            for bare in (reference, other):
                expected = data.score_answer(answer=bare, entry=entry) >= 1.0
                for answer in (bare, f"The answer is {bare}."):
                    verdict = check_answer(answer, reference)
                    checked += 1
                    if verdict.status != "ok" or (verdict.score == 1.0) is not expected:
                        disagreements.append((name, answer, reference, expected, verdict))
    assert checked == 1040 and disagreements == []

"""Labels come from real verifiers: math-verify (main thread / process pool) and the code sandbox."""
import pytest
from hypothesis import given, strategies as st

from driver.data.verify import LabelStats, extract_answer, label_math, verify_math_answer

MATH_TABLE = [  # candidate, reference, equal?
    ("57", "57", True),
    ("+57", "57", True),
    ("-4", "4", False),
    ("0.5", "1/2", True),
    ("\\frac{1}{2}", "0.5", True),
    ("$\\sqrt{4}$", "2", True),
    ("x = 3", "3", True),
    ("12", "13", False),
    ("", "13", False),
]


@pytest.mark.parametrize("candidate,reference,equal", MATH_TABLE)
def test_verify_math_answer(candidate, reference, equal):
    assert verify_math_answer(candidate, reference) is equal


@given(st.integers(-10**6, 10**6), st.integers(-10**6, 10**6))
def test_integer_fast_path_is_exact(a, b):
    assert verify_math_answer(str(a), str(b)) is (a == b)


@pytest.mark.parametrize("text,answer", [
    ("12 + 7 = 19\n19 * 3 = 57\nAnswer: 57", "57"),
    ("so it is \\boxed{\\frac{a}{b}} and done", "\\frac{a}{b}"),
    ("first \\boxed{1}, then \\boxed{2}", "2"),
    ("Final answer: 42.", "42"),
    ("no marker at all 5", "no marker at all 5"),
])
def test_extract_answer(text, answer):
    assert extract_answer(text) == answer


def test_label_math_uses_pool_for_non_integers_and_dedups():
    stats = LabelStats()
    pairs = [("3", "3"), ("3", "3"), ("1/2", "0.5"), ("0.25", "1/2"), ("7", "8")]
    assert label_math(pairs, processes=1, stats=stats) == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert stats.checked == 5 and stats.unique_pairs == 4 and stats.errors == 0


@pytest.mark.slow
def test_code_labels_from_the_sandbox_humaneval_canonical_and_mutant():
    pytest.importorskip("sandbox.pool", reason="the sandbox package is not available yet")
    from sandbox.backends.base import SandboxUnavailable

    from driver.data.sources import read_humaneval
    from driver.data.verify import label_code

    task = read_humaneval()[0]
    canonical = task["prompt"] + task["canonical_solution"]
    broken = canonical.replace("return True", "return False")
    stats = LabelStats()
    try:
        labels = label_code([(canonical, task["test"], task["entry_point"]),
                             (broken, task["test"], task["entry_point"])], stats=stats)
    except SandboxUnavailable as e:
        pytest.skip(f"sandbox backend unavailable here: {e}")
    assert labels[0] == 1.0 and labels[1] < 1.0 and stats.errors == 0


# Prose answers must not be wrapped in `$...$` and parsed as products of letters.
PROSE_ANSWERS = [  # candidate answer, reference: equal (seen as false "wrong" labels on a real data set)
    ("2*C(10, 5), or equivalently 504", "504"),
    ("The limit exists and is equal to 4", "Therefore the limit is 4."),
    ("2^(m+1)", "So the number of such subsets is 2^(m+1)."),
]


@pytest.mark.parametrize("candidate,reference", PROSE_ANSWERS)
def test_prose_answers_equal_to_the_reference_are_correct(candidate, reference):
    assert verify_math_answer(candidate, reference) is True
    assert label_math([(candidate, reference)], processes=1) == [1.0]


# math-verify's internal timeouts return False without a trace: the labeller must count them as timeouts.
SLOW_PAIR = ("(x+y+z+1)^{30}", "(x+y+z+2)^{30}")  # sympy needs far more than 8 s to compare these


def test_a_math_verify_timeout_is_a_counted_timeout_not_a_wrong_label():
    stats = LabelStats()
    labels = label_math([SLOW_PAIR, ("1/2", "0.5")], processes=1, timeout_s=8, stats=stats)
    assert stats.timeouts == 1 and stats.errors == 0
    assert labels == [None, 1.0]  # unverified, never a silent 0.0

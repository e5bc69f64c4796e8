"""benchmarks/pick_then_point.py: the pointer where the model's answer is stated, the pick elsewhere."""
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "benchmarks"))

from pick_then_point import combine  # noqa: E402


def test_the_pointer_decides_where_the_answer_is_stated_and_the_pick_elsewhere():
    tasks = [SimpleNamespace(candidate_answers=["4", "5"]), SimpleNamespace(candidate_answers=["1", "2"]),
             SimpleNamespace(candidate_answers=["7", " 8"])]
    # stated (4), unstated (3), no answer line (None)... and a stated answer that needs normalising (8)
    assert combine(tasks[:2], ["4", "3"], [0, 0], [1, 1], str.strip) == [0, 1]
    assert combine(tasks, ["4", None, "8"], [0, 0, 1], [1, 1, 0], str.strip) == [0, 1, 1]

"""User problem files (JSONL, Parquet): documented columns, bad rows reported with file:line, skip vs error."""
import json

import pytest

from driver.data.files import BadRowError, BadRows, read_problem_file

GOOD_MATH = {"id": "m1", "problem": "1+1?", "answer": "2", "candidates": ["1+1=2\nAnswer: 2", "Answer: 3"]}
GOOD_CODE = {"id": "c1", "domain": "code", "problem": "def f(x):", "tests": "def check(f):\n    assert f(1) == 1\n",
             "entry_point": "f", "candidates": ["def f(x):\n    return x", "def f(x):\n    return 0"]}

BAD_ROWS = [  # (row or raw line, fragment of the reason)
    ("{not json", "not valid JSON"),
    ('["a list"]', "JSON object"),
    ({**GOOD_MATH, "id": ""}, "'id'"),
    ({k: v for k, v in GOOD_MATH.items() if k != "problem"}, "'problem'"),
    ({**GOOD_MATH, "candidates": ["only one"]}, "'candidates'"),
    ({**GOOD_MATH, "candidates": "not a list"}, "'candidates'"),
    ({**GOOD_MATH, "candidates": ["a", 3]}, "strings only"),
    ({**GOOD_MATH, "candidate_answers": ["2"]}, "1 entries for 2 candidates"),
    ({k: v for k, v in GOOD_MATH.items() if k != "answer"}, "'answer'"),
    ({**GOOD_CODE, "entry_point": None}, "'entry_point'"),
    ({**GOOD_MATH, "domain": "poetry"}, "'domain'"),
    ({**GOOD_MATH, "candidate_labels": [True]}, "'candidate_labels' has 1 entries for 2 candidates"),
    ({**GOOD_MATH, "candidate_labels": [True, 1.5]}, "'candidate_labels' entry 1 is 1.5"),
    ({**GOOD_MATH, "candidate_labels": [True, "yes"]}, "'candidate_labels' entry 1 is 'yes'"),
    ({**GOOD_MATH, "candidate_labels": "yes"}, "column 'candidate_labels' must be a list"),
    ({k: v for k, v in GOOD_CODE.items() if k != "tests"}, "'tests'"),
]


def _write_jsonl(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


@pytest.mark.parametrize("bad,reason", BAD_ROWS)
def test_bad_jsonl_row_is_reported_with_file_and_line_then_skipped(tmp_path, bad, reason):
    path = _write_jsonl(tmp_path / "p.jsonl", [GOOD_MATH, bad, GOOD_CODE])
    report = BadRows()
    problems = read_problem_file(path, "skip", report)
    assert [p.id for p in problems] == ["m1", "c1"]
    assert report.count == 1
    assert report.examples[0].startswith(f"{path}:2: ") and reason in report.examples[0]


@pytest.mark.parametrize("bad,reason", BAD_ROWS[2:5])
def test_bad_row_under_error_policy_raises_with_file_and_line(tmp_path, bad, reason):
    path = _write_jsonl(tmp_path / "p.jsonl", [GOOD_MATH, GOOD_CODE, bad])
    with pytest.raises(BadRowError, match=rf"p\.jsonl:3: .*{reason}"):
        read_problem_file(path, "error")


def test_duplicate_ids_are_bad_rows(tmp_path):
    path = _write_jsonl(tmp_path / "p.jsonl", [GOOD_MATH, GOOD_MATH])
    report = BadRows()
    assert len(read_problem_file(path, "skip", report)) == 1
    assert "duplicate id" in report.examples[0] and ":2:" in report.examples[0]


def test_columns_are_read_and_answers_extracted(tmp_path):
    boxed = {**GOOD_MATH, "id": "m2", "candidates": ["so \\boxed{\\frac{1}{2}}", "x\nAnswer: 7."]}
    given = {**GOOD_MATH, "id": "m3", "candidate_answers": ["2", "3"]}
    path = _write_jsonl(tmp_path / "p.jsonl", [GOOD_MATH, boxed, given, GOOD_CODE, ""])
    probs = {p.id: p for p in read_problem_file(path)}
    assert probs["m1"].candidate_answers == ("2", "3") and probs["m1"].domain == "math"
    assert probs["m2"].candidate_answers == ("\\frac{1}{2}", "7")
    assert probs["m3"].candidate_answers == ("2", "3")
    c = probs["c1"]
    assert c.domain == "code" and c.entry_point == "f" and c.reference.startswith("def check")
    assert c.candidate_answers == c.candidates and c.origin.endswith("p.jsonl:4")


def test_parquet_rows_are_validated_with_row_numbers(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [GOOD_MATH, {**GOOD_MATH, "id": "m2", "candidates": ["just one"]}, {**GOOD_MATH, "id": "m3"}]
    table = pa.Table.from_pylist([{k: r[k] for k in ("id", "problem", "answer", "candidates")} for r in rows])
    path = tmp_path / "p.parquet"
    pq.write_table(table, path)
    report = BadRows()
    assert [p.id for p in read_problem_file(path, "skip", report)] == ["m1", "m3"]
    assert report.count == 1 and report.examples[0].startswith(f"{path}:2: ")
    with pytest.raises(BadRowError, match=r"p\.parquet:2: "):
        read_problem_file(path, "error")


def test_unsupported_or_missing_file(tmp_path):
    with pytest.raises(ValueError, match="unsupported file type"):
        read_problem_file(tmp_path / "p.csv")
    with pytest.raises(FileNotFoundError):
        read_problem_file(tmp_path / "missing.jsonl")


def test_json_error_points_at_the_right_line_and_column(tmp_path):
    """A truncated line: the error is at its end (column len+1 of that line), not column 1 of the next."""
    truncated = '{"id": "m2", "problem": '
    path = _write_jsonl(tmp_path / "p.jsonl", [GOOD_MATH, truncated, GOOD_CODE])
    with pytest.raises(BadRowError) as err:
        read_problem_file(path, "error")
    message = str(err.value)
    assert message.startswith(f"{path}:2: ") and f"column {len(truncated) + 1}" in message
    assert "\n" not in message


def test_candidate_labels_are_read_and_a_labelled_row_needs_no_answer(tmp_path):
    labelled = {k: v for k, v in GOOD_MATH.items() if k != "answer"} | {"candidate_labels": [True, 0.25]}
    code = {k: v for k, v in GOOD_CODE.items() if k not in ("tests", "entry_point")} | {"candidate_labels": [1, 0]}
    path = _write_jsonl(tmp_path / "p.jsonl", [labelled, code, {**GOOD_MATH, "id": "m2"}])
    probs = {p.id: p for p in read_problem_file(path, "error")}
    assert probs["m1"].labels == (1.0, 0.25) and probs["m1"].reference == ""
    assert probs["c1"].labels == (1.0, 0.0) and probs["c1"].reference == "" and probs["c1"].entry_point == ""
    assert probs["m2"].labels is None and probs["m2"].reference == "2"


def test_a_label_function_makes_the_reference_optional(tmp_path):
    path = _write_jsonl(tmp_path / "p.jsonl", [{k: v for k, v in GOOD_MATH.items() if k != "answer"}])
    assert read_problem_file(path, "error", reference_required=False)[0].reference == ""


def test_a_problems_only_file_is_read_without_candidates(tmp_path):
    rows = [{"id": "a", "problem": "1+1?", "answer": 2}, {"id": "b", "problem": "2+2?", "answer": "4",
                                                          "candidates": ["ignored"], "candidate_labels": "ignored"},
            {"id": "c", "problem": "3+3?"}]
    path = _write_jsonl(tmp_path / "p.jsonl", rows)
    report = BadRows()
    probs = read_problem_file(path, "skip", report, problems_only=True)
    assert [(p.id, p.reference, p.candidates) for p in probs] == [("a", "2", ()), ("b", "4", ())]
    assert report.count == 1 and report.examples[0].startswith(f"{path}:3: ") and "'answer'" in report.examples[0]
    with pytest.raises(BadRowError, match=r"p\.jsonl:1: .*'candidates'"):
        read_problem_file(path, "error")


def test_parquet_candidate_labels_are_validated_with_row_numbers(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [{**GOOD_MATH, "candidate_labels": [1.0, 0.0]}, {**GOOD_MATH, "id": "m2", "candidate_labels": [1.0]},
            {**GOOD_MATH, "id": "m3", "candidate_labels": None}]
    path = tmp_path / "p.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    report = BadRows()
    probs = read_problem_file(path, "skip", report)
    assert [(p.id, p.labels) for p in probs] == [("m1", (1.0, 0.0)), ("m3", None)]
    assert report.count == 1 and report.examples[0].startswith(f"{path}:2: ") and "1 entries" in report.examples[0]

"""User problem files: JSONL or Parquet rows with documented columns, validated row by row.

Columns (docs/data.md, "User files"):

* math: `id` (str), `problem` (str), `answer` (str, the reference answer), `candidates` (list of candidate
  solution texts, >= 2), optional `candidate_answers` (list of final answers, one per candidate; extracted
  from the texts when absent: last `\\boxed{...}`, else last `Answer: ...` line), optional `domain` ("math").
* code: `id`, `problem`, `tests` (Python source defining `check(candidate)`, HumanEval style), `entry_point`
  (the function under test), `candidates` (list of complete programs), `domain` = "code" (or implied by the
  presence of `tests`).
* both: optional `candidate_labels`, one label per candidate (a bool, or a number in [0, 1]: 1 correct, 0 wrong,
  a partial score between), from your own judge: used instead of the verifiers. A row with them may leave out
  `answer` (code: `tests` and `entry_point`), and so may every row when `data.label_function` labels them.

Problems only (`problems_only=True`: the candidates are sampled by a model, `data.source=model`, or the policy
writes its own, `task=generator`): `candidates`, `candidate_answers` and `candidate_labels` are not read.

A malformed row (not JSON, not an object, a missing or mistyped column, a wrong-length list, a duplicate id)
is reported as `path:line: reason` (Parquet: the 1-based row number; JSON errors also name the column) and
then skipped (`bad_rows="skip"`) or raised as `BadRowError` (`bad_rows="error"`; `python -m driver.synth`
prints it as one `error: path:line: reason` line). It is never dropped silently: skipped rows are counted and
listed in the manifest.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from driver.data.problem import DataError, RawProblem
from driver.data.verify import extract_answer

log = logging.getLogger(__name__)


class BadRowError(DataError):
    """A malformed input row under bad_rows='error'; the message is `path:line: reason`."""


class MissingDataFile(DataError, FileNotFoundError):
    """`data.path` names no file."""


@dataclass
class BadRows:
    """Malformed rows seen while reading, as `path:line: reason` strings."""
    count: int = 0
    examples: list = field(default_factory=list)

    def add(self, where: str, reason: str) -> None:
        self.count += 1
        message = f"{where}: {reason}"
        if len(self.examples) < 50:
            self.examples.append(message)
        log.warning("bad row skipped: %s", message)

    def to_dict(self) -> dict:
        return {"count": self.count, "examples": self.examples}


def _str(row: dict, key: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"column {key!r} must be a non-empty string, got {_show(value)}")
    return value


def _str_list(row: dict, key: str, min_len: int = 1) -> list:
    value = row.get(key)
    if hasattr(value, "tolist"):  # numpy arrays from Parquet
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or len(value) < min_len:
        raise ValueError(f"column {key!r} must be a list of at least {min_len} strings, got {_show(value)}")
    if not all(isinstance(v, str) for v in value):
        raise ValueError(f"column {key!r} must hold strings only")
    return list(value)


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _candidate_labels(row: dict, n: int):
    """The row's `candidate_labels` as floats, one per candidate, or None when the column is absent (or null)."""
    value = row.get("candidate_labels")
    if value is None:
        return None
    if hasattr(value, "tolist"):  # numpy arrays from Parquet
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"column 'candidate_labels' must be a list of bools or numbers in [0, 1], got {_show(value)}")
    if len(value) != n:
        raise ValueError(f"'candidate_labels' has {len(value)} entries for {n} candidates")
    for i, x in enumerate(value):
        ok = isinstance(x, (bool, int, float)) and (isinstance(x, bool) or 0.0 <= x <= 1.0)
        if not ok:
            raise ValueError(f"'candidate_labels' entry {i} is {_show(x)}; expected a bool or a number in [0, 1]")
    return tuple(float(x) for x in value)


def _reference(row: dict, key: str, required: bool) -> str:
    """The row's `key` column (`answer`: a number is read as its text) as a non-empty string, or "" when it is
    absent and not `required`."""
    value = row.get(key)
    if value is None and not required:
        return ""
    if key == "answer" and isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    return _str({key: value}, key)


def row_to_problem(row, where: str, problems_only: bool = False, reference_required: bool = True) -> RawProblem:
    """Validate one row and turn it into a RawProblem; raises ValueError with the reason.

    `problems_only`: the candidate columns are not read (the problem gets none). `reference_required`: `answer`
    (code: `tests`) must be given unless the row has `candidate_labels`; False when `data.label_function` labels
    the candidates."""
    if not isinstance(row, dict):
        raise ValueError(f"row must be a JSON object, got {type(row).__name__}")
    domain = row.get("domain") or ("code" if "tests" in row else "math")
    if domain not in ("math", "code"):
        raise ValueError(f"column 'domain' must be 'math' or 'code', got {_show(domain)}")
    pid = row.get("id")
    if isinstance(pid, int) and not isinstance(pid, bool):
        pid = str(pid)
    if not isinstance(pid, str) or not pid.strip():
        raise ValueError(f"column 'id' must be a non-empty string, got {_show(pid)}")
    problem = _str(row, "problem")
    candidates = [] if problems_only else _str_list(row, "candidates", min_len=2)
    labels = None if problems_only else _candidate_labels(row, len(candidates))
    required = reference_required and labels is None
    if domain == "code":
        tests = _reference(row, "tests", required)
        entry_point = _reference(row, "entry_point", bool(tests))
        return RawProblem(pid, "code", problem, tests, tuple(candidates), tuple(candidates),
                          entry_point=entry_point, labels=labels, origin=where)
    answer = _reference(row, "answer", required)
    if problems_only:
        return RawProblem(pid, "math", problem, answer, (), (), origin=where)
    if row.get("candidate_answers") is not None:
        answers = [str(a) for a in _str_list(row, "candidate_answers")]
        if len(answers) != len(candidates):
            raise ValueError(f"'candidate_answers' has {len(answers)} entries for {len(candidates)} candidates")
    else:
        answers = [extract_answer(c) for c in candidates]
    return RawProblem(pid, "math", problem, answer, tuple(candidates), tuple(answers), labels=labels, origin=where)


def _jsonl_rows(path: Path):
    """(line number, row, error) per non-empty line. The line ending is cut before decoding: json would
    otherwise report an error at the end of a line as column 1 of the next line. A UTF-8 BOM is accepted."""
    with path.open("r", encoding="utf-8-sig") as f:
        for lineno, line in enumerate(f, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line), None
            except json.JSONDecodeError as e:
                yield lineno, None, f"not valid JSON: {e.msg} at column {e.colno}"


def _parquet_rows(path: Path):
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    for i, row in enumerate(table.to_pylist(), start=1):
        yield i, row, None


READERS = {".jsonl": _jsonl_rows, ".json": _jsonl_rows, ".parquet": _parquet_rows}


def read_problem_file(path, bad_rows: str = "skip", report: BadRows | None = None, problems_only: bool = False,
                      reference_required: bool = True) -> list:
    """All valid problems of a JSONL or Parquet file; malformed rows reported with `path:line`.

    Args:
        path: a .jsonl or .parquet file.
        bad_rows: "skip" (report, count, continue) or "error" (raise BadRowError at the first bad row).
        report: collects the bad rows (a fresh one when None).
        problems_only, reference_required: see `row_to_problem`.
    """
    path = Path(path)
    if bad_rows not in ("skip", "error"):
        raise ValueError(f"bad_rows must be 'skip' or 'error', got {bad_rows!r}")
    reader = READERS.get(path.suffix.lower())
    if reader is None:
        raise DataError(f"{path}: unsupported file type {path.suffix!r}; expected one of {sorted(READERS)}")
    if not path.exists():
        raise MissingDataFile(f"data file {path} does not exist")
    report = report if report is not None else BadRows()
    problems, seen = [], set()
    for lineno, row, error in reader(path):
        where = f"{path}:{lineno}"
        try:
            if error:
                raise ValueError(error)
            problem = row_to_problem(row, where, problems_only, reference_required)
            if problem.id in seen:
                raise ValueError(f"duplicate id {problem.id!r}")
        except ValueError as e:
            if bad_rows == "error":
                raise BadRowError(f"{where}: {e}") from None
            report.add(where, str(e))
            continue
        seen.add(problem.id)
        problems.append(problem)
    return problems

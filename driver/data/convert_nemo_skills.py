"""NeMo-Skills generation output (JSONL) as a data file with candidates (`python -m driver.convert nemo-skills`).

NeMo-Skills writes one file per sampling seed (`output-rs0.jsonl`, `output-rs1.jsonl`, ...), each line one
problem: the input's fields (`problem`, `expected_answer`, ...), its `generation`, and after `ns eval` the
`predicted_answer` (the last `\\boxed{}`, null when there is none) and `symbolic_correct` (a bool; `is_correct` in
some versions), or an LLM judge's `judgement` text (`... Judgement: Yes`). Accepted here:

* several input files, read line by line in step: line i of every file is one problem, whose candidates are the
  files' generations (a line `{}`, NeMo-Skills' unfinished generation, gives none; the problem text must agree);
* in one line, `generation` as a list, with `predicted_answer`, `symbolic_correct` / `is_correct` / `judgement` as
  lists of the same length: several solutions of one problem;
* the problem in `problem` (or `question`), its id in `id` (else `{first file's stem}-{line:06d}`).

Each output row: `id`, `problem`, `candidates`; `answer` (from `expected_answer`) when there is one;
`candidate_labels` when every solution has a label (`label="auto"`: `is_correct`, else `symbolic_correct`, else the
judgement; or the one field named); `candidate_answers` when every solution has a `predicted_answer`. A row is
skipped, with its reason, when it has fewer than 2 solutions, or neither an answer nor a label for every solution.
Math only (code generations are not converted).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, Optional

from driver.data.convert_rows import Skip

LABEL_FIELDS = ("is_correct", "symbolic_correct", "judgement")


def judgement_label(text) -> Optional[bool]:
    """A judge's verdict (`... Judgement: Yes` / `No`, read after the last `Judgement:`), None when unreadable."""
    if not isinstance(text, str) or "Judgement:" not in text:
        return None
    verdict = text.rsplit("Judgement:", 1)[1].strip().lower()
    return True if verdict.startswith("yes") else False if verdict.startswith("no") else None


def label_of(solution: dict, field: str):
    """The label `field` gives `solution` ("auto": the first of LABEL_FIELDS it has): a bool, a number in [0, 1],
    or None."""
    fields = LABEL_FIELDS if field == "auto" else (field,)
    for name in fields:
        value = solution.get(name)
        if value is None:
            continue
        if name == "judgement":
            return judgement_label(value)
        if isinstance(value, bool) or (isinstance(value, (int, float)) and 0 <= value <= 1):
            return value
        return None
    return None


def solutions_of(entry: dict) -> list:
    """The solutions of one line: dicts with `generation` and the fields beside it (a list `generation` splits the
    line into one solution per element, taking element i of every list field of the same length)."""
    generation = entry.get("generation")
    if isinstance(generation, str):
        return [entry]
    if not isinstance(generation, list):
        return []
    n = len(generation)
    lists = {k: v for k, v in entry.items() if isinstance(v, list) and len(v) == n and k != "generation"}
    return [{**entry, **{k: v[i] for k, v in lists.items()}, "generation": g} for i, g in enumerate(generation)
            if isinstance(g, str)]


def merge(entries: list, name: str, label: str) -> dict:
    """One output row from the lines `entries` (line i of every file) of one problem; Skip with the reason."""
    problems = {e.get("problem", e.get("question")) for e in entries}
    problems.discard(None)
    if len(problems) > 1:
        raise Skip("the problem text differs between the input files")
    if not problems or not isinstance(next(iter(problems)), str):
        raise Skip("no 'problem'")
    solutions = [s for e in entries for s in solutions_of(e) if s["generation"].strip()]
    if len(solutions) < 2:
        raise Skip("fewer than 2 solutions")
    first = entries[0]
    row = {"id": str(first["id"]) if first.get("id") not in (None, "") else name, "problem": problems.pop(),
           "candidates": [s["generation"] for s in solutions]}
    answer = first.get("expected_answer")
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        answer = str(answer)
    if isinstance(answer, str) and answer.strip():
        row["answer"] = answer
    labels = [label_of(s, label) for s in solutions] if label != "none" else []
    if labels and all(x is not None for x in labels):
        row["candidate_labels"] = labels
    elif "answer" not in row:
        raise Skip("no 'expected_answer' and not every solution has a label")
    predicted = [s.get("predicted_answer") for s in solutions]
    if all(isinstance(p, str) and p.strip() for p in predicted):
        row["candidate_answers"] = predicted
    return row


def _lines(path: Path) -> list:
    """Each line of `path` as a dict ({} for a blank line, an unfinished generation or a line that is not JSON)."""
    out = []
    with path.open(encoding="utf-8-sig") as f:
        for line in f:
            try:
                entry = json.loads(line) if line.strip() else {}
            except json.JSONDecodeError:
                entry = {}
            out.append(entry if isinstance(entry, dict) else {})
    return out


def read(paths: list, label: str = "auto") -> Iterator[tuple]:
    """(where, output row or Skip) for every problem of the NeMo-Skills files `paths`, read line by line in step."""
    paths = [Path(p) for p in paths]
    files = [_lines(p) for p in paths]
    for i in range(max(map(len, files), default=0)):
        entries = [f[i] for f in files if i < len(f) and f[i]]
        where = f"{paths[0]}:{i + 1}" if len(paths) == 1 else f"line {i + 1} of {len(paths)} files"
        try:
            if not entries:
                raise Skip("no generation")
            yield where, merge(entries, f"{paths[0].stem}-{i + 1:06d}", label)
        except Skip as skip:
            yield where, skip


def count_rows(paths: list) -> int:
    """Problems in the files (their longest line count, for the progress bar)."""
    return max((sum(1 for _ in Path(p).open(encoding="utf-8-sig")) for p in paths), default=0)


__all__ = ["read", "count_rows", "merge", "solutions_of", "label_of", "judgement_label", "LABEL_FIELDS"]

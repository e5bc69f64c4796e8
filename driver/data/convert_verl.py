"""verl's RL data (a Parquet file) as a problems-only data file (`python -m driver.convert verl`).

A verl row holds a prompt and how to reward answers to it, no candidates:

* `prompt`: a list of chat messages (`{"role", "content"}`); the problem is the content of the last `user`
  message, as it is (an instruction verl's preprocessing appended, e.g. "... within \\boxed{}", stays);
* `reward_model`: `{"ground_truth": ..., "style": ...}`; `ground_truth` is the reference answer (a string or a
  number: math);
* `data_source`: kept as a column; `extra_info.index`, when present, names the row (`{data_source}-{index}`),
  else its row number does (`{file stem}-{row:06d}`).

Each output row is `{"id", "problem", "answer", "data_source"}`: problems for a generator to write candidates for
(`data.source=model`, `data.generator_problems=file`) or for `task=generator`. A row is skipped, with its reason,
when it has no user message, no ground truth, or one that is not a single answer (a list, or code tests as a dict).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

from driver.data.convert_rows import Skip, as_list


def problem_text(prompt) -> str:
    """The content of the last user message of a verl `prompt` (a list of chat messages, or a plain string)."""
    if isinstance(prompt, str):
        return prompt
    messages = [m for m in as_list(prompt, "prompt") if isinstance(m, dict) and m.get("role") == "user"]
    if not messages or not isinstance(messages[-1].get("content"), str) or not messages[-1]["content"].strip():
        raise Skip("no user message in 'prompt'")
    return messages[-1]["content"]


def ground_truth(reward_model) -> str:
    """`reward_model.ground_truth` as the reference answer (a number as its text)."""
    if not isinstance(reward_model, dict) or reward_model.get("ground_truth") is None:
        raise Skip("no 'reward_model.ground_truth'")
    truth = reward_model["ground_truth"]
    if isinstance(truth, (int, float)) and not isinstance(truth, bool):
        truth = str(truth)
    if not isinstance(truth, str):
        raise Skip(f"'reward_model.ground_truth' is a {type(truth).__name__}, not one answer (several answers and "
                   f"code tests are not converted)")
    if not truth.strip():
        raise Skip("'reward_model.ground_truth' is empty")
    return truth


def convert_row(row: dict, name: str) -> dict:
    """One verl row as a problems-only row named `name` (unless `extra_info.index` names it); Skip with the reason."""
    source = str(row.get("data_source") or "")
    index = (row.get("extra_info") or {}).get("index") if isinstance(row.get("extra_info"), dict) else None
    pid = f"{source or 'verl'}-{index}" if index is not None else name
    out = {"id": pid, "problem": problem_text(row.get("prompt")), "answer": ground_truth(row.get("reward_model"))}
    if source:
        out["data_source"] = source
    return out


def read(paths: list) -> Iterator[tuple]:
    """(where, output row or Skip) for every row of the verl Parquet files `paths`, in order."""
    import pyarrow.parquet as pq

    for path in map(Path, paths):
        number = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):
            for row in batch.to_pylist():
                number += 1
                try:
                    yield f"{path}:{number}", convert_row(row, f"{path.stem}-{number:06d}")
                except Skip as skip:
                    yield f"{path}:{number}", skip


def count_rows(paths: list) -> int:
    """Rows in the Parquet files (for the progress bar)."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in paths)


__all__ = ["read", "count_rows", "convert_row", "problem_text", "ground_truth"]

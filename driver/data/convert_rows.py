"""What the converters share (`python -m driver.convert`, driver/convert.py): a skipped row and its reason, the
counts of a conversion, and writing the data file (JSONL or Parquet, docs/data.md "User files").
"""
from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


class Skip(Exception):
    """An input row that becomes no output row; the message is the reason (counted, and shown for a few rows)."""


def as_list(value, column: str) -> list:
    """`value` as a list (Parquet gives numpy arrays); Skip naming `column` for anything else."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise Skip(f"{column!r} is a {type(value).__name__}, not a list")
    return list(value)


@dataclass
class ConvertStats:
    """Rows in, out and skipped (by reason, with the first few rows' places); `notes` count other things worth
    saying (e.g. solutions left out of a row)."""
    rows_in: int = 0
    rows_out: int = 0
    skipped: Counter = field(default_factory=Counter)
    examples: list = field(default_factory=list)
    notes: Counter = field(default_factory=Counter)

    def skip(self, where: str, reason: str) -> None:
        self.skipped[reason] += 1
        if len(self.examples) < 5:
            self.examples.append(f"{where}: {reason}")

    def summary(self) -> str:
        """One line: rows in, rows out, rows skipped and why."""
        skipped = sum(self.skipped.values())
        why = "; ".join(f"{n} {reason}" for reason, n in self.skipped.most_common())
        line = f"{self.rows_in} rows in, {self.rows_out} rows out, {skipped} rows skipped" + (f" ({why})" if why else "")
        if self.notes:
            line += "; " + ", ".join(f"{n} {what}" for what, n in self.notes.most_common())
        return line


OUTPUT_SUFFIXES = (".jsonl", ".parquet")


def write_rows(rows: list, out: Path) -> Path:
    """Write `rows` (dicts in the data file's columns) to `out`, a .jsonl or .parquet file, through a temporary
    sibling renamed at the end (complete or absent). In Parquet a column a row lacks is null there, and
    `candidate_labels` are floats (one column type)."""
    out = Path(out)
    if out.suffix.lower() not in OUTPUT_SUFFIXES:
        raise ValueError(f"{out}: the output must end in one of {list(OUTPUT_SUFFIXES)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    if out.suffix.lower() == ".jsonl":
        with tmp.open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        columns = list(dict.fromkeys(key for row in rows for key in row))  # every row's, not the first row's only
        table = {key: [row.get(key) for row in rows] for key in columns}
        if "candidate_labels" in table:
            table["candidate_labels"] = [None if v is None else [float(x) for x in v] for v in table["candidate_labels"]]
        pq.write_table(pa.Table.from_pydict(table), tmp)
    os.replace(tmp, out)
    return out


__all__ = ["Skip", "as_list", "ConvertStats", "write_rows", "OUTPUT_SUFFIXES"]

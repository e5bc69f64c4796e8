"""python -m driver.convert FORMAT INPUT [INPUT ...] OUT [--label FIELD] [--quiet]

Converts data written by other RL and evaluation stacks into this project's data file (docs/data.md, "User files";
OUT ends in .jsonl or .parquet):

  verl         verl's RL Parquet (`prompt` chat messages, `reward_model.ground_truth`, `data_source`): a
               problems-only file, for data.source=model (a generator writes the candidates) or task=generator
               (driver/data/convert_verl.py)
  nemo-skills  NeMo-Skills generation JSONL (`problem`, `expected_answer`, `generation`, `predicted_answer`,
               `symbolic_correct` / `is_correct` / `judgement`), one file per seed read in step, or lists in one
               line: problems with candidates and their labels (`candidate_labels`) (driver/data/convert_nemo_skills.py)

--label (nemo-skills): which field labels a solution: auto (is_correct, else symbolic_correct, else judgement),
one of those, or none (no labels: the verifiers label the candidates against `answer`).

Shows a progress bar (stderr) and ends with one summary line: rows in, rows out, rows skipped and why, and the first
skipped rows with their places. Exit status 2 with one `error: ...` line for a missing input, an output that is not
.jsonl or .parquet, or nothing converted.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from driver.data import convert_nemo_skills, convert_verl
from driver.data.convert_rows import OUTPUT_SUFFIXES, ConvertStats, Skip, write_rows

FORMATS = {"verl": convert_verl, "nemo-skills": convert_nemo_skills}


def convert(fmt: str, inputs: list, out: Path, label: str = "auto", progress: bool = True) -> ConvertStats:
    """Convert `inputs` (files of format `fmt`) into the data file `out`; the counts. ValueError (one line) for a
    missing input, an output suffix other than .jsonl / .parquet, or no row converted."""
    reader = FORMATS[fmt]
    missing = [str(p) for p in inputs if not Path(p).is_file()]
    if missing:
        raise ValueError(f"no such input file: {', '.join(missing)}")
    if Path(out).suffix.lower() not in OUTPUT_SUFFIXES:
        raise ValueError(f"{out}: the output must end in one of {list(OUTPUT_SUFFIXES)}")
    from tqdm import tqdm

    stats, rows, seen = ConvertStats(), [], set()
    extra = {"label": label} if fmt == "nemo-skills" else {}
    with tqdm(total=reader.count_rows(inputs), desc=f"convert {fmt}", unit="row", disable=not progress,
              file=sys.stderr, dynamic_ncols=True) as bar:
        for where, row in reader.read(inputs, **extra):
            stats.rows_in += 1
            bar.update(1)
            if not isinstance(row, Skip) and row["id"] in seen:
                row = Skip("duplicate id")
            if isinstance(row, Skip):
                stats.skip(where, str(row))
                continue
            seen.add(row["id"])
            rows.append(row)
            if "candidate_labels" not in row and "candidates" in row:
                stats.notes["rows without labels (the verifiers label them)"] += 1
    stats.rows_out = len(rows)
    if not rows:
        raise ValueError(f"nothing converted: {stats.summary()}")
    write_rows(rows, Path(out))
    return stats


def main(argv=None) -> int:
    usage, _, description = __doc__.partition("\n\n")
    parser = argparse.ArgumentParser(usage=usage.removeprefix("python -m driver.convert ").join(("%(prog)s ", "")),
                                     prog="python -m driver.convert", description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("format", choices=sorted(FORMATS))
    parser.add_argument("files", nargs="+", metavar="FILE", help="the input files, then the output file")
    parser.add_argument("--label", default="auto", choices=["auto", *convert_nemo_skills.LABEL_FIELDS, "none"])
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if len(args.files) < 2:
        parser.error("give at least one INPUT and the OUT file")
    *inputs, out = args.files
    try:
        stats = convert(args.format, inputs, Path(out), args.label, progress=not args.quiet)
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for example in stats.examples:
        print(f"skipped {example}", file=sys.stderr)
    print(f"{args.format}: {stats.summary()} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Keep a run's evaluations and summary for BENCHMARKS.md: python save_run.py RUN_DIR NAME (writes NAME_evals.jsonl,
NAME_summary.json beside this file; the per-step train records stay in the run folder)."""
import json
import shutil
import sys
from pathlib import Path

run, name = Path(sys.argv[1]), sys.argv[2]
here = Path(__file__).parent
evals = [line for line in open(run / "metrics.jsonl") if json.loads(line).get("kind") == "eval"]
(here / f"{name}_evals.jsonl").write_text("".join(evals))
shutil.copy(run / "summary.json", here / f"{name}_summary.json")

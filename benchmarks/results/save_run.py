"""Keep a run's evaluations and summary for BENCHMARKS.md:

    python benchmarks/results/save_run.py RUN_DIR NAME OUT_DIR

writes OUT_DIR/NAME_evals.jsonl (the run's evaluation records) and OUT_DIR/NAME_summary.json; the per-step train
records stay in the run folder."""
import json
import shutil
import sys
from pathlib import Path

run, name, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
out.mkdir(parents=True, exist_ok=True)
evals = [line for line in open(run / "metrics.jsonl") if json.loads(line).get("kind") == "eval"]
(out / f"{name}_evals.jsonl").write_text("".join(evals))
shutil.copy(run / "summary.json", out / f"{name}_summary.json")

"""What RL adds over the best non-RL selector, paired by problem, over one or several selector runs (seeds).

    python -m driver.compare runs/seed0 runs/seed3 runs/seed4 [--set test] [--against KEY]

Reads each run folder's `metrics.jsonl` (the per-prompt scores every held-out reading keeps, driver/heldout.py) and
prints, for each held-out set the runs read (validation, test, no cue), one line per run: the RL policy's final
knockout accuracy minus its start reading's best non-RL selector (driver.report.best_non_rl, as the run's summary
names it; `--against KEY`: that selector in every run, e.g. `rule/cue/knockout/genselect` or `majority`) with its
paired 95% bootstrap CI over problems; then, with several runs, the pooled difference (the mean over runs) with its
CI, resampling problems within each run (core.algo.paired.pooled_paired_bootstrap_ci).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

from driver.report import SET_TITLES, best_non_rl, non_rl_options, paired_scores, set_readings, set_summary

SET_PREFIXES = {"validation": "", "test": "test/", "no_cue": "nocue/"}


def eval_records(run_dir: Path) -> list:
    """The run's `kind: eval` records of metrics.jsonl, in order; SystemExit naming the folder without one."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise SystemExit(f"{run_dir}: no metrics.jsonl (a `python -m driver.train` run folder)")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("kind") == "eval"]


def run_pairs(evals: list, name: str, against: Optional[str] = None) -> Optional[dict]:
    """One run's paired comparison on the set `name` (a key of SET_PREFIXES): {selector, key, problem_ids, rl, other}
    (the P prompts' problem ids, RL's final knockout scores and the other selector's start scores); None when the run
    did not read the set at the start and after training, or kept no per-prompt scores."""
    prefix = SET_PREFIXES[name]
    s, readings = set_summary(evals, prefix), set_readings(evals, prefix)
    if s is None or best_non_rl(s) is None:
        return None
    if against:
        names = {key: label for label, key, _ in non_rl_options(s)}
        selector, key = names.get(against, against), against
    else:
        selector, key = best_non_rl(s)["name"], best_non_rl(s)["key"]
    kept = readings[0].get(prefix + "scores") or {}
    if against and kept and against not in kept:
        raise SystemExit(f"--against {against}: not a selector the readings kept (one of "
                         f"{', '.join(k for k in kept if k != 'problem_id')})")
    pairs = paired_scores(*readings, prefix, key)
    if pairs is None:
        return None
    return {"selector": selector, "key": key, **dict(zip(("problem_ids", "rl", "other"), pairs))}


def comparison_lines(runs: dict, sets: Sequence[str], against: Optional[str] = None, seed: int = 0) -> list:
    """The printed lines: for each set, one per run of `runs` ({label: eval records}) that read it, then the pooled
    line over those runs when there are several."""
    from core.algo.paired import paired_bootstrap_ci, pooled_paired_bootstrap_ci

    lines = []
    for name in sets:
        compared = {label: p for label, evals in runs.items() if (p := run_pairs(evals, name, against)) is not None}
        if not compared:
            continue
        lines.append(f"{SET_TITLES[name]}: RL's final knockout minus the "
                     + (f"selector {against}" if against else "best non-RL selector") + " at the start")
        for label, p in compared.items():
            mean, lo, hi = paired_bootstrap_ci(p["problem_ids"], p["rl"], p["other"], seed=seed)
            lines.append(f"  {label}: {mean:+.3f} [{lo:+.3f}, {hi:+.3f}] against {p['selector']} "
                         f"({len(set(p['problem_ids']))} problems, {len(p['problem_ids'])} prompts)")
        if len(compared) > 1:
            mean, lo, hi = pooled_paired_bootstrap_ci(
                [(p["problem_ids"], p["rl"], p["other"]) for p in compared.values()], seed=seed)
            lines.append(f"  pooled over {len(compared)} runs: {mean:+.3f} [{lo:+.3f}, {hi:+.3f}]")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="selector run folders (each with metrics.jsonl)")
    parser.add_argument("--set", choices=[*SET_PREFIXES, "all"], default="all", help="the held-out set(s) compared")
    parser.add_argument("--against", default=None,
                        help="compare against this selector in every run (its accuracy key in an eval record, e.g. "
                             "rule/cue/knockout/genselect or majority) instead of each run's best non-RL selector")
    parser.add_argument("--seed", type=int, default=0, help="the bootstrap's seed")
    args = parser.parse_args(argv)
    runs = {str(run): eval_records(Path(run)) for run in args.runs}
    lines = comparison_lines(runs, list(SET_PREFIXES) if args.set == "all" else [args.set], args.against, args.seed)
    if not lines:
        print("no run read a held-out set at the start and after training with per-prompt scores", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

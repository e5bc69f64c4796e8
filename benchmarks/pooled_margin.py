"""A selector's margin over majority voting, pooled over several runs (seeds) on the same held-out prompts.

Each `driver.evaluate` JSON keeps its choices by prompt id. For every problem the margin (GenSelect@N minus
majority@N) is averaged over its prompts *and* the runs, then a 95% bootstrap CI is taken over problems (the
i.i.d. unit; `driver.evaluate.selection_metrics` on the runs' prompts side by side): the seeds' spread and the
problems' spread in one interval, tighter than any single run's.

    python benchmarks/pooled_margin.py --dataset .cache/datasets/<no-cue set> runs/*/export/eval_*.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def pooled(tasks: list, runs: list) -> dict:
    """`selection_metrics` of every run's choices on `tasks` together (R runs: R x P prompts, grouped by problem).

    Args:
        tasks: P SelectionTask objects, the prompts every run evaluated.
        runs: R dicts {prompt_id: chosen index or None}, each covering every prompt of `tasks`.
    """
    from driver.evaluate import selection_metrics

    missing = [i for i, run in enumerate(runs) if any(t.prompt_id not in run for t in tasks)]
    if missing:
        raise ValueError(f"runs {missing} lack choices for some prompts: evaluate them on the same prompts")
    return selection_metrics(tasks * len(runs), [run[t.prompt_id] for run in runs for t in tasks])


def main(argv=None) -> int:
    from driver.data.dataset import load_dataset

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("evals", nargs="+", help="driver.evaluate JSON files (with `choices`)")
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--split", default="heldout", choices=["heldout", "train"])
    parser.add_argument("--out", default=None, help="JSON output")
    args = parser.parse_args(argv)
    results = [json.loads(Path(p).read_text()) for p in args.evals]
    if any("choices" not in r for r in results):
        parser.error("an evaluation without `choices` (written before they were kept): evaluate it again")
    wanted = set(results[0]["choices"])
    tasks = [t for t in getattr(load_dataset(args.dataset), args.split) if t.prompt_id in wanted]
    rows = [(p, pooled(tasks, [r["choices"]])) for p, r in zip(args.evals, results)]
    rows.append(("pooled", pooled(tasks, [r["choices"] for r in results])))
    for name, m in rows:
        print(f"{name}: GenSelect@N {m['genselect']:.3f}  majority@N {m['majority']:.3f}  margin "
              f"{m['over_majority']:+.3f} [{m['over_majority_lo']:+.3f}, {m['over_majority_hi']:+.3f}]  "
              f"({m['problems']} problems)")
    if args.out:
        Path(args.out).write_text(json.dumps({name: m for name, m in rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

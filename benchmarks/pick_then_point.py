"""What would a selector reach that names the candidate stating its own answer where one does, and otherwise a pick
made from the prompt alone? Combines two runs of `point_rl_probe.py` on the same held-out prompts:

    .venv/bin/python benchmarks/point_rl_probe.py ... --decision after_solution --out A.json   # its pointer
    .venv/bin/python benchmarks/point_rl_probe.py ... --decision prior --out B.json            # its pick
    .venv/bin/python benchmarks/pick_then_point.py --pointer A.json --pointer-phase pretrained \\
        --pick B.json --pick-phase final --dataset .cache/datasets/<set>

For each held-out prompt: the pointer's choice where a candidate states the model's own answer, else the pick's
choice. Prints GenSelect@N with its 95% CI (bootstrap over problems), majority@N and random@N, and each part on its
own half. An estimate of a response that writes a pick, then a worked solution and its pointer (issue 7, session
28): nothing here trains the combination itself.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


def combine(tasks: list, owns: list, pointer: list, pick: list, normalize) -> list:
    """Per task: `pointer[i]` where a candidate of `tasks[i]` states `owns[i]` (normalised), else `pick[i]`."""
    from point_rl_probe import states

    return [p if states(t, own, normalize) else k for t, own, p, k in zip(tasks, owns, pointer, pick)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pointer", required=True, help="point_rl_probe output with --decision after_solution")
    ap.add_argument("--pointer-phase", default="pretrained", choices=["pretrained", "final"])
    ap.add_argument("--pick", required=True, help="point_rl_probe output with --decision prior")
    ap.add_argument("--pick-phase", default="final", choices=["pretrained", "final"])
    ap.add_argument("--dataset", required=True)
    args = ap.parse_args(argv)

    from driver.data.dataset import load_dataset
    from driver.evaluate import selection_metrics
    from point_rl_probe import own_answer_split, states
    from solve_then_match import normalize

    pointer, pick = (json.loads(Path(p).read_text())["choices"] for p in (args.pointer, args.pick))
    if pointer["prompt_ids"] != pick["prompt_ids"]:
        raise SystemExit("the two runs read different held-out prompts (run both with the same --problems, "
                         "--seed and --max-candidates)")
    by_id = {t.prompt_id: t for t in load_dataset(args.dataset).heldout}
    tasks = [by_id[i] for i in pointer["prompt_ids"]]
    choices = combine(tasks, pointer["own"], pointer[args.pointer_phase], pick[args.pick_phase], normalize)
    m = selection_metrics(tasks, choices)
    hits, unstated = own_answer_split(tasks, choices, pointer["own"], normalize)
    stated_correct = [bool(t.correct[c]) for t, c, own in zip(tasks, choices, pointer["own"])
                      if states(t, own, normalize)]
    report = {"prompts": len(tasks), "genselect": m["genselect"], "lo": m["genselect_lo"], "hi": m["genselect_hi"],
              "majority": m["majority"], "random": m["random"], "over_majority": m["over_majority"],
              "over_majority_lo": m["over_majority_lo"], "over_majority_hi": m["over_majority_hi"],
              "stated_n": len(hits), "stated_accuracy": sum(stated_correct) / max(1, len(stated_correct)),
              "unstated_n": len(unstated), "unstated_accuracy": sum(h for h, _ in unstated) / max(1, len(unstated)),
              "unstated_random": sum(r for _, r in unstated) / max(1, len(unstated))}
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in report.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

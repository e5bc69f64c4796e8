"""Held-out curves of several `make train` runs (seeds) on one figure, with the baselines.

    .venv/bin/python benchmarks/plot_seeds.py runs/seed0 runs/seed1 runs/seed2 \
        --out benchmarks/results/seeds_heldout.png

Reads each run's `metrics.jsonl` (the `kind: eval` rows the run logs every `eval_every` steps) and plots, against
the step: the knockout-of-pairs accuracy (`knockout/genselect`, with its 95% bootstrap CI as a band), the
one-prompt accuracy (`genselect`), and majority@N / random@N of the same held-out prompts. Prints one line per
run (start -> end, gain, CI, whether the CI's lower bound clears both baselines) and writes the figure.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def eval_rows(run_dir: Path) -> list:
    """The run's evaluation rows in step order (rows without a held-out accuracy are skipped)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return sorted((r for r in rows if r.get("kind") == "eval" and "genselect" in r), key=lambda r: r["step"])


def summary_line(name: str, rows: list, key: str = "knockout/genselect") -> str:
    """'name: start -> end [lo, hi], +gain points, lower bound above majority@N and random@N: yes/no'."""
    first, last = rows[0], rows[-1]
    start, end, lo, hi = first[key], last[key], last[f"{key}_lo"], last[f"{key}_hi"]
    clears = lo > last["majority"] and lo > last["random"]
    return (f"{name}: {key} {start:.3f} -> {end:.3f} [{lo:.3f}, {hi:.3f}], {100 * (end - start):+.1f} points; "
            f"majority@N {last['majority']:.3f}, random@N {last['random']:.3f}; "
            f"lower bound above both: {'yes' if clears else 'no'}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders (each with metrics.jsonl)")
    parser.add_argument("--out", default="benchmarks/results/seeds_heldout.png")
    args = parser.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.2))
    for i, run in enumerate(map(Path, args.runs)):
        rows = eval_rows(run)
        if not rows or "knockout/genselect" not in rows[0]:
            print(f"{run}: no knockout evaluations in metrics.jsonl", file=sys.stderr)
            return 2
        print(summary_line(run.name, rows))
        steps = [r["step"] for r in rows]
        color = f"C{i}"
        ax.plot(steps, [r["knockout/genselect"] for r in rows], "-o", color=color, label=f"{run.name}: knockout of pairs")
        ax.fill_between(steps, [r["knockout/genselect_lo"] for r in rows], [r["knockout/genselect_hi"] for r in rows],
                        color=color, alpha=0.12)
        ax.plot(steps, [r["genselect"] for r in rows], ":", color=color, label=f"{run.name}: one prompt")
    last = eval_rows(Path(args.runs[0]))[-1]
    ax.axhline(last["majority"], color="k", ls="--", lw=1, label=f"majority@N {last['majority']:.3f}")
    ax.axhline(last["random"], color="grey", ls="-.", lw=1, label=f"random@N {last['random']:.3f}")
    ax.set_xlabel("RL step")
    ax.set_ylabel("held-out GenSelect accuracy (N = 2..8)")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

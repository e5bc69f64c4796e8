"""Held-out curves of several `make train` runs (seeds) on one figure, with the baselines.

    .venv/bin/python benchmarks/plot_seeds.py runs/seed0 runs/seed1 runs/seed2 \
        --out benchmarks/results/seeds_heldout.png

Reads each run's `metrics.jsonl` (the `kind: eval` rows the run logs every `eval_every` steps) and plots, against
the step: the accuracy of one selection procedure (`--key`: `knockout/genselect`, the knockout of pairs, or
`round_robin/genselect`, the round robin of pairs, with its 95% bootstrap CI as a band), the one-prompt accuracy
(`genselect`), and majority@N / random@N of the same held-out prompts; where the runs read the no-cue held-out set
by the same procedure, a panel each for the test set (`test/...`) and the no-cue set (`nocue/...`), against
that set's majority@N. Prints one line per
run and set (start -> end, gain, CI, whether the CI's lower bound clears both baselines) and writes the figure.
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
    gain = f"{100 * (end - start):+.1f} points" if len(rows) > 1 else f"read at step {last['step']} only"
    return (f"{name}: {key} {start:.3f} -> {end:.3f} [{lo:.3f}, {hi:.3f}], {gain}; "
            f"majority@N {last['majority']:.3f}, random@N {last['random']:.3f}; "
            f"lower bound above both: {'yes' if clears else 'no'}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders (each with metrics.jsonl)")
    parser.add_argument("--key", default="knockout/genselect", choices=["knockout/genselect", "round_robin/genselect"],
                        help="the selection procedure plotted with its CI")
    parser.add_argument("--out", default="benchmarks/results/seeds_heldout.png")
    args = parser.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [(Path(run), eval_rows(Path(run))) for run in args.runs]
    for run, rows in runs:
        if not rows or args.key not in rows[0]:
            print(f"{run}: no {args.key} evaluations in metrics.jsonl", file=sys.stderr)
            return 2
    # one panel per held-out set every run read by this procedure: validation, then test and no cue
    panels = [(prefix, name) for prefix, name in (("", "validation"), ("test/", "test set"), ("nocue/", "no-cue set"))
              if all(any(f"{prefix}{args.key}" in r for r in rows) for _, rows in runs)]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels) + 2, 4.2), squeeze=False)
    what = "knockout of pairs" if args.key.startswith("knockout") else "round robin of pairs"
    for ax, (prefix, name) in zip(axes[0], panels):
        for i, (run, rows) in enumerate(runs):
            rows = [{k[len(prefix):]: v for k, v in r.items() if k.startswith(prefix)} | {"step": r["step"]}
                    for r in rows if f"{prefix}{args.key}" in r]
            print(summary_line(run.name if not prefix else f"{run.name} ({name})", rows, args.key))
            steps = [r["step"] for r in rows]
            ax.plot(steps, [r[args.key] for r in rows], "-o", color=f"C{i}", label=f"{run.name}: {what}")
            ax.fill_between(steps, [r[f"{args.key}_lo"] for r in rows], [r[f"{args.key}_hi"] for r in rows],
                            color=f"C{i}", alpha=0.12)
            if not prefix:
                ax.plot(steps, [r["genselect"] for r in rows], ":", color=f"C{i}", label=f"{run.name}: one prompt")
        last = {k[len(prefix):]: v for k, v in runs[0][1][-1].items() if k.startswith(prefix)}
        _baselines(ax, last, "")
        ax.set_xlim(axes[0][0].get_xlim())  # the same steps in every panel (some sets are read at the start and end only)
        ax.set_ylabel(f"{name} accuracy (N = 2..8)")
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")
    return 0


def _baselines(ax, last: dict, prefix: str) -> None:
    ax.axhline(last["majority"], color="k", ls="--", lw=1, label=f"{prefix}majority@N {last['majority']:.3f}")
    ax.axhline(last["random"], color="grey", ls="-.", lw=1, label=f"{prefix}random@N {last['random']:.3f}")
    ax.set_xlabel("RL step")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)


if __name__ == "__main__":
    sys.exit(main())

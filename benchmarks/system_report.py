"""The report of benchmarks/system_study.py: `report.md`, `generators.png`, `system.png` and `bon.png` in the study
folder, from the stages' own result files (generator runs' summary.json, driver.evaluate's and driver.bon's JSON,
synthesis manifests).
Pure apart from reading and writing those files."""
from __future__ import annotations

import json
from pathlib import Path

NOISE = {"pass@1": 0.01, "pass@K": 0.04}  # same model measured twice, 100 problems (docs/generator.md)


def _ci(value, ci) -> str:
    return f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if ci and None not in ci else f"{value:.3f}"


def _last(curve: dict | None):
    return list(curve.values())[-1] if curve else None


def generator_table(summaries: dict) -> list:
    """Markdown rows: per objective, the base generator (its run's first evaluation) and the trained one."""
    k = next(iter(summaries.values()))["k"]
    rows = [f"| objective | base pass@1 | trained pass@1 | base pass@{k} | trained pass@{k} | base majority@{k} | "
            f"trained majority@{k} | steps | s/step |", "|---|---|---|---|---|---|---|---|---|"]
    for name, s in summaries.items():
        maj0, maj1 = _last(s.get("start_majority_curve")), _last(s.get("final_majority_curve"))
        fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
        rows.append(f"| {name} | {_ci(s['start_pass_at_1'], s.get('start_pass_at_1_ci'))} | "
                    f"{_ci(s['final_pass_at_1'], s['final_pass_at_1_ci'])} | "
                    f"{_ci(s['start_pass_at_n'], s.get('start_pass_at_n_ci'))} | "
                    f"{_ci(s['final_pass_at_n'], s['final_pass_at_n_ci'])} | {fmt(maj0)} | {fmt(maj1)} | "
                    f"{s['steps']} | {s.get('step_seconds') or float('nan'):.2f} |")
    return rows


def maxk_observation(summaries: dict) -> str:
    """Whether the max@k paper's central observation (arXiv 2510.23393: GRPO raises pass@1 and lowers
    large-k pass@k; max@k keeps large-k pass@k) shows here, with the changes it is read from. A change within
    the measured noise of re-evaluating one model (NOISE) counts as no change."""
    if "grpo" not in summaries or "maxk" not in summaries:
        return "Not tested (needs both grpo and maxk among the objectives)."
    d = {o: (summaries[o]["final_pass_at_1"] - summaries[o]["start_pass_at_1"],
             summaries[o]["final_pass_at_n"] - summaries[o]["start_pass_at_n"]) for o in ("grpo", "maxk")}
    k = summaries["grpo"]["k"]
    sign = lambda x, noise: "up" if x > noise else "down" if x < -noise else "flat"  # noqa: E731
    grpo1, grpok = sign(d["grpo"][0], NOISE["pass@1"]), sign(d["grpo"][1], NOISE["pass@K"])
    maxkk = sign(d["maxk"][1] - d["grpo"][1], NOISE["pass@K"])
    grpo_half = grpo1 == "up" and grpok == "down"
    maxk_half = maxkk == "up"
    return (f"GRPO: pass@1 {d['grpo'][0]:+.3f} ({grpo1}), pass@{k} {d['grpo'][1]:+.3f} ({grpok}); max@k: "
            f"pass@1 {d['maxk'][0]:+.3f}, pass@{k} {d['maxk'][1]:+.3f}, {maxkk} against GRPO's. Reproduced here: "
            f"GRPO raises pass@1 and lowers pass@{k}: {'yes' if grpo_half else 'no'}; max@k keeps pass@{k} "
            f"better than GRPO: {'yes' if maxk_half else 'no'} (changes within {NOISE['pass@1']} / "
            f"{NOISE['pass@K']} count as flat; one seed each).")


def system_table(evals: dict) -> list:
    """Markdown rows: per (selector, data) pair and N, GenSelect@N beside majority@N, random@N and pass@N."""
    rows = ["| selector on data | N | prompts | GenSelect@N | majority@N | random@N | pass@N |",
            "|---|---|---|---|---|---|---|"]
    for pair, e in evals.items():
        gs = _ci(e["genselect"], (e["genselect_lo"], e["genselect_hi"]))
        rows.append(f"| {pair} | all | {e['prompts']} | {gs} | "
                    f"{_ci(e['majority'], (e['majority_lo'], e['majority_hi']))} | {e['random']:.3f} | "
                    f"{e['pass_at_n']:.3f} |")
        for n, r in e["by_size"].items():
            rows.append(f"| {pair} | {n} | {r['prompts']} | {r['genselect']:.3f} | {r['majority']:.3f} | "
                        f"{r['random']:.3f} | {r.get('pass_at_n', float('nan')):.3f} |")
    return rows


def bon_table(bons: dict) -> list:
    """Markdown rows: per generator and k, BoN@k with the selector beside majority@k, random@k and pass@k (all
    held-out problems, 95% CIs over problems)."""
    rows = ["| generator | k | selector BoN@k | majority@k | random@k | pass@k (oracle) | problems (left out) |",
            "|---|---|---|---|---|---|---|"]
    for name, b in bons.items():
        c = b["curves"]
        cell = lambda key, k: _ci(c[key][k]["mean"], (c[key][k]["lo"], c[key][k]["hi"])) if key in c else "n/a"  # noqa: E731
        for k in c["selector"]:
            rows.append(f"| {name} | {k} | {cell('selector', k)} | {cell('majority', k)} | {cell('random', k)} | "
                        f"{cell('pass', k)} | {b['problems']} ({b.get('excluded_problems', 0)}) |")
    return rows


def plot_bon(bons: dict, path: Path) -> Path:
    """BoN@k with the selector (solid) and majority@k (dashed) against k, one colour per generator; pass@k of
    the base generator (dotted) as the oracle's ceiling."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from driver.report import log_k_axis

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for i, (name, b) in enumerate(bons.items()):
        c, colour = b["curves"], f"C{i}"
        ks = [int(k) for k in c["selector"]]
        ax.plot(ks, [v["mean"] for v in c["selector"].values()], "-o", color=colour, label=f"{name}: selector")
        if "majority" in c:
            ax.plot(ks, [v["mean"] for v in c["majority"].values()], "--", color=colour, label=f"{name}: majority")
        if i == 0:
            ax.plot(ks, [v["mean"] for v in c["pass"].values()], ":", color="k", label=f"{name}: pass@k (oracle)")
    ax.set(xlabel="k (samples per problem)", ylabel="held-out accuracy (all problems)",
           title="Best-of-N with the selector", ylim=(0, 1))
    log_k_axis(ax, ks)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_generators(summaries: dict, path: Path) -> Path:
    """Held-out pass@k and majority@k against k: the base generator (dashed, each run's first evaluation) and
    each objective after training."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from driver.report import log_k_axis

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, title in ((axes[0], "pass_curve", "pass@k (= max@k, binary rewards)"),
                           (axes[1], "majority_curve", "majority@k")):
        first = next(iter(summaries.values()))
        base = first.get(f"start_{key}")
        if base:
            ax.plot([int(k) for k in base], list(base.values()), "k--o", label="base generator")
        for name, s in summaries.items():
            curve = s.get(f"final_{key}")
            if curve:
                ax.plot([int(k) for k in curve], list(curve.values()), "-o", label=f"after {name}")
        ax.set(xlabel="k (samples per problem)", ylabel="held-out accuracy", title=title, ylim=(0, 1))
        log_k_axis(ax, first.get(f"final_{key}") or base or {})
        ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_system(evals: dict, path: Path) -> Path:
    """Accuracy by N of generator + selector for each pair, with majority@N, random@N and pass@N of its data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(evals), figsize=(5 * len(evals), 4), squeeze=False)
    for ax, (pair, e) in zip(axes[0], evals.items()):
        ns = [int(n) for n in e["by_size"]]
        for key, style, label in (("genselect", "-o", "generator + selector"), ("majority", "--s", "majority@N"),
                                  ("random", ":", "random@N"), ("pass_at_n", "-.", "pass@N (oracle)")):
            ax.plot(ns, [r.get(key, float("nan")) for r in e["by_size"].values()], style, label=label)
        ax.set(xlabel="N (candidates; at least one and at most half correct)", ylabel="accuracy", title=pair,
               ylim=(0, 1.05))
        ax.legend(loc="center right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _manifest_line(dataset: str) -> str:
    try:
        m = json.loads((Path(dataset) / "manifest.json").read_text())
    except (OSError, ValueError):
        return f"`{dataset}` (no readable manifest)"
    g, c = m.get("generator") or {}, m.get("counts", {})
    return (f"`{dataset}`: {c.get('train_prompts', '?')} train / {c.get('heldout_prompts', '?')} held-out prompts "
            f"({c.get('train_problems', '?')} / {c.get('heldout_problems', '?')} problems); sampling "
            f"{g.get('samples_per_s', '?')} samples/s ({g.get('samples', '?')} samples in "
            f"{g.get('sampling_seconds', '?')} s)")


def write_report(out: Path, summaries: dict, strong: str, generators: dict, datasets: dict, pairs: dict,
                 times: dict, args: dict, bon_selector: str = "") -> Path:
    """report.md with the tables, the observation, the figures and each stage's time; returns its path.
    `bon_selector`: which selector the Best-of-N section used (default: the weak one of stage 3). With no `pairs`
    (a given selector, `--selector`) the generator + selector section is left out."""
    evals = {pair: json.loads((out / f"eval-{pair}.json").read_text()) for pair in pairs}
    bons = {p.stem[len("bon-"):]: json.loads(p.read_text()) for p in sorted(out.glob("bon-*.json"))}
    plot_generators(summaries, out / "generators.png")
    if evals:
        plot_system(evals, out / "system.png")
    about = bon_selector or ("The weak selector (trained on the base generator's samples) chooses among k samples of "
                             "each generator by a knockout of pairs; problems the selector trained on are left out.")
    bon_section = ["## Best-of-N with the selector over all held-out problems", "",
                   f"{about} Every held-out problem of the generator runs' evaluation counts (no filtering: problems "
                   f"with no correct sample count, so pass@k < 1). `python -m driver.bon`.", "", *bon_table(bons), "",
                   "![bon](bon.png)", ""] if bons else []
    system_section = ["## Generator + selector", "",
                      f"Weak generator: the base (`{generators['weak']}`); strong: the one trained with **{strong}** "
                      f"(highest final pass@1). Selection data:", "",
                      *[f"- {name}: {_manifest_line(d)}" for name, d in datasets.items()], "",
                      "Selectors: the plain selector recipe (`driver.train selector`) on each generator's samples; "
                      "evaluation by a knockout of pairs on the held-out problems.", "", *system_table(evals), "",
                      "![system](system.png)", ""] if evals else []
    if bons:
        plot_bon(bons, out / "bon.png")
    lines = ["# Best-of-N system study", "", f"Settings: `{json.dumps(args)}`", "",
             "## Generators (held-out problems, the same for every objective)", "", *generator_table(summaries), "",
             maxk_observation(summaries), "", "![generators](generators.png)", "",
             *system_section, *bon_section, "## Time of each stage (s, when it ran; 0 = built by an earlier study)", "",
             "| stage | seconds |", "|---|---|", *[f"| {k} | {v:.0f} |" for k, v in times.items()], ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    (out / "study.json").write_text(json.dumps({"strong": strong, "generators": generators, "datasets": datasets,
                                                "times": dict(times), "evals": evals, "bons": bons,
                                                "args": args}, indent=1))
    return path

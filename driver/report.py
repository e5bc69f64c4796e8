"""What the user sees: a live progress bar, metrics in metrics.jsonl and TensorBoard (and W&B or MLflow:
`logging.backends`, driver/trackers.py), and at the end curves.png (training reward; held-out GenSelect accuracy
against majority@N, random@N and the best non-RL selector) and summary.json (with, on each held-out set, what RL
adds over the best non-RL selector and its paired CI).
"""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Optional

from driver.baselines import RULE_NAMES, RULES


class MetricsLog:
    """Appends one JSON line per record to `run_dir/metrics.jsonl` and hands its finite scalars, as `KIND/KEY` with
    the record's step, to each metric backend (driver/trackers.py): TensorBoard unless `tensorboard=False`, and
    `trackers` (opened by `driver.trackers.open_trackers`)."""

    def __init__(self, run_dir: str | Path, tensorboard: bool = True, trackers: Optional[list] = None):
        from driver.trackers import TensorBoardTracker

        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        self.trackers = ([TensorBoardTracker(self.run_dir)] if tensorboard else []) + list(trackers or [])
        self._sent: dict = {}  # on resume: per kind, the last step the backends already hold

    def truncate_after(self, step: int) -> None:
        """On resume: drop records of steps after the checkpoint (they will be redone)."""
        if not self.path.exists():
            return
        kept = [line for line in self.path.read_text().splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= step]
        self.path.write_text("".join(line + "\n" for line in kept))

    def resume_at(self, step: int) -> None:
        """A run resumed from the checkpoint of `step`: its records after `step` are dropped (`truncate_after`) and
        redone, but not sent to the backends again, which already hold them (W&B's steps only move forward): they
        keep the values first logged for those steps, metrics.jsonl the redone ones."""
        for record in self.records():
            if record.get("step", 0) > step:
                self._sent[record["kind"]] = max(self._sent.get(record["kind"], 0), record["step"])
        self.truncate_after(step)

    def log(self, step: int, kind: str, values: dict) -> None:
        from driver.trackers import scalars

        record = {"step": step, "kind": kind, **values}
        with open(self.path, "a") as f:
            f.write(json.dumps(record, default=float) + "\n")
        if step <= self._sent.get(kind, -1):
            return
        named = {f"{kind}/{key}": value for key, value in scalars(values).items()}
        for tracker in list(self.trackers):
            self._send(tracker, step, named)

    def _send(self, tracker, step: int, named: dict) -> None:
        """One record to one backend. A backend that fails is dropped with a warning (the console and train.log):
        the run goes on, and metrics.jsonl keeps every record."""
        try:
            tracker.log(step, named)
        except Exception as err:
            self.trackers.remove(tracker)
            logging.getLogger("genselect.trackers").warning(
                "%s failed at step %d and gets no more metrics (%s: %s); metrics.jsonl keeps them",
                type(tracker).__name__, step, type(err).__name__, str(err).splitlines()[0][:200] if str(err) else "")

    def records(self, kind: Optional[str] = None) -> list:
        if not self.path.exists():
            return []
        rows = [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
        return [r for r in rows if kind is None or r["kind"] == kind]

    def close(self, failed: bool = False) -> None:
        """Close every backend once (`failed`: the run stopped on an error; W&B and MLflow mark their run so)."""
        trackers, self.trackers = self.trackers, []
        for tracker in trackers:
            tracker.close(failed=failed)


class Progress:
    """A tqdm bar over learner steps whose postfix shows reward, held-out accuracy, tokens/s, staleness."""

    def __init__(self, total: int, initial: int, enabled: bool = True):
        from tqdm import tqdm

        self.bar = tqdm(total=total, initial=initial, disable=not enabled, desc="train", unit="step",
                        dynamic_ncols=True)
        self.accuracy = float("nan")
        self.sampled = float("nan")

    def update(self, metrics: dict) -> None:
        self.bar.set_postfix({
            "reward": f"{metrics.get('reward/all_groups_mean', float('nan')):.3f}",
            "heldout": f"{self.accuracy:.3f}",
            "sampled": f"{self.sampled:.3f}",
            "max_N": metrics.get("curriculum/max_candidates", "-"),
            "tok/s": f"{metrics.get('throughput/tokens_per_s', 0.0):.0f}",
            "stale": f"{metrics.get('staleness/mean', 0.0):.2f}",
        }, refresh=False)
        self.bar.update(1)

    def write(self, message: str) -> None:
        self.bar.write(message)

    def close(self) -> None:
        self.bar.close()


def log_k_axis(ax, ks) -> None:
    """A log-scale x axis with one tick at each measured k (`ks`: ints or their strings, as a curve's keys),
    labelled as the plain number (1, 2, 4, ...), and no minor ticks: a log axis's own labels would read
    2 x 10^0. The plots of k share it: curves.png of a generator run, the system study's generators.png
    and bon.png. Call it after anything that sets the x scale (which would reset the ticks)."""
    ax.set_xscale("log")
    ks = [int(k) for k in ks]
    if ks:
        ax.set_xticks(ks, [str(k) for k in ks], minor=False)
        ax.minorticks_off()


def plot_curves(log: MetricsLog, out_path: str | Path) -> Path:
    """curves.png: training reward per step; held-out GenSelect accuracy vs majority@N, random@N and the best
    non-RL selector (`heldout_panel`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = log.records("train")
    evals = log.records("eval")
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    if train:
        steps = [r["step"] for r in train]
        left.plot(steps, [r.get("reward/all_groups_mean", math.nan) for r in train], label="mean reward (all groups)")
        left.plot(steps, [r.get("curriculum/gain", math.nan) for r in train], ".", markersize=3,
                  label="reward - random@N at the curriculum's largest N")
        left.legend(loc="lower right")
    left.set(xlabel="learner step", ylabel="reward", title="Training reward")
    heldout_panel(right, evals)
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return Path(out_path)


def heldout_panel(ax, evals: list) -> None:
    """The held-out panel of curves.png on `ax`: the policy's validation accuracy per reading (greedy with its CI,
    sampled, knockout, round robin; the no-cue set's round robin), majority@N, random@N, and the level of the best
    non-RL selector (`best_selector` of the validation set: the strongest of majority@N, random@N, the start policy
    and the rules at the start), labelled with its name. `evals`: the run's eval records."""
    if evals:
        steps = [r["step"] for r in evals]
        ax.errorbar(steps, [r["genselect"] for r in evals],
                    yerr=[[r["genselect"] - r["genselect_lo"] for r in evals],
                          [r["genselect_hi"] - r["genselect"] for r in evals]],
                    marker="o", capsize=3, label="GenSelect@N (selector, greedy)")
        ax.plot(steps, [r.get("sampled", math.nan) for r in evals], "o-", alpha=0.6,
                label="selector, sampled (temperature 1)")
        for key, label in (("knockout/genselect", "knockout of pairs"), ("round_robin/genselect", "round robin of pairs")):
            if any(key in r for r in evals):
                ax.plot(steps, [r.get(key, math.nan) for r in evals], "s-", label=f"selector, {label}")
        nocue = [r for r in evals if "nocue/round_robin/genselect" in r]
        if nocue:
            ax.plot([r["step"] for r in nocue], [r["nocue/round_robin/genselect"] for r in nocue], "^-", alpha=0.7,
                    label="no-cue set, round robin")
            ax.plot([r["step"] for r in nocue], [r["nocue/majority"] for r in nocue], "^:", alpha=0.7,
                    label="no-cue set, majority@N")
        ax.plot(steps, [r["majority"] for r in evals], "--", label="majority@N")
        ax.plot(steps, [r["random"] for r in evals], ":", label="random@N")
        best = best_selector(set_summary(evals, "") or {})
        if best:
            ax.axhline(best["accuracy"], color="black", linestyle="-.", linewidth=1,
                       label=f"best non-RL selector: {best['name']} ({best['accuracy']:.3f})")
        ax.legend(loc="lower right", fontsize=7)
    ax.set(xlabel="learner step", ylabel="held-out accuracy", title="Held-out selection accuracy", ylim=(0, 1))


TIME_KEYS = ("generate_s", "verify_s", "train_s", "sync_s", "idle_s")


def summarize(log: MetricsLog, wall_seconds: float, steps: int) -> dict:
    """summary.json content: accuracy at the start and end of training (same held-out set), baselines, each held-out
    set beside the selectors that need no RL (`sets`: `set_summary` of validation, test and no_cue), and the per-step
    time split (mean seconds per step)."""
    evals = log.records("eval")
    train = log.records("train")
    first, last = (evals[0], evals[-1]) if evals else ({}, {})
    split = {key: _mean([r.get(f"time/{key}", math.nan) for r in train]) for key in TIME_KEYS}
    return {
        "steps": steps,
        "wall_seconds": round(wall_seconds, 2),
        "start_accuracy": first.get("genselect"),
        "final_accuracy": last.get("genselect"),
        "final_accuracy_ci": [last.get("genselect_lo"), last.get("genselect_hi")],
        "start_knockout_accuracy": first.get("knockout/genselect"),
        "final_knockout_accuracy": last.get("knockout/genselect"),
        "final_knockout_accuracy_ci": [last.get("knockout/genselect_lo"), last.get("knockout/genselect_hi")],
        "final_knockout_by_candidates": last.get("knockout/by_size"),
        "start_round_robin_accuracy": first.get("round_robin/genselect"),
        "final_round_robin_accuracy": last.get("round_robin/genselect"),
        "final_round_robin_accuracy_ci": [last.get("round_robin/genselect_lo"), last.get("round_robin/genselect_hi")],
        "final_round_robin_by_candidates": last.get("round_robin/by_size"),
        "start_sampled_accuracy": first.get("sampled"),
        "final_sampled_accuracy": last.get("sampled"),
        "final_by_candidates": last.get("by_size"),
        "final_by_slip_kind": last.get("by_slip_kind"),
        "sets": {name: set_summary(evals, prefix) for name, prefix in (("validation", ""), ("test", "test/"),
                                                                       ("no_cue", "nocue/"),
                                                                       ("out_of_distribution", "ood/"))},
        "curriculum_final_max_candidates": train[-1].get("curriculum/max_candidates") if train else None,
        "majority_accuracy": last.get("majority"),
        "random_accuracy": last.get("random"),
        "pass_at_1": last.get("pass_at_1"),
        "pass_at_n": last.get("pass_at_n"),
        "heldout_prompts": last.get("prompts"),
        "final_parse_failure_rate": last.get("parse_failure_rate"),
        "time_per_step": split,
        "weight_sync_gbps": _mean([r.get("sync/gbps", math.nan) for r in train]),
        # mean seconds per sync of its phases (docs/rollout.md#timeouts): drain, transfer, load
        "weight_sync_split": {k: _mean([r.get(f"sync/{k}", math.nan) for r in train if r.get("time/sync_s")])
                              for k in ("drain_s", "transfer_s", "load_s")},
        "dropped_stale_samples": sum(r.get("staleness/dropped_groups", 0) for r in train),
    }


def set_readings(evals: list, prefix: str) -> Optional[tuple]:
    """(first, last) eval records that read the held-out set of key prefix `prefix` (driver/heldout.py: "" validation,
    "test/", "nocue/"); None when none did."""
    read = [r for r in evals if r.get(prefix + "genselect") is not None]
    return (read[0], read[-1]) if read else None


def set_summary(evals: list, prefix: str) -> Optional[dict]:
    """One held-out set's first and last readings (`set_readings`): the policy read whole, by knockout and by round
    robin, the knockout's and the round robin's margins over majority@N, majority@N, random@N, pass@N and each rule
    selector, each start and final with the final's 95% CI, and `best_non_rl` (`best_non_rl`, with `rl_over_it_ci`,
    its paired 95% CI over problems: `rl_over_best_ci`). None when the set was never read."""
    readings = set_readings(evals, prefix)
    if readings is None:
        return None
    first, last = readings

    def reading(key: str) -> dict:
        return {"start": first.get(prefix + key), "final": last.get(prefix + key),
                "final_ci": [last.get(prefix + key + "_lo"), last.get(prefix + key + "_hi")]}

    out = {"prompts": last.get(prefix + "prompts"), "start_step": first.get("step"), "final_step": last.get("step"),
           "policy": reading("genselect"), "policy_knockout": reading("knockout/genselect"),
           "policy_round_robin": reading("round_robin/genselect"),
           "knockout_over_majority": reading("knockout/over_majority"),
           "round_robin_over_majority": reading("round_robin/over_majority"),
           "majority": last.get(prefix + "majority"), "random": last.get(prefix + "random"),
           "pass_at_n": last.get(prefix + "pass_at_n"),
           "rules": {rule: {"whole": reading(f"rule/{rule}/genselect"),
                            "knockout": reading(f"rule/{rule}/knockout/genselect")}
                     for rule in RULES if first.get(f"{prefix}rule/{rule}/genselect") is not None}}
    out["best_non_rl"] = best_non_rl(out)
    if out["best_non_rl"]:
        out["best_non_rl"]["rl_over_it_ci"] = rl_over_best_ci(first, last, prefix, out["best_non_rl"]["key"])
    return out


def non_rl_options(s: dict) -> list:
    """The selectors of a set summary (`set_summary`) that RL did not train, each (name, key of its accuracy in an
    eval record, its accuracy at the start): majority@N, random@N, the start policy (whole prompt and knockout) and the
    rules at the start (the own-answer and solve-alone rules then read the start model's own solutions; the cue rule
    reads no model); those not read are left out."""
    options = [("majority@N", "majority", s["majority"]), ("random@N", "random", s["random"]),
               ("start policy, whole prompt", "genselect", s["policy"]["start"]),
               ("start policy, knockout", "knockout/genselect", s["policy_knockout"]["start"])]
    for rule, r in s["rules"].items():
        options += [(f"{RULE_NAMES[rule]}, whole prompt", f"rule/{rule}/genselect", r["whole"]["start"]),
                    (f"{RULE_NAMES[rule]}, knockout", f"rule/{rule}/knockout/genselect", r["knockout"]["start"])]
    return [o for o in options if o[2] is not None]


def best_selector(s: dict) -> Optional[dict]:
    """The strongest of `non_rl_options(s)` (the first listed among ties): {name, key, accuracy}; None when `s` is
    empty or none was read."""
    options = non_rl_options(s) if s else []
    if not options:
        return None
    name, key, accuracy = max(options, key=lambda o: o[2])
    return {"name": name, "key": key, "accuracy": accuracy}


def best_non_rl(s: dict) -> Optional[dict]:
    """The strongest selector of a set summary (`set_summary`) that RL did not train (`best_selector`), and what the
    RL-trained policy's final reading by knockout adds over it: {name, key, accuracy, rl_final, rl_over_it}; None
    before a final knockout reading."""
    final = s["policy_knockout"]["final"]
    best = best_selector(s)
    if final is None or s["final_step"] == s["start_step"] or best is None:
        return None
    return {**best, "rl_final": final, "rl_over_it": round(final - best["accuracy"], 4)}


def paired_scores(first: dict, last: dict, prefix: str, key: str) -> Optional[tuple]:
    """(problem ids, RL's final knockout per-prompt scores, the start reading's per-prompt scores of selector `key`)
    of one held-out set, from the `scores` its readings kept (driver.eval_metrics.prompt_scores): three lists of P.
    None when a reading kept no such scores (a run folder written before they were kept)."""
    rl, start = last.get(prefix + "scores"), first.get(prefix + "scores")
    if not rl or not start or "knockout/genselect" not in rl or key not in start:
        return None
    if rl["problem_id"] != start["problem_id"]:
        raise ValueError(f"the {prefix or 'validation '}readings at steps {first.get('step')} and {last.get('step')} "
                         f"hold different prompts: they cannot be paired")
    return rl["problem_id"], rl["knockout/genselect"], start[key]


def rl_over_best_ci(first: dict, last: dict, prefix: str, key: str, seed: int = 0) -> Optional[list]:
    """[lo, hi]: the paired 95% bootstrap CI over problems (core.algo.paired) of RL's final knockout accuracy minus the
    start reading's accuracy of selector `key` on one held-out set; None without per-prompt scores."""
    from core.algo.paired import paired_bootstrap_ci

    pairs = paired_scores(first, last, prefix, key)
    if pairs is None:
        return None
    _, lo, hi = paired_bootstrap_ci(*pairs, seed=seed)
    return [round(lo, 4), round(hi, 4)]


SET_TITLES = {"validation": "validation set", "test": "test set (problems no recipe choice was read on)",
              "no_cue": "no-cue set (the same prompts, hedging sentences taken out)",
              "out_of_distribution": "out-of-distribution set (reasoning-gym problems, eval_ood_tasks)"}


def set_summary_lines(name: str, s: dict) -> list:
    """The final console summary of one held-out set (`set_summary`): the policy start -> final, the baselines, and
    what RL adds over the strongest non-RL selector."""
    def f(v) -> str:
        return "n/a" if v is None else f"{v:.3f}"

    def change(r: dict) -> str:
        lo, hi = r["final_ci"]
        return f"{f(r['start'])} -> {f(r['final'])}" + (f" [{f(lo)}, {f(hi)}]" if lo is not None else "")

    round_robin = s.get("policy_round_robin") or {}
    lines = [f"  {SET_TITLES[name]}, {s['prompts']} prompts:",
             f"    policy: knockout {change(s['policy_knockout'])}, whole prompt {change(s['policy'])}"
             + (f", round robin {change(round_robin)}" if round_robin.get("final") is not None else ""),
             f"    majority@N {f(s['majority'])}  random@N {f(s['random'])}  pass@N {f(s['pass_at_n'])}"]
    for rule, r in s["rules"].items():
        lines.append(f"    {RULE_NAMES[rule]}: knockout {change(r['knockout'])}, whole prompt {change(r['whole'])}")
    best = s["best_non_rl"]
    if best:
        ci = best.get("rl_over_it_ci")
        lines.append(f"    RL's final knockout {f(best['rl_final'])} against the best non-RL selector ({best['name']}, "
                     f"{f(best['accuracy'])}): {best['rl_over_it']:+.3f}"
                     + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}] (paired 95% CI over problems)" if ci else ""))
    return lines


def _mean(values: list) -> Optional[float]:
    finite = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return round(sum(finite) / len(finite), 4) if finite else None

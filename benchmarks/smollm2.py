"""SmolLM2-135M through the whole system: one `python -m driver.train smollm2` run, measured from outside.

    .venv/bin/python benchmarks/smollm2.py [--config smollm2|smollm2_procedural] [--run-dir runs/smollm2-bench]
        [--out benchmarks/results/smollm2_run.json] [--keep-evals DIR] [key=value ...]

Starts the run (resume=never) and samples the resident memory of its whole process tree (driver, Ray, learner,
vLLM engine, verifier) every 2 s; when it ends, reads its metrics.jsonl and summary.json and writes one small JSON:
the held-out curve (accuracy at each evaluation, with majority@N, random@N and pass@N), the training reward and
parse-failure rate per step, seconds per step split into generation, learner and sync, response tokens/s, the
sync check's largest log-prob difference, and the peak memory (the tree's summed RSS, an upper bound since shared
pages count once per process, and the largest single process with its name). The machine's load average at the start
and the end is recorded too: on a shared machine times are upper bounds. `--keep-evals DIR` also copies the run's
held-out readings, with their per-prompt scores, to DIR/metrics.jsonl: a folder `python -m driver.compare` reads, so
runs of several seeds pool into one paired CI later without keeping their whole run folders.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class MemorySampler(threading.Thread):
    """Peak summed RSS of a process tree, and its largest process, sampled every `every` seconds."""

    def __init__(self, pid: int, every: float = 2.0):
        super().__init__(daemon=True)
        self.pid, self.every, self.stop = pid, every, threading.Event()
        self.peak_total, self.peak_process = 0, (0, "")

    def run(self) -> None:
        import psutil

        while not self.stop.is_set():
            try:
                root = psutil.Process(self.pid)
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            total = 0
            for p in procs:
                try:
                    rss, name = p.memory_info().rss, " ".join(p.cmdline()[:3])[:80] or p.name()
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                total += rss
                if rss > self.peak_process[0]:
                    self.peak_process = (rss, name)
            self.peak_total = max(self.peak_total, total)
            self.stop.wait(self.every)


def _records(run_dir: Path, kind: str) -> list:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if r["kind"] == kind]


def _median(values: list):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _knockouts(reading: dict) -> dict:
    """The knockout of pairs with its CI on each held-out set of an eval record (None where the run read none)."""
    from driver.compare import SET_PREFIXES  # the metric prefix of each held-out set: validation, test, no cue

    out = {}
    for prefix in SET_PREFIXES.values():
        key = f"{prefix}knockout/genselect"
        out[key], out[key + "_ci"] = reading.get(key), [reading.get(key + "_lo"), reading.get(key + "_hi")]
    return out


def report(run_dir: Path, wall_s: float, sampler: MemorySampler, loads: tuple, command: list) -> dict:
    train, evals = _records(run_dir, "train"), _records(run_dir, "eval")
    summary = json.loads((run_dir / "summary.json").read_text())
    split = {k: _median([r.get(f"time/{k}_s") for r in train]) for k in ("step", "generate", "train", "sync")}
    curve = [{"step": r["step"], **{k: r.get(k) for k in ("genselect", "majority", "random", "pass_at_n",
                                                           "parse_failure_rate", "prompts", "problems")},
              "genselect_ci": [r.get("genselect_lo"), r.get("genselect_hi")], **_knockouts(r)} for r in evals]
    steps = [{"step": r["step"], "reward_all_groups": r.get("reward/all_groups_mean"), "reward_trained": r.get(
              "reward/mean"), "parse_failures": r.get("verifier/parse_failures"),
              "rollouts": r.get("verifier/rollouts"), "response_tokens": r.get("batch/response_tokens"),
              "step_s": r.get("time/step_s"), "generate_s": r.get("time/generate_s"), "train_s": r.get("time/train_s"),
              "sync_s": r.get("time/sync_s"), "sync_logprob_max_abs_diff": r.get("sync/logprob_max_abs_diff")}
             for r in train]
    return {
        "command": command, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_avg_start": loads[0],
                    "load_avg_end": loads[1]},
        "wall_s": round(wall_s, 1), "steps": len(train), "dataset": summary.get("dataset"),
        "median_step_split_s": split,
        "tokens_per_s_median": _median([r.get("throughput/tokens_per_s") for r in train]),
        "sync_logprob_max_abs_diff_max": max((s["sync_logprob_max_abs_diff"] or 0.0 for s in steps), default=None),
        "peak_rss_tree_gib": round(sampler.peak_total / 2 ** 30, 2),
        "peak_rss_process": {"gib": round(sampler.peak_process[0] / 2 ** 30, 2), "process": sampler.peak_process[1]},
        "heldout_curve": curve, "per_step": steps,
    }


def keep_evals(run_dir: Path, out_dir: Path) -> Path:
    """Copy the run's `kind: eval` records (metrics.jsonl lines, per-prompt scores included) to
    out_dir/metrics.jsonl."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "metrics.jsonl"
    target.write_text("".join(json.dumps(r) + "\n" for r in _records(run_dir, "eval")))
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="smollm2", help="the run's config: smollm2 (its own candidates) or "
                                                              "smollm2_procedural (the default's data)")
    parser.add_argument("--run-dir", default="runs/smollm2-bench")
    parser.add_argument("--out", default="benchmarks/results/smollm2_run.json")
    parser.add_argument("--keep-evals", default=None, help="also copy the held-out readings to this folder")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    command = [sys.executable, "-m", "driver.train", args.config, f"run_dir={args.run_dir}", "resume=never",
               "progress=false", *args.overrides]
    print("$", " ".join(command[1:]), flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or None
    load_start, started = os.getloadavg()[0], time.time()
    proc = subprocess.Popen(command, cwd=ROOT)
    sampler = MemorySampler(proc.pid)
    sampler.start()
    code = proc.wait()
    sampler.stop.set()
    if code != 0:
        print(f"driver.train exited with {code}", file=sys.stderr)
        return code
    result = report(ROOT / args.run_dir, time.time() - started, sampler, (load_start, os.getloadavg()[0]),
                    ["python", *command[1:]])
    result["commit"] = commit
    if args.keep_evals:
        kept = keep_evals(ROOT / args.run_dir, Path(args.keep_evals))
        result["kept_readings"] = f"{kept} (python -m driver.compare {Path(args.keep_evals)})"
        print(f"kept the held-out readings in {kept}")
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("wall_s", "steps", "median_step_split_s", "tokens_per_s_median",
                                             "peak_rss_tree_gib", "heldout_curve")}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

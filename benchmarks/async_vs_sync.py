"""Asynchronous (max_staleness=1) against synchronous (max_staleness=0) training, same config and steps.

    .venv/bin/python benchmarks/async_vs_sync.py [CONFIG] [--steps N] [key=value ...]

Runs `python -m driver.train` twice in one invocation (sync first, then async, fresh run folders, resume
off), then reads each run's metrics.jsonl: wall-clock of the training steps (setup and evaluation
excluded), per-step time split (generate, verify, train, sync, idle, waiting for rollouts) with median and
p90 over steps, and the speed-up. Writes benchmarks/results/async_vs_sync.{json,png}.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KEYS = ("time/step_s", "time/generate_s", "time/verify_s", "time/train_s", "time/sync_s", "time/idle_s",
        "time/wait_rollout_s")


def run(config: str, staleness: int, steps: int, extra: list, out: Path) -> dict:
    run_dir = out / f"run_staleness{staleness}"
    cmd = [sys.executable, "-m", "driver.train", config, f"run_dir={run_dir}", f"steps={steps}",
           f"max_staleness={staleness}", "resume=never", "eval_every=0", "checkpoint_every=1000000",
           "progress=false", *extra]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)
    rows = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines() if l.strip()]
    train = [r for r in rows if r["kind"] == "train"]
    stats = {}
    for key in KEYS:
        values = sorted(r.get(key, 0.0) for r in train)
        stats[key] = {"median": statistics.median(values), "p90": values[int(0.9 * (len(values) - 1))],
                      "total": sum(values)}
    stats["steps"] = len(train)
    stats["tokens_per_s_median"] = statistics.median(r["throughput/tokens_per_s"] for r in train)
    stats["reward_last5"] = statistics.mean(r["reward/mean"] for r in train[-5:])
    return stats


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = ["time/generate_s", "time/train_s", "time/sync_s", "time/idle_s", "time/wait_rollout_s"]
    labels = ["sync (staleness 0)", "async (staleness 1)"]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for i, key in enumerate(parts):
        ax.bar([x + i * 0.15 for x in range(2)], [result[m][key]["median"] for m in ("sync", "async")],
               width=0.15, label=key.split("/")[1])
    ax.plot([0.3, 1.3], [result[m]["time/step_s"]["median"] for m in ("sync", "async")], "ko-", label="step (wall)")
    ax.set_xticks([0.3, 1.3], labels)
    ax.set_ylabel("seconds per step (median)")
    ax.legend(fontsize=8, ncol=3)
    ax.set_title(f"speed-up {result['speedup']:.2f}x over {result['sync']['steps']} steps")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("config", nargs="?", default="selector")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args, extra = parser.parse_known_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"config": args.config, "overrides": extra, "machine": f"{platform.processor() or platform.machine()}, "
              f"{__import__('os').cpu_count()} cores", "sync": run(args.config, 0, args.steps, extra, out),
              "async": run(args.config, 1, args.steps, extra, out)}
    result["speedup"] = result["sync"]["time/step_s"]["total"] / result["async"]["time/step_s"]["total"]
    (out / "async_vs_sync.json").write_text(json.dumps(result, indent=1))
    plot(result, out / "async_vs_sync.png")
    for mode in ("sync", "async"):
        r = result[mode]
        print(f"{mode:>5}: {r['time/step_s']['total']:.1f} s for {r['steps']} steps; per step median "
              + ", ".join(f"{k.split('/')[1]} {r[k]['median']:.2f}" for k in KEYS))
    print(f"speed-up of async over sync: {result['speedup']:.2f}x")


if __name__ == "__main__":
    main()

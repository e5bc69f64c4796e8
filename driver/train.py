"""The main job: asynchronous on-policy DAPO training of a GenSelect selector on Ray.

    python -m driver.train [CONFIG] [key=value ...]        (CONFIG: a name in configs/ or a YAML path)
    python -m driver.train CONFIG --plan [key=value ...]   print the placement (actor -> node type, resources,
                                                           placement-group bundles) and exit; starts nothing

One learner step, in order (this file is the only place that knows the order):
    1. keep up to `max_staleness` generation batches in flight (at least one);
    2. wait for the oldest: rollout actors sample G responses per prompt, the verifier pool scores them;
       drop samples older than the staleness bound; dynamic sampling refills the batch;
    3. with `max_staleness >= 1`, issue the next batch now, so it generates while this one trains;
    4. advantages -> learner DAPO step (all ranks);
    5. push the new weights into every rollout engine (in-flight requests finish on the old weights
       first) and bump the policy version;
    6. evaluate / checkpoint / log.
With `max_staleness = 0` nothing is in flight during 4-5: strictly synchronous on-policy training.
"""
from __future__ import annotations

import logging
import sys
import time
from collections import deque
from pathlib import Path

from core.env import apply_defaults

log = logging.getLogger("genselect.train")


def train_loop(run, start_step: int, steps: int) -> None:
    """Steps `start_step`..`steps-1` of the run (see the module docstring for the order)."""
    cfg = run.cfg
    pending = deque()
    for step in range(start_step, steps):
        started = time.time()
        while len(pending) < max(1, cfg.max_staleness):
            pending.append(run.collector.issue(cfg.prompts_per_step, run.version))
        collected = run.collector.collect(pending.popleft(), run.version, cfg.prompts_per_step,
                                          cfg.max_staleness, cfg.algorithm.dynamic_sampling,
                                          cfg.algorithm.max_num_gen_batches)
        waited = time.time() - started
        if cfg.max_staleness >= 1:
            while len(pending) < cfg.max_staleness:
                pending.append(run.collector.issue(cfg.prompts_per_step, run.version))
        train_metrics, train_s = run.train_step(collected, step)  # ({}, 0) if no group survived filtering
        sync_stats = run.sync_weights(run.version + 1) if train_metrics else {"seconds": 0.0}
        run.record_step(step, collected, train_metrics, {
            "time/step_s": time.time() - started, "time/wait_rollout_s": waited, "time/train_s": train_s,
            "time/sync_s": sync_stats["seconds"], "sync/gbps": sync_stats.get("gbps", 0.0)})
        if run.should_evaluate(step + 1):
            run.evaluate(step + 1)
        if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == steps:
            run.checkpoint(step + 1)


def main(argv=None) -> int:
    apply_defaults()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from core.config import ConfigError, describe, load_config

    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        for key, default, help_text in describe():
            print(f"  {key} = {default!r}\n      {help_text}")
        return 0
    plan_only = "--plan" in args
    args = [a for a in args if a != "--plan"]
    name = args.pop(0) if args and "=" not in args[0] else "default"
    try:
        cfg = load_config(name, args)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    if plan_only or cfg.cluster.dry_run:
        from cluster.layout import plan_main

        return plan_main(cfg, name)
    from driver.checkpoint import IncompatibleCheckpoint
    from driver.data.problem import DataError
    from driver.run import Run, RunFailed

    try:
        with Run(cfg) as run:
            start = run.start()
            train_loop(run, start, cfg.steps)
            summary = run.finish()
    except (DataError, IncompatibleCheckpoint) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except RunFailed as err:
        print(f"\ntraining stopped: {err} (actor logs: {Path(cfg.run_dir) / 'logs'})", file=sys.stderr)
        return 1
    print(f"\nsummary: {Path(cfg.run_dir) / 'summary.json'}")
    for key in ("steps", "wall_seconds", "start_accuracy", "final_accuracy", "majority_accuracy",
                "random_accuracy", "pass_at_n"):
        print(f"  {key:<18} {summary.get(key)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

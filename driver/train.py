"""The main job: asynchronous on-policy DAPO training of a GenSelect selector on Ray (or, with
`task=generator`, of a generator that writes solutions: driver/generator_run.py, the same loop).

    python -m driver.train [CONFIG] [key=value ...]        (CONFIG: a name in configs/ or a YAML path; also
                                                           key=, +key=value, ~key: docs/configuration.md)
    python -m driver.train CONFIG --plan [key=value ...]   print the placement (actor -> node type, resources,
                                                           placement-group bundles) and exit; starts nothing

`train_loop` below is the table of contents of one learner step; each stage is one named call, in this order
(this file is the only place that knows the order):
    0. keep up to `max_staleness` generation batches in flight (at least one)      keep_in_flight
    1. collect: wait for the oldest; rollout actors sample G responses per prompt,
       the verifier pool scores them; fresh rounds refill what the filter drops    RolloutCollector.collect
    2. filter (inside 1): drop samples older than the staleness bound, then
       dynamic sampling                                                           step.filter_groups
    (with `max_staleness >= 1`, issue the next batch now, so it generates while this one trains)
    3. overlong shaping and advantages -> one TrainSequence per response          step.shape_and_advantage
       then the model's extra rows, if any (anchor-only worked solutions)         extra_rows hook
    4. merge identical sequences, shard them over the learner ranks               step.shard
    5. learner DAPO step (all ranks)                                              step.learner_step
    6. weight sync: push the new weights into every rollout engine (in-flight
       requests finish on the old weights first) and bump the policy version     step.sync_weights
       (every weight_sync.check_every syncs: engines and learner score one
       trained response alike, or the run stops)                                  step.check_sync
    then record, evaluate, checkpoint and export (the run's lifecycle: driver/run.py). With `max_staleness = 0`
    nothing is in flight during 3-6: strictly synchronous on-policy training. A step whose groups were all filtered
    or stale skips 3-6 (counted).
The six files a step visits, in order: driver/train.py (this loop), driver/step.py (the driver side of stages 1-6),
actors/rollout/rollout_worker.py and actors/verifier/verifier_pool.py (stage 1), actors/learner/learner.py (stage 5),
actors/weight_sync/coordinator.py (stage 6; the transport it runs, by default actors/weight_sync/object_store.py, and
the engine side of a sync: actors/weight_sync/engine_update.py). The actors' handles and the deadline of every call to
them: driver/fleet.py; the extra rows of the tiny recipe: tiny_recipe/anchor_rows.py.
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
    """Steps `start_step`..`steps-1` of the run (see the module docstring for the stages)."""
    from driver.step import (check_sync, learner_step, policy_logprobs, shape_and_advantage, shard,  # torch: not
                             sync_weights)                                                        # for --help/--plan

    cfg, algo, fleet, extra_rows = run.cfg, run.cfg.algorithm, run.fleet, run.extra_rows
    pending = deque()
    for step in range(start_step, steps):
        started = time.time()
        keep_in_flight(run.collector, pending, max(1, cfg.max_staleness), cfg.prompts_per_step, fleet.version)
        # 1. collect the oldest batch in flight, refilled by fresh rounds while 2. the filter leaves it short
        collected = run.collector.collect(pending.popleft(), fleet.version, cfg.prompts_per_step,
                                          algo.max_num_gen_batches, cfg.max_staleness, algo.dynamic_sampling)
        waited = time.time() - started
        if cfg.max_staleness >= 1:  # the next batch generates while this one trains
            keep_in_flight(run.collector, pending, cfg.max_staleness, cfg.prompts_per_step, fleet.version)
        train_metrics, train_s, sync_stats = {}, 0.0, {"seconds": 0.0}
        if collected.groups:
            sequences = shape_and_advantage(collected.groups, algo, cfg.rollout.max_response_tokens,  # 3.
                                            lambda seqs: policy_logprobs(fleet, seqs))
            sequences = extra_rows(sequences, collected.groups, step)
            batch = shard(sequences, fleet.num_learners)                                              # 4.
            train_metrics, train_s = learner_step(fleet, batch, step)                                 # 5.
            sync_stats = sync_weights(fleet, fleet.version + 1)                                       # 6.
            if cfg.weight_sync.check_every and fleet.version % cfg.weight_sync.check_every == 0:
                train_metrics.update(check_sync(fleet, sequences.sequences))  # do the engines serve what was trained?
        else:  # every group filtered or stale after max_num_gen_batches rounds: counted, weights unchanged
            log.warning("step %d: no usable group after %s generation rounds; skipping the update", step,
                        collected.stats.get("collect/rounds"))
        run.record_step(step, collected, train_metrics, {
            "time/step_s": time.time() - started, "time/wait_rollout_s": waited, "time/train_s": train_s,
            "time/sync_s": sync_stats["seconds"], "sync/gbps": sync_stats.get("gbps", 0.0),
            # the sync's phases: in-flight generation finishing, weights moving, weights loading (rollout.md)
            **{f"sync/{k}": sync_stats.get(k, 0.0) for k in ("drain_s", "transfer_s", "load_s")}})
        if run.should_evaluate(step + 1):
            run.evaluate(step + 1)
        if step + 1 == steps or (cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0):
            run.checkpoint(step + 1)
        if run.should_export(step + 1):
            run.export(step + 1)


def keep_in_flight(collector, pending: deque, depth: int, prompts: int, version: int) -> None:
    """Stage 0: issue generation batches of `prompts` prompts (policy `version`) until `depth` are in flight."""
    while len(pending) < depth:
        pending.append(collector.issue(prompts, version))


def main(argv=None) -> int:
    apply_defaults()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from core.config import ConfigError, describe, is_recipe_key, load_config
    from core.overrides import is_override

    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        rows = describe()
        for title, recipe in (("The system's keys", False), ("The embedded tiny recipe's keys (the `tiny:` section, "
                                                              "model.name=tiny: the model built here, its pretraining "
                                                              "and warm-start, and the response forms and terms only "
                                                              "it uses)", True)):
            print(f"{title}:")
            for key, default, help_text in (r for r in rows if is_recipe_key(r[0]) == recipe):
                print(f"  {key} = {default!r}\n      {help_text}")
        return 0
    plan_only = "--plan" in args
    args = [a for a in args if a != "--plan"]
    name = args.pop(0) if args and not is_override(args[0]) else "default"
    try:
        cfg = load_config(name, args)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    if plan_only or cfg.cluster.dry_run:
        from cluster.layout import plan_main

        return plan_main(cfg, name)
    from cluster.placement import PlacementError
    from driver.checkpoint import IncompatibleCheckpoint
    from driver.data.problem import DataError
    from driver.failure import RunFailed
    from driver.report import set_summary_lines
    from driver.run import Run

    run_class = Run
    if cfg.task == "generator":  # the same loop; the tasks, their scoring and the evaluation differ
        from driver.generator_run import GeneratorRun

        run_class = GeneratorRun
    try:
        with run_class(cfg) as run:
            start = run.start()
            train_loop(run, start, cfg.steps)
            summary = run.finish()
    except (DataError, IncompatibleCheckpoint, PlacementError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except RunFailed as err:
        print(f"\ntraining stopped: {err} (actor logs: {Path(cfg.run_dir) / 'logs'})", file=sys.stderr)
        return 1
    print(f"\nsummary: {Path(cfg.run_dir) / 'summary.json'}")
    keys = (("steps", "wall_seconds", "step_seconds", "k", "start_pass_at_1", "final_pass_at_1", "start_pass_at_n",
             "final_pass_at_n") if cfg.task == "generator" else
            ("steps", "wall_seconds", "start_accuracy", "final_accuracy", "start_knockout_accuracy",
             "final_knockout_accuracy", "majority_accuracy", "random_accuracy", "pass_at_n"))
    for key in keys:
        if summary.get(key) is not None or "knockout" not in key:
            print(f"  {key:<23} {summary.get(key)}")
    for name, reading in (summary.get("sets") or {}).items():  # each set beside the selectors that need no RL
        if reading:
            print("\n".join(set_summary_lines(name, reading)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

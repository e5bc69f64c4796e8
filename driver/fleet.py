"""The actors one training step talks to, and the policy version their engines serve.

`Fleet` holds the handles `cluster.launch` started (rollout engines, verifier pools, learner ranks) and the weight
sync (actors/weight_sync.py), and gives the loop in driver/train.py the calls of stages 5 and 6 (`learner_step`,
`sync_weights`), the learner's log-probs an off-policy estimator needs at stage 3 (`policy_logprobs`), and the
recovery a restarted rollout engine needs (`restore_worker`: wait until Ray restarted it, push the current weights).
Every call runs under a deadline; a failure is a `RunFailed` that names what failed and how to continue.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

from driver import checkpoint as ckpt

log = logging.getLogger("genselect.fleet")


class RunFailed(RuntimeError):
    """The run cannot go on (a learner died, a deadline passed); the message says how to continue."""


def error_summary(err: BaseException, limit: int = 300) -> str:
    """`Type: first line` of a Ray error, plus its root cause when the text ends in one (an actor whose
    `__init__` raised carries the traceback, and its last line is the exception that killed it: without it a
    start-up failure says only "died in its creation task")."""
    lines = [l.strip() for l in str(err).splitlines() if l.strip()]
    head = lines[0][:limit] if lines else ""
    cause = lines[-1][:limit] if len(lines) > 1 else ""
    return f"{type(err).__name__}: {head}" + (f" ... caused by {cause}" if cause and cause != head else "")


def how_to_continue(run_dir: Path) -> str:
    """Where the run can resume from, and the command: the end of every RunFailed message."""
    last = ckpt.latest(run_dir)
    where = f"the last checkpoint is {last}" if last else "no checkpoint was written yet"
    return f"{where}; rerun the same command (resume=auto) to continue"


class Fleet:
    """A run's actors (cluster.launch.Handles), its weight sync and the policy version the engines serve."""

    def __init__(self, cfg, handles, broadcaster, run_dir: Path):
        self.cfg, self.handles, self.broadcaster, self.run_dir = cfg, handles, broadcaster, Path(run_dir)
        self.version = 0
        self.sync_retries = 0  # weight syncs retried after a rollout engine died (metric rollout/sync_retries)
        self._watch = None

    @property
    def num_learners(self) -> int:
        return len(self.handles.learners)

    def call(self, refs: list, timeout: float, what: str) -> list:
        """`ray.get(refs)` under `timeout`; an actor's death or error, or the deadline, is a RunFailed naming `what`,
        the resources no node can give back (an actor's node died), and how to continue."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        try:
            return ray.get(refs, timeout=timeout)
        except (RayActorError, RayTaskError, GetTimeoutError) as err:
            lost = self.placement_watch().unplaceable()
            why = f"; {'; '.join(lost)}" if lost else ""
            raise RunFailed(f"{what} failed ({error_summary(err)}){why}; {how_to_continue(self.run_dir)}") from err

    # -- stage 5 and the off-policy log-probs of stage 3 ----------------------------------------------------
    def learner_step(self, batch, step: int) -> tuple:
        """Stage 5: one DAPO step of every learner rank on its shard of `batch` (driver.step.Batch): (metrics,
        seconds); the metrics are the batch's and rank 0's, the latter prefixed `learner/`."""
        started = time.time()
        results = self.call([l.train_step.remote(shard, batch.global_num_tokens, step)
                             for l, shard in zip(self.handles.learners, batch.shards)],
                            self.cfg.learner.step_timeout_s, f"learner step {step}")
        metrics = {**batch.stats, **{f"learner/{k}": v for k, v in results[0].items() if isinstance(v, (int, float))}}
        return metrics, time.time() - started

    def policy_logprobs(self, sequences: list) -> list:
        """Per-token log-probs of each response under the learner's current weights (the policy this step trains),
        for an off-policy estimator (`algorithm.maxk_off_policy`). Rank 0 computes them; under ZeRO-3 with several
        ranks the forward pass is collective, so every rank runs it."""
        results = self.call([l.compute_logprobs.remote(sequences) for l in self._logprob_ranks()],
                            self.cfg.learner.step_timeout_s, "learner log-probs (off-policy max@k)")
        return results[0]

    def _logprob_ranks(self) -> list:
        """The learner ranks a log-prob forward pass runs on: rank 0, or every rank under ZeRO-3 with several
        (the forward pass gathers the weights, a collective)."""
        ranks = self.handles.learners
        return ranks if self.cfg.learner.zero_stage == 3 and len(ranks) > 1 else ranks[:1]

    def check_sync(self, sequences: list) -> dict:
        """After a sync: one of `sequences` scored by every engine and by the learner at temperature 1
        (driver/sync_check.py); RunFailed when an engine differs by more than weight_sync.check_tolerance."""
        from driver.sync_check import agreement, checked_sequence

        seq = checked_sequence(sequences)
        if seq is None:
            return {}
        timeout = self.cfg.learner.step_timeout_s
        learner = self.call([l.compute_logprobs.remote([seq], 1.0) for l in self._logprob_ranks()], timeout,
                            "learner log-probs (sync check)")[0][0]
        engines = self.call([r.compute_logprobs.remote(seq.prompt_token_ids, seq.response_token_ids)
                             for r in self.handles.rollouts], timeout, "engine log-probs (sync check)")
        metrics, error = agreement(learner, engines, self.cfg.weight_sync.check_tolerance)
        if error:
            raise RunFailed(f"{error}; {how_to_continue(self.run_dir)}")
        return metrics

    # -- stage 6 and recovery ---------------------------------------------------------------------------------
    def sync_weights(self, version: int, attempts: int = 3) -> dict:
        """Stage 6 (also on resume and after a rollout restart): push the learner's weights into every engine as
        `version`. A rollout actor that died meanwhile is being restarted by Ray: wait until every engine answers
        again, then retry the whole sync (the restarted engine gets the current weights that way)."""
        for attempt in range(1, attempts + 1):
            try:
                stats = self.broadcaster.sync(version)
                break
            except Exception as err:
                if attempt == attempts:
                    raise RunFailed(f"weight sync to version {version} failed: {err}") from err
                self.sync_retries += 1
                log.warning("weight sync to version %d failed (%s); waiting for the rollout actors, then retrying",
                            version, str(err).splitlines()[0][:200])
                self.wait_for_rollouts()
        self.version = version
        return stats

    def restore_worker(self, worker: int) -> None:
        """A rollout actor died or hung: wait for Ray to restart it, then push the current weights."""
        self.wait_for_rollouts()
        self.sync_weights(self.version)

    def wait_for_rollouts(self, timeout_s: float = 300.0) -> None:
        """Wait until every rollout actor answers again (Ray restarts a dead one, on another node if its own died).
        Stop early, naming the missing resources, when a restarted actor cannot be placed: its node died and no
        alive node can take its bundle for cluster.placement_timeout_s (cluster/recovery.py)."""
        from cluster.recovery import LostPlacement, wait_for_actors

        try:
            wait_for_actors(self.handles.rollouts, self.placement_watch(), timeout_s)
        except LostPlacement as err:
            raise RunFailed(f"{err}. Once a node that can take it is back: {how_to_continue(self.run_dir)}") from None
        except TimeoutError:
            raise RunFailed(f"a rollout actor did not come back within {timeout_s:g} s; "
                            f"{how_to_continue(self.run_dir)}") from None

    def placement_watch(self):
        """The run's PlacementWatch (cluster/recovery.py), made once."""
        if self._watch is None:
            from cluster.placement import plan
            from cluster.recovery import PlacementWatch

            c = self.cfg
            self._watch = PlacementWatch(plan(c.learner, c.rollout, c.verifier, c.cluster),
                                         self.handles.placement_group, c.cluster.placement_timeout_s)
        return self._watch

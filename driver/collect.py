"""Stage 1 of one training step (driver/train.py): issue prompts to the rollout actors, have the verifier
pool score them, and hand back full batches of scored groups that pass stage 2's filter
(`driver.batching.filter_groups`, passed in by the loop), refilling with fresh generation rounds while
too few do.

Every issued prompt is tracked until it is *finished* (trained on, filtered out by dynamic sampling, or
dropped as too stale), so a checkpoint can record the drawn-but-unfinished ids and a resumed run re-issues
exactly those. A rollout actor that dies or times out is restarted by Ray; its prompts are issued again
(after the current weights are pushed into the restarted engine), none lost and none used twice.
"""
from __future__ import annotations

import logging
import math
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from driver.curriculum import mean_gain

log = logging.getLogger("genselect.collect")
ABORT_WAIT_S = 60.0  # how long the driver waits for a rollout actor to confirm an abort


@dataclass
class Issued:
    """One generation call in flight: the prompt ids sent to one rollout actor, and the result ref."""
    worker: int
    prompt_ids: list
    ref: object
    version: int
    issued_at: float = field(default_factory=time.time)
    generate_ref: object = None   # the rollout actor's generate call (aborted when the driver gives up on it)
    call_id: str = ""


@dataclass
class Collected:
    """A full (or best-effort) batch for one learner step, and what happened on the way."""
    groups: list
    filtered_ids: list
    stale_ids: list
    stats: dict


class RolloutCollector:
    """Issues generation + verification and assembles batches; see the module docstring."""

    def __init__(self, handles, tasks_by_id: dict, stream, rollout_cfg, on_worker_restart, deadline_s=None):
        """deadline_s(prompts) -> seconds the driver waits for one call of that many prompts (generation and
        scoring; core.deadlines.collect_deadline_s); default: rollout_cfg.request_timeout_s."""
        self.handles = handles
        self.deadline_s = deadline_s or (lambda prompts: rollout_cfg.request_timeout_s)
        self.tasks = tasks_by_id
        self.stream = stream
        self.cfg = rollout_cfg
        self.on_worker_restart = on_worker_restart  # callable(worker_index): push current weights into it
        self.ready: list = []       # scored groups not yet used (dynamic-sampling surplus)
        self.inflight: list = []    # Issued calls
        self._next_worker = 0
        self.counters = Counter()

    # -- issuing --------------------------------------------------------------------------------------
    def issue(self, count: int, version: int) -> list:
        """Draw `count` prompts and send them out, split evenly over the rollout actors."""
        return self._send(self.stream.take(count), version)

    def _send(self, prompt_ids: list, version: int) -> list:
        workers = len(self.handles.rollouts)
        per = math.ceil(len(prompt_ids) / workers)
        calls = []
        for start in range(0, len(prompt_ids), per):
            chunk = prompt_ids[start:start + per]
            w = self._next_worker
            self._next_worker = (w + 1) % workers
            calls.append(self._call(w, chunk, version))
        self.inflight.extend(calls)
        return calls

    def _call(self, worker: int, prompt_ids: list, version: int) -> Issued:
        tasks = [self.tasks[i] for i in prompt_ids]
        call_id = f"c{worker}-{uuid.uuid4().hex[:12]}"
        generated = self.handles.rollouts[worker].generate.remote(tasks, call_id=call_id)
        verifier = self.handles.verifiers[worker % len(self.handles.verifiers)]
        return Issued(worker, list(prompt_ids), verifier.score_groups.remote(generated), version,
                      generate_ref=generated, call_id=call_id)

    # -- waiting --------------------------------------------------------------------------------------
    def _wait(self, call: Issued) -> list:
        """Scored groups of one call; on actor death or timeout, re-issue the same prompts (same worker)."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        for attempt in range(4):
            try:
                groups = ray.get(call.ref, timeout=self.deadline_s(len(call.prompt_ids)))
                self.inflight.remove(call)
                return groups
            except (RayActorError, GetTimeoutError, RayTaskError) as err:
                self.counters["rollout/reissued_calls"] += 1
                log.warning("rollout worker %d failed on %d prompts (%s); re-issuing (attempt %d)",
                            call.worker, len(call.prompt_ids), type(err).__name__, attempt + 1)
                self._abort(call)
                self.on_worker_restart(call.worker)
                fresh = self._call(call.worker, call.prompt_ids, call.version)
                self.inflight[self.inflight.index(call)] = fresh
                call = fresh
        raise RuntimeError(f"rollout worker {call.worker} failed 4 times on the same prompts; giving up")

    def _abort(self, call: Issued) -> None:
        """Stop a call the driver gave up on before anything else happens (the restart's weight sync): the
        rollout actor aborts its engine requests and answers once they are gone, so an abandoned call never
        runs on into the next sync (whose drain would wait for it). A dead actor's engine died with it."""
        import ray

        ray.cancel(call.ref, force=False)  # the verifier's scoring of it
        if call.generate_ref is None:
            return
        try:
            ray.get(self.handles.rollouts[call.worker].abort.remote(call.call_id), timeout=ABORT_WAIT_S)
            self.counters["rollout/aborted_calls"] += 1
        except Exception as err:  # the actor died (Ray restarts it with an idle engine) or does not answer
            log.warning("rollout worker %d: aborting call %s failed (%s)", call.worker, call.call_id,
                        type(err).__name__)

    def collect(self, calls: list, version: int, need: int, keep, max_rounds: int) -> Collected:
        """Wait for `calls`, then refill with fresh generation rounds (issued at `version`) until `need`
        usable groups exist.

        Usable: kept by `keep(groups) -> driver.batching.Filtered` (stage 2: not stale and, with dynamic
        sampling, rewards not all equal). At most `max_rounds` generation rounds in all (DAPO's
        max_num_gen_batches); a batch still short then trains as it is.
        """
        started = time.time()
        stats = Counter()
        waited = [self._wait(c) for c in calls]
        pool = self.ready + [g for groups in waited for g in groups]
        self.ready = []
        kept, filtered, stale = [], [], []
        rounds = 1
        while True:
            verdict = keep(pool)
            stale += verdict.stale
            kept += verdict.kept
            filtered += verdict.filtered
            missing = need - len(kept)
            if missing <= 0 or rounds >= max_rounds:
                break
            fresh = len(verdict.kept) + len(verdict.filtered)
            keep_rate = max(len(verdict.kept) / max(fresh, 1), 0.25)
            extra = [self._wait(c) for c in self.issue(min(4 * need, math.ceil(missing / keep_rate)), version)]
            waited += extra
            pool = [g for groups in extra for g in groups]
            rounds += 1
        self.ready = kept[need:]
        kept = kept[:need]
        # each group counted once, in the step it finishes (trained or filtered); the surplus waits for its step
        stats.update({f"dynamic_sampling/{k}": v for k, v in keep(kept + filtered).reasons.items()})
        scored = [r.reward for g in kept + filtered for r in g.rollouts]
        stats["reward/all_groups_mean"] = sum(scored) / len(scored) if scored else 0.0  # before filtering
        gain = mean_gain([g for gs in waited for g in gs], self.stream.cap)
        if gain is not None:
            stats["curriculum/gain"] = gain
        stats.update({"collect/rounds": rounds, "collect/wait_s": time.time() - started,
                      "staleness/dropped_groups": len(stale), "batch/underfilled": int(len(kept) < need),
                      # one call's requests run concurrently: its generation time is its slowest group's
                      "collect/generate_s": sum(max((g.generate_seconds for g in gs), default=0.0) for gs in waited),
                      "collect/verify_s": sum(g.extras.get("verify_s", 0.0) for gs in waited for g in gs)})
        return Collected(kept, [g.task.prompt_id for g in filtered], [g.task.prompt_id for g in stale], dict(stats))

    def unfinished_ids(self) -> list:
        """Drawn but not finished: in-flight calls first (in issue order), then the surplus buffer."""
        return [i for c in self.inflight for i in c.prompt_ids] + [g.task.prompt_id for g in self.ready]

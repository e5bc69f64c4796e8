"""The stages of one training step (driver/train.py calls them in this order): from prompts to new weights in the
rollout engines, DAPO's data path between the rollout engines and the learner (arXiv 2503.14476, section 3).

    1. `RolloutCollector.collect`: issue prompts to the rollout actors, have the verifier pool score them, and hand
       back full batches of scored groups that pass stage 2, refilling with fresh generation rounds while too few do.
    2. `filter_groups` (applied by the collector): drop groups older than the staleness bound, then dynamic
       sampling (`dynamic_sampling`).
    3. `shape_and_advantage`: overlong shaping (soft penalty added to the reward, or truncated responses masked
       out), advantages from the configured estimator (GRPO/DAPO, max@k, BoN-RLB), one TrainSequence per response.
    4. `shard`: the sequences over learner ranks (a group stays on one rank; identical samples merged), balanced by
       tokens; the token-level loss divides by the whole batch's response tokens (`global_num_tokens`).
    5. `learner_step`: one DAPO step of every learner rank on its shard (actors/learner/learner.py).
    6. `sync_weights`: the new weights into every rollout engine (actors/weight_sync/coordinator.py), retried once a
       rollout actor that died is back; every `weight_sync.check_every` syncs `check_sync` compares engine and learner.

Every issued prompt is tracked until it is *finished* (trained on, filtered out by dynamic sampling, or dropped as
too stale), so a checkpoint can record the drawn-but-unfinished ids and a resumed run re-issues exactly those. A
rollout actor that dies or times out is restarted by Ray; its prompts are issued again (after the current weights are
pushed into the restarted engine: driver.fleet.Fleet.restore_worker), none lost and none used twice.
"""
from __future__ import annotations

import logging
import math
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import torch

from core.packing import count_loss_tokens, merge_identical, shard_sequences
from core.algo import dapo
from core.algo.metrics import unforced_rate
from core.estimators import build_estimator
from core.records import TrainSequence
from driver.curriculum import mean_gain
from driver.failure import RunFailed, how_to_continue

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
        """on_worker_restart(worker index): push the current weights into a restarted engine (Fleet.restore_worker);
        deadline_s(prompts) -> seconds the driver waits for one call of that many prompts (generation and
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

    def collect(self, calls: list, version: int, need: int, max_rounds: int, max_staleness: int = 1,
                dynamic_sampling: bool = True) -> Collected:
        """Wait for `calls`, then refill with fresh generation rounds (issued at `version`) until `need`
        usable groups exist.

        Usable: kept by stage 2's `filter_groups` against the learner's `version` (at most `max_staleness` versions
        old and, with `dynamic_sampling`, rewards not all equal). At most `max_rounds` generation rounds in all
        (DAPO's max_num_gen_batches); a batch still short then trains as it is.
        """
        def keep(groups: list) -> Filtered:
            return filter_groups(groups, version, max_staleness, dynamic_sampling)

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
        stats.update({f"rollout/{k}": v for k, v in unforced_rate(kept + filtered).items()})
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


def dynamic_sampling(groups: list, enabled: bool) -> tuple:
    """Split groups into (kept, filtered) and count the reasons (metric labels such as 'all_wrong').

    A group with a failed verification (a rollout whose check timed out or crashed, `Rollout.verifier_failed`)
    is always filtered, reason 'verifier_failure', even with dynamic sampling off: its reward 0 is not a wrong
    answer. Otherwise, with `enabled`, groups whose rewards are all equal are filtered (DAPO dynamic sampling)."""
    if not groups:
        return [], [], Counter()
    rewards = torch.tensor([g.rewards for g in groups], dtype=torch.float64)
    keep, reasons = dapo.dynamic_sampling_filter(rewards)
    keep = keep.tolist() if enabled else [True] * len(groups)
    for i, g in enumerate(groups):
        if g.verifier_failures:
            keep[i], reasons[i] = False, "verifier_failure"
    kept = [g for g, k in zip(groups, keep) if k]
    filtered = [g for g, k in zip(groups, keep) if not k]
    return kept, filtered, Counter(reasons)


@dataclass
class Filtered:
    """Stage 2's verdict on groups: kept, filtered (`reasons` counts the labels of kept and filtered ones) or stale."""
    kept: list
    filtered: list
    stale: list
    reasons: Counter


def filter_groups(groups: list, version: int, max_staleness: int, dynamic: bool) -> Filtered:
    """Stage 2: staleness first (`is_stale` against the learner's `version`), then `dynamic_sampling` on the rest."""
    fresh = [g for g in groups if not dapo.is_stale(g.policy_version, version, max_staleness)]
    stale = [g for g in groups if dapo.is_stale(g.policy_version, version, max_staleness)]
    kept, filtered, reasons = dynamic_sampling(fresh, dynamic)
    return Filtered(kept, filtered, stale, reasons)


@dataclass
class Sequences:
    """Stage 3's output: one TrainSequence per response (groups in order, G each) and the batch's metrics."""
    sequences: list
    stats: dict = field(default_factory=dict)


@dataclass
class Batch:
    """What one learner step trains on. `shards[r]` goes to rank r; `global_num_tokens` is shared."""
    shards: list
    global_num_tokens: int
    stats: dict = field(default_factory=dict)


def _sampled_sum(values: list, sequence: TrainSequence) -> float:
    """Sum of per-token `values` (R,) over the tokens `sequence` trains (mask 1); written tokens are skipped."""
    return sum(v for v, m in zip(values, sequence.token_mask) if m)


def shape_and_advantage(groups: list, algo, max_response_tokens: int, policy_logprobs=None) -> Sequences:
    """Stage 3: overlong shaping, advantages and one TrainSequence per response of `groups` (each with G
    scored rollouts).

    `policy_logprobs(sequences) -> per-token log-probs` under the policy being trained (the learner's current
    weights; `policy_logprobs` below) is needed only by an off-policy estimator
    (`algorithm.advantage.off_policy` of max@k): its sequence log-ratio is
    `sum(policy log-probs) - sum(behaviour log-probs)` per response, over the tokens the policy sampled
    (`loss_mask` 1)."""
    if not groups:
        raise ValueError("shape_and_advantage needs at least one group")
    rollouts = [r for g in groups for r in g.rollouts]
    sizes = {len(g.rollouts) for g in groups}
    if len(sizes) != 1:
        raise ValueError(f"groups have different sizes {sorted(sizes)}; every group needs G rollouts")
    G = sizes.pop()
    raw = torch.tensor([g.rewards for g in groups], dtype=torch.float64)              # (num_groups, G)
    lengths = torch.tensor([r.response_length for r in rollouts], dtype=torch.float64)
    truncated = torch.tensor([r.truncated for r in rollouts], dtype=torch.bool)
    shaped = raw.clone()
    if not algo.overlong_filtering:
        penalty = dapo.overlong_penalty(lengths, max_response_tokens, algo.overlong_buffer_len,
                                        algo.overlong_penalty_factor)
        shaped = shaped + penalty.view(len(groups), G)
    # the configured estimator, with every parameter from the config (validated when the config was loaded)
    estimator = build_estimator(algo.advantage)
    weights = (~truncated).double() if algo.overlong_filtering else torch.ones(len(rollouts), dtype=torch.float64)
    # a failed verification (timeout, crash) is no wrong answer: out of the loss (filter_groups drops such
    # groups before they get here; this guards callers that skip it)
    failed = torch.tensor([r.verifier_failed for r in rollouts], dtype=torch.bool)
    weights = weights.masked_fill(failed, 0.0)
    # one prompt list per group, shared by its G sequences: pickling (Ray) sends a shared object once, so each
    # prompt travels to the learner once per group, not G times (shards keep a group together)
    prompts = []
    for g in groups:
        shared = list(g.rollouts[0].prompt_token_ids)
        if any(r.prompt_token_ids != shared for r in g.rollouts[1:]):
            raise ValueError(f"group {g.task.prompt_id}: its rollouts have different prompt tokens")
        prompts += [shared] * len(g.rollouts)
    sequences = [
        TrainSequence(prompt_token_ids=p, response_token_ids=list(r.response_token_ids),
                     behaviour_logprobs=list(r.behaviour_logprobs), advantage=0.0, loss_weight=float(w),
                     policy_version=r.policy_version, allowed_token_ids=r.allowed_token_ids, loss_mask=r.loss_mask,
                     anchor_mask=r.anchor_mask, allowed_ids_by_token=r.allowed_ids_by_token)
        for r, p, w in zip(rollouts, prompts, weights.tolist())
    ]
    log_ratio = None
    if estimator.needs_seq_log_ratio:
        if policy_logprobs is None:
            raise ValueError(f"estimator {algo.advantage['name']!r} is off-policy: shape_and_advantage needs "
                             f"policy_logprobs")
        current = policy_logprobs(sequences)
        log_ratio = torch.tensor([_sampled_sum(lp, s) - _sampled_sum(s.behaviour_logprobs, s)
                                  for lp, s in zip(current, sequences)], dtype=torch.float64).view(len(groups), G)
    advantages = estimator.advantages(shaped, seq_log_ratio=log_ratio)                 # (num_groups, G)
    for s, a in zip(sequences, advantages.reshape(-1).tolist()):
        s.advantage = float(a)
    stats = {
        "reward/mean": raw.mean().item(),
        "reward/shaped_mean": shaped.mean().item(),
        "advantage/abs_mean": advantages.abs().mean().item(),
        "response/mean_length": lengths.mean().item(),
        "response/truncated_fraction": truncated.double().mean().item(),
        "batch/groups": len(groups),
        "batch/sequences": len(sequences),
        "batch/response_tokens": count_loss_tokens(sequences),
        "batch/verifier_failures_masked": int(failed.sum()),
    }
    clip = getattr(estimator, "log_ratio_clip", None)
    if log_ratio is not None:
        stats["offpolicy/seq_log_ratio_abs_mean"] = log_ratio.abs().mean().item()
    if log_ratio is not None and clip is not None:
        stats["offpolicy/clipped_fraction"] = (log_ratio.abs() > clip).double().mean().item()
    return Sequences(sequences, stats)


def shard(sequences: Sequences, num_ranks: int) -> Batch:
    """Stage 4: the sequences over `num_ranks` learner ranks, identical ones merged (computed once, counted as
    often as they were sampled: `merge_identical`), and the token count every rank divides by."""
    merged = merge_identical(sequences.sequences)
    stats = {**sequences.stats, "batch/distinct_sequences": len(merged)}
    return Batch(shard_sequences(merged, num_ranks), count_loss_tokens(merged), stats)



# -- stages 5 and 6: the learner ranks and the weight sync (their handles and the calls' deadline: driver/fleet.py)
def learner_step(fleet, batch: Batch, step: int) -> tuple:
    """Stage 5: one DAPO step of every learner rank on its shard of `batch` (actors/learner/learner.py `train_step`):
    (metrics: the batch's and rank 0's, the latter prefixed `learner/`; seconds)."""
    started = time.time()
    results = fleet.call([l.train_step.remote(shard, batch.global_num_tokens, step)
                          for l, shard in zip(fleet.handles.learners, batch.shards)],
                         fleet.cfg.learner.step_timeout_s, f"learner step {step}")
    metrics = {**batch.stats, **{f"learner/{k}": v for k, v in results[0].items() if isinstance(v, (int, float))}}
    return metrics, time.time() - started


def sync_weights(fleet, version: int, attempts: int = 3) -> dict:
    """Stage 6 (also on resume and after a rollout restart): push the learner's weights into every engine as
    `version` (actors/weight_sync/coordinator.py), then `fleet.version = version`. A rollout actor that died meanwhile
    is being restarted by Ray: wait until every engine answers again, then retry the whole sync (the restarted engine
    gets the current weights that way)."""
    for attempt in range(1, attempts + 1):
        try:
            stats = fleet.broadcaster.sync(version)
            break
        except Exception as err:
            if attempt == attempts:
                raise RunFailed(f"weight sync to version {version} failed: {err}") from err
            fleet.sync_retries += 1
            log.warning("weight sync to version %d failed (%s); waiting for the rollout actors, then retrying",
                        version, str(err).splitlines()[0][:200])
            fleet.wait_for_rollouts()
    fleet.version = version
    return stats


def check_sync(fleet, sequences: list) -> dict:
    """After every `weight_sync.check_every`-th sync: one of `sequences` scored by every engine and the learner at
    temperature 1 (driver/sync_check.py); RunFailed when an engine differs by more than weight_sync.check_tolerance."""
    from driver.sync_check import agreement, checked_sequence

    seq = checked_sequence(sequences)
    if seq is None:
        return {}
    timeout = fleet.cfg.learner.step_timeout_s
    learner = fleet.call([l.compute_logprobs.remote([seq], 1.0) for l in logprob_ranks(fleet)], timeout,
                         "learner log-probs (sync check)")[0][0]
    engines = fleet.call([r.compute_logprobs.remote(seq.prompt_token_ids, seq.response_token_ids)
                          for r in fleet.handles.rollouts], timeout, "engine log-probs (sync check)")
    metrics, error = agreement(learner, engines, fleet.cfg.weight_sync.check_tolerance)
    if error:
        raise RunFailed(f"{error}; {how_to_continue(fleet.run_dir)}")
    return metrics


def policy_logprobs(fleet, sequences: list) -> list:
    """Per-token log-probs of each response under the learner's current weights (the policy this step trains), for
    an off-policy estimator at stage 3 (`algorithm.advantage.off_policy` of max@k)."""
    return fleet.call([l.compute_logprobs.remote(sequences) for l in logprob_ranks(fleet)],
                      fleet.cfg.learner.step_timeout_s, "learner log-probs (off-policy max@k)")[0]


def logprob_ranks(fleet) -> list:
    """The learner ranks a log-prob forward pass runs on: rank 0, or every rank under ZeRO-3 with several (the
    forward pass gathers the weights, a collective)."""
    ranks = fleet.handles.learners
    return ranks if fleet.cfg.learner.zero_stage == 3 and len(ranks) > 1 else ranks[:1]

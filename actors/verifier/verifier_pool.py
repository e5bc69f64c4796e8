"""Verifier pool: scores a selector's choice by verifying the chosen candidate for real.

GenSelect's reward (Learning Generative Selection for Best-of-N, arXiv 2602.02143) is 1 when the selected
candidate is correct, else 0; for code the continuous variant is the chosen candidate's unit-test pass fraction
(the reward max@k training needs, arXiv 2510.23393). `score(task, rollouts)` parses each response's last
`Judgment: IDX` (`core.algo.genselect.parse_judgment`), verifies each chosen candidate once, and writes
`reward`, `judgment`, `parse_status`, `verifier_status` and `timings["verify_s"]` into the rollouts. A
`SolveTask` (`task=generator`: the policy is a generator) has no candidates: each response's own stated answer
or program is verified, and its reward is that verdict (`_score_solutions`).

* math: math-verify (`parse` + `verify`, gold = `task.reference`) in worker processes: its timeouts use
  `signal.alarm`, which raises outside a process's main thread -- in a threaded or async Ray actor it would
  fail or, swallowed, silently score 0. See `actors.verifier.math_check`.
* code: the sandbox (`sandbox.pool.SandboxPool`), started at construction when `domains` names "code", else at
  the first code task; a missing backend raises `SandboxUnavailable` with the reason, never a silent fallback.
* a function named by `verifier.reward.name` (a user's `fn(problem, candidate, response, label, **extra,
  **params)`, or `stored_label`; core/rewards.py): scores every parsed selection in place of both, in its own worker
  processes (`actors.verifier.user_reward`), once per distinct (candidate, response) of a call; its score is the
  reward as it returns it; parse failures score 0 as they do without it.

Every verification runs under the deadline `cfg.timeout_s`. A hang past it scores 0 with status "timeout" and
its worker process is killed and replaced; an exception scores 0 with status "error". Both are counted in
`metrics()` and logged with the reason: never a silent zero. At most `cfg.processes_per_worker` verifications
are in flight per actor; further ones wait in a bounded queue (submission blocks when it is full). Verdicts
are cached per (prompt_id, candidate index): the G responses of a group that pick the same candidate verify it
once (only "ok" verdicts are kept across calls; a timeout or error may be transient and is retried).

The class is plain; `ray.remote(...)` is applied where it is launched. Its methods are thread-safe, so it also
works as a threaded actor (`max_concurrency > 1`).
"""
from __future__ import annotations

import logging
import threading
import time
from collections import Counter, OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Optional, Sequence

from actors.verifier.math_check import (ERROR, OK, TIMEOUT, ProcessPool, Verdict, check_answer, math_timeout,
                                        run_check, warm_up)
from core.algo.genselect import ParseStatus, parse_judgment, selection_reward
from core.config import VerifierConfig
from core.records import Rollout, SelectionTask, SolveTask
from core.rewards import function_path, reward_params, section_rules, selection_mode
from actors.verifier.code_check import Check, check_program, start_sandbox
from actors.verifier.solutions import code_program, stated_answer
from actors.verifier.user_reward import RewardFunction

log = logging.getLogger(__name__)

DOMAINS = ("math", "code")
PARSE_FAILURE = "parse_failure"
NO_ANSWER = "no_answer"  # parse status of a generator's math solution that states no final answer
_CACHED_STATUSES = (OK,)  # a timeout or error may be transient (a loaded machine, a crashed worker): retried


def merge_metrics(per_actor: list) -> dict:
    """Combine `VerifierPool.metrics()` dicts of several verifier actors: counts add up, `verify_s_mean`
    is the mean over all verifications (weighted by each actor's `verified`), `verify_s_max` the max."""
    merged: dict = {}
    for metrics in per_actor:
        for key, value in metrics.items():
            if key not in ("verify_s_mean", "verify_s_max"):
                merged[key] = merged.get(key, 0) + value
    verified = sum(m.get("verified", 0) for m in per_actor)
    seconds = sum(m.get("verify_s_mean", 0.0) * m.get("verified", 0) for m in per_actor)
    merged["verify_s_mean"] = seconds / verified if verified else 0.0
    merged["verify_s_max"] = max((m.get("verify_s_max", 0.0) for m in per_actor), default=0.0)
    return merged


class VerifierPool:
    """Scores GenSelect rollouts; see the module docstring.

    Args:
        cfg: the verifier sub-config (`TrainConfig.verifier`).
        domains: domains whose backends start at construction ("math" starts the worker processes, "code"
            the sandbox and its start-up check); the others start at their first task.
        check_fn: math check run in the worker processes, `fn(answer, reference, timeout_s) -> Verdict`; a
            picklable top-level function (default `actors.verifier.math_check.check_answer`; tests inject others).
        context: multiprocessing start method of the worker processes ("forkserver" or "spawn").
        queue_size: verifications that may wait beyond the in-flight ones before submission blocks.
        cache_size: verdicts kept (least recently used are evicted).
        math_memory_mb: address-space cap of each math worker process (None: no cap).
        response_form: the rollout workers' form (actors/rollout/response_forms.py), handed in by the run: a form whose
            reward reads more than the final judgment (`credits_candidates`: the tiny recipe's pick-then-point with
            `tiny.pick_reward`) names the other candidates to check (`credited_candidates`) and combines their
            scores with the selection reward (`credit`); None: the selection reward alone.
    """

    def __init__(self, cfg: VerifierConfig, domains: Sequence[str] = ("math",),
                 check_fn: Optional[Callable[..., Verdict]] = None, context: str = "forkserver",
                 queue_size: int = 64, cache_size: int = 65536, math_memory_mb: Optional[int] = 2048,
                 response_form=None):
        failed = [f"{key} {message}" for key, ok, message in section_rules(cfg.reward) if not ok]
        if failed:
            raise ValueError(failed[0])
        if cfg.processes_per_worker < 1 or cfg.timeout_s <= 0:
            raise ValueError("verifier.processes_per_worker must be >= 1 and verifier.timeout_s > 0")
        unknown = sorted(set(domains) - set(DOMAINS))
        if unknown:
            raise ValueError(f"unknown domains {unknown}; expected a subset of {list(DOMAINS)}")
        self.credits = response_form if response_form is not None and response_form.credits_candidates else None
        self.reward_path, self.reward_mode = function_path(cfg.reward), selection_mode(cfg.reward)
        if self.reward_path and self.credits is not None:
            raise ValueError(f"verifier.reward.name={self.reward_path!r} replaces the built-in reward, which the "
                             f"response form {response_form!r} credits beyond the final judgment: use a form that "
                             f"does not")
        self.cfg = cfg
        self._check_fn = check_fn or check_answer
        self._context = context
        self._math_memory_mb = math_memory_mb
        self._math_timeout = math_timeout(cfg.timeout_s)
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._math: Optional[ProcessPool] = None
        self._sandbox: Any = None
        self._threads = ThreadPoolExecutor(max_workers=cfg.processes_per_worker, thread_name_prefix="verify")
        self._slots = threading.BoundedSemaphore(cfg.processes_per_worker + queue_size)
        self._cache: "OrderedDict[tuple, Verdict]" = OrderedDict()
        self._cache_size = cache_size
        self._counts: Counter = Counter()
        self._seconds_sum = 0.0
        self._seconds_max = 0.0
        self._replaced_seen = 0
        self._closed = False
        self._reward_fn: Optional[RewardFunction] = None
        if self.reward_path:  # PluginError (a ValueError naming the key) for a path that does not fit
            self._reward_fn = RewardFunction(self.reward_path, cfg.processes_per_worker, cfg.timeout_s, context,
                                             params=reward_params(cfg.reward))
        elif "math" in domains:
            self._math_pool()
        if "code" in domains and not self.reward_path:
            self._sandbox_pool()

    # -- public API ------------------------------------------------------------------------------------

    def score(self, task: SelectionTask, rollouts: list[Rollout]) -> list[Rollout]:
        """Set reward, judgment, parse/verifier status and `timings["verify_s"]` on each rollout; return them.

        `verify_s` is the wall time of the verification that produced the rollout's verdict, charged to the
        first rollout that needed it (0.0 for the others, for cache hits and for parse failures); a check run for a
        credited candidate alone (the response form's `credited_candidates`) is charged to the first rollout that
        named it. A credited candidate whose check failed masks the rollout as a failed final check does.
        """
        if self._closed:
            raise RuntimeError("VerifierPool is closed")
        if task.domain not in DOMAINS:
            raise ValueError(f"task {task.prompt_id}: unknown domain {task.domain!r}; expected one of {DOMAINS}")
        if isinstance(task, SolveTask):
            return self._score_solutions(task, rollouts)
        if self._reward_fn is not None:
            return self._score_by_function(task, rollouts)
        judgments = [parse_judgment(r.response_text, task.num_candidates, r.truncated) for r in rollouts]
        credited = [self.credits.credited_candidates(r.response_text, task.num_candidates) if self.credits else ()
                    for r in rollouts]
        verdicts, seconds = self._verdicts(task, sorted({j.index for j in judgments if j.ok}
                                                        | {g for named in credited for g in named}))
        counts: Counter = Counter(rollouts=len(rollouts))
        for rollout, judgment, named in zip(rollouts, judgments, credited):
            rollout.parse_status = judgment.status
            rollout.judgment = judgment.index
            rollout.timings["verify_s"] = 0.0
            if not judgment.ok:
                rollout.reward, rollout.verifier_status = 0.0, PARSE_FAILURE
                counts[f"parse_failures/{judgment.status}"] += 1
                log.debug("parse failure for %s: %s", task.prompt_id, judgment.reason)
                continue
            verdict = verdicts[judgment.index]
            if judgment.index in seconds:
                rollout.timings["verify_s"] = seconds.pop(judgment.index)
            else:
                counts["cache_hits"] += 1
            rollout.verifier_status = verdict.status
            rollout.reward = self._reward(task, judgment, verdict)
            if self.credits is not None:
                checked = [verdicts[g] for g in named]
                failed = next((v for v in checked if v.status != OK), None)
                if failed is not None:  # a failed check of a credited candidate: masked like the final's
                    rollout.verifier_status, rollout.reward = failed.status, 0.0
                else:
                    rollout.reward = self.credits.credit(rollout.reward, tuple(v.score for v in checked))
            counts[f"rollout_status/{rollout.verifier_status}"] += 1
        for rollout, named in zip(rollouts, credited):  # a verification run for a credited candidate alone
            for g in named:
                if g in seconds:
                    rollout.timings["verify_s"] += seconds.pop(g)
        with self._lock:
            self._counts.update(counts)
        return rollouts

    def _score_by_function(self, task: SelectionTask, rollouts: list[Rollout]) -> list[Rollout]:
        """Rewards from the function `verifier.reward.name` names: a parse failure scores 0 as without it; the named
        candidate of every other rollout is scored by the function, each distinct (candidate, response) of this call
        once (the others count as cache hits). No verdict is kept across calls: a score may depend on the response."""
        judgments = [parse_judgment(r.response_text, task.num_candidates, r.truncated) for r in rollouts]
        keys = [(j.index, r.response_text, r.truncated) if j.ok else None for r, j in zip(rollouts, judgments)]
        first: dict = {}
        for rollout, key in zip(rollouts, keys):
            if key is not None:
                first.setdefault(key, rollout)
        pending = {key: self._submit_call(self._reward_fn.score, task, key[0], r) for key, r in first.items()}
        results = {key: future.result() for key, future in pending.items()}
        counts: Counter = Counter(rollouts=len(rollouts))
        for rollout, judgment, key in zip(rollouts, judgments, keys):
            rollout.parse_status, rollout.judgment = judgment.status, judgment.index
            rollout.timings["verify_s"] = 0.0
            if key is None:
                rollout.reward, rollout.verifier_status = 0.0, PARSE_FAILURE
                counts[f"parse_failures/{judgment.status}"] += 1
                continue
            verdict, seconds = results[key]
            if first[key] is rollout:
                rollout.timings["verify_s"] = seconds
                self._record(None, f"{task.prompt_id}#{judgment.index} (reward function)", verdict, seconds)
            else:
                counts["cache_hits"] += 1
            rollout.verifier_status = verdict.status
            rollout.reward = self._reward(task, judgment, verdict)
            counts[f"rollout_status/{verdict.status}"] += 1
        with self._lock:
            self._counts.update(counts)
        return rollouts

    def _score_solutions(self, task: SolveTask, rollouts: list[Rollout]) -> list[Rollout]:
        """A generator's solutions (`task=generator`): each response's stated final answer (math,
        `actors.verifier.solutions.stated_answer`) or program (code, `actors.verifier.solutions.code_program`) is
        verified, each distinct one once; the reward is its score (math: 1/0; code: 1 when every test passes, or the
        pass fraction with `verifier.reward.name=partial`). A math solution that states no answer scores 0 with status
        `parse_failure` (`parse_status` "no_answer"): the policy's mistake, trained on as a wrong answer."""
        checks, keys = {}, []
        for rollout in rollouts:
            if task.domain == "code":
                answer = code_program(task.problem, task.entry_point, rollout.response_text)
            else:
                answer = stated_answer(rollout.response_text)
            key = None if answer is None else (task.prompt_id, "answer", answer)
            keys.append(key)
            if key is not None:
                checks[key] = Check(task.domain, answer, task.reference, task.entry_point,
                                     f"{task.prompt_id}#{len(checks)}")
        verdicts, seconds = self._run_checks(checks)
        counts: Counter = Counter(rollouts=len(rollouts))
        for rollout, key in zip(rollouts, keys):
            rollout.timings["verify_s"] = 0.0
            if key is None:
                rollout.reward, rollout.verifier_status, rollout.parse_status = 0.0, PARSE_FAILURE, NO_ANSWER
                counts[f"parse_failures/{NO_ANSWER}"] += 1
                continue
            rollout.parse_status = ParseStatus.OK
            if key in seconds:
                rollout.timings["verify_s"] = seconds.pop(key)
            else:
                counts["cache_hits"] += 1
            verdict = verdicts[key]
            rollout.verifier_status = verdict.status
            rollout.reward = self._solution_reward(verdict)
            counts[f"rollout_status/{verdict.status}"] += 1
        with self._lock:
            self._counts.update(counts)
        return rollouts

    def _solution_reward(self, verdict: Verdict) -> float:
        if verdict.status != OK:
            return 0.0
        return verdict.score if self.reward_mode == "partial" else float(verdict.score >= 1.0)

    def score_groups(self, groups: list) -> list:
        """Score every RolloutGroup of one generation call; `extras["verify_s"]` gets each group's wall time.

        The training driver chains this on the rollout actor's result ref, so verification starts as soon as
        generation ends without the driver waiting in between.
        """
        for group in groups:
            started = time.perf_counter()
            self.score(group.task, group.rollouts)
            group.extras["verify_s"] = time.perf_counter() - started
        return groups

    def metrics(self, reset: bool = True) -> dict:
        """Counters since the last reset (flat keys for loggers).

        rollouts; verified (verifications actually run) split into ok / timeouts / errors; cache_hits
        (rollouts scored without a new verification); parse_failures and parse_failures/{no_judgment,
        out_of_range, malformed_index, cut_index}; rollout_status/{ok,timeout,error}; code_status/{sandbox status};
        workers_replaced;
        verify_s_mean / verify_s_max over the verifications run.
        """
        with self._lock:
            c = self._counts
            replaced = (self._math.replaced if self._math is not None else 0) + \
                (self._reward_fn.replaced if self._reward_fn is not None else 0)
            out = {key: c[key] for key in ("rollouts", "verified", "ok", "timeouts", "errors", "cache_hits")}
            out["workers_replaced"] = replaced - self._replaced_seen
            reasons = (ParseStatus.NO_JUDGMENT, ParseStatus.OUT_OF_RANGE, ParseStatus.MALFORMED_INDEX,
                       ParseStatus.CUT_INDEX, NO_ANSWER)
            for reason in reasons:
                out[f"parse_failures/{reason}"] = c[f"parse_failures/{reason}"]
            out["parse_failures"] = sum(out[f"parse_failures/{reason}"] for reason in reasons)
            for status in (OK, TIMEOUT, ERROR):
                out[f"rollout_status/{status}"] = c[f"rollout_status/{status}"]
            out.update({k: v for k, v in c.items() if k.startswith("code_status/")})
            out["verify_s_mean"] = self._seconds_sum / c["verified"] if c["verified"] else 0.0
            out["verify_s_max"] = self._seconds_max
            if reset:
                self._counts, self._seconds_sum, self._seconds_max = Counter(), 0.0, 0.0
                self._replaced_seen = replaced
        return out

    def health(self) -> dict:
        """Liveness: worker processes alive, sandbox state, and a round trip through one worker (`probe_s`)."""
        info: dict = {"closed": self._closed, "math_processes_expected": self.cfg.processes_per_worker,
                      "math_processes_alive": self._math.alive() if self._math else 0,
                      "math_started": self._math is not None, "sandbox_started": self._sandbox is not None}
        ok = not self._closed
        if self._math is not None and not self._closed:
            outcome = self._math.run(run_check, (check_answer, "1", "1", 1), self.cfg.timeout_s)
            info["probe_s"] = round(outcome.seconds, 4)
            ok = ok and outcome.status == OK and outcome.value.score == 1.0
        if self._sandbox is not None:
            info["sandbox"] = self._sandbox.describe()
        if self._reward_fn is not None:
            info["reward_function"] = self._reward_fn.path
            info["reward_processes_alive"] = self._reward_fn.alive()
            ok = ok and info["reward_processes_alive"] == self.cfg.processes_per_worker
        info["ok"] = ok
        return info

    def close(self) -> None:
        """Stop the worker processes and the sandbox; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._threads.shutdown(wait=False, cancel_futures=True)
        if self._math is not None:
            self._math.close()
        if self._sandbox is not None:
            self._sandbox.close()
        if self._reward_fn is not None:
            self._reward_fn.close()

    # -- internals -------------------------------------------------------------------------------------

    def _math_pool(self) -> ProcessPool:
        with self._start_lock:
            if self._math is None:
                preload = ["actors.verifier.math_check", "sandbox.math_answer", "math_verify"]
                if self._check_fn.__module__ not in (*preload, "__main__"):
                    preload.append(self._check_fn.__module__)  # imported before the deadline starts
                self._math = ProcessPool(self.cfg.processes_per_worker, context=self._context, preload=preload,
                                         memory_mb=self._math_memory_mb, warmup=warm_up)
            return self._math

    def _sandbox_pool(self) -> Any:
        with self._start_lock:
            if self._sandbox is None:
                self._sandbox = start_sandbox(self.cfg)
            return self._sandbox

    def _verdicts(self, task: SelectionTask, indices: list) -> tuple:
        """({idx: Verdict}, {idx: seconds of a verification run now}) for the chosen candidates `indices`."""
        checks = {(task.prompt_id, idx): Check(task.domain, task.candidate_answers[idx], task.reference,
                                                task.entry_point, f"{task.prompt_id}#{idx}") for idx in indices}
        verdicts, seconds = self._run_checks(checks)
        return ({key[1]: v for key, v in verdicts.items()}, {key[1]: v for key, v in seconds.items()})

    def _run_checks(self, checks: dict) -> tuple:
        """({key: Verdict}, {key: seconds of a verification run now}) for `checks` ({cache key: Check}); cached
        verdicts are reused."""
        verdicts, seconds = {}, {}
        for key in checks:
            cached = self._cache_get(key)
            if cached is not None:
                verdicts[key] = cached
        missing = [key for key in checks if key not in verdicts]
        domains = {checks[key].domain for key in missing}
        if "math" in domains:  # start-up errors (SandboxUnavailable, ...) propagate here
            self._math_pool()
        if "code" in domains:
            self._sandbox_pool()
        pending = {key: self._submit(checks[key]) for key in missing}
        for key, future in pending.items():
            verdicts[key], seconds[key] = future.result()
            self._record(key, f"{checks[key].task_id} ({checks[key].domain})", verdicts[key], seconds[key])
        return verdicts, seconds

    def _submit(self, check: "Check") -> "Future":
        return self._submit_call(self._verify, check)

    def _submit_call(self, fn: Callable, *args: Any) -> "Future":
        self._slots.acquire()  # the bounded queue: blocks while processes + queue_size are pending
        future = self._threads.submit(fn, *args)
        future.add_done_callback(lambda _: self._slots.release())
        return future

    def _verify(self, check: "Check") -> tuple:
        """(Verdict, seconds) for one answer or program; never raises."""
        start = time.monotonic()
        try:
            if check.domain == "math":
                outcome = self._math_pool().run(
                    run_check, (self._check_fn, check.answer, check.reference, self._math_timeout),
                    self.cfg.timeout_s)
                if outcome.status == OK:
                    return outcome.value, outcome.seconds
                return Verdict(0.0, outcome.status, str(outcome.value)), outcome.seconds
            verdict, status = check_program(self._sandbox_pool(), check, self.cfg.timeout_s)
            with self._lock:
                self._counts[f"code_status/{status}"] += 1
            return verdict, time.monotonic() - start
        except Exception as e:  # noqa: BLE001 -- reported as an "error" verdict and counted
            return Verdict(0.0, ERROR, f"{type(e).__name__}: {e}"), time.monotonic() - start

    def _record(self, key: Optional[tuple], what: str, verdict: Verdict, seconds: float) -> None:
        """Count one verification run for `what` (logged when not ok); an ok verdict is cached under `key`
        (None: not cached)."""
        status = {OK: "ok", TIMEOUT: "timeouts"}.get(verdict.status, "errors")
        with self._lock:
            self._counts["verified"] += 1
            self._counts[status] += 1
            self._seconds_sum += seconds
            self._seconds_max = max(self._seconds_max, seconds)
            if key is not None and verdict.status in _CACHED_STATUSES:
                self._cache[key] = verdict
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        if verdict.status != OK:
            log.warning("verifier %s: %s after %.2fs: %s", verdict.status, what, seconds, verdict.detail)

    def _cache_get(self, key: tuple) -> Optional[Verdict]:
        with self._lock:
            verdict = self._cache.get(key)
            if verdict is not None:
                self._cache.move_to_end(key)
            return verdict

    def _reward(self, task: SelectionTask, judgment: Any, verdict: Verdict) -> float:
        if verdict.status != OK:
            return 0.0
        scores = [0.0] * task.num_candidates
        scores[judgment.index] = verdict.score
        return selection_reward(judgment, scores, self.reward_mode)


__all__ = ["VerifierPool", "start_sandbox", "check_program", "DOMAINS", "PARSE_FAILURE", "NO_ANSWER"]

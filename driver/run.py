"""One training run's state and the operations the loop in `driver.train` calls, in the order it decides.

`Run` owns the Ray session, the actor handles (created by `cluster.placement`), the prompt stream, the
metrics log and the checkpoints. It knows *how* to do each operation (the learner step, the weight sync,
evaluate, checkpoint, resume); `driver.train.train_loop` alone knows *when*.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np

from actors.faults import maybe_crash
from core.algo.genselect import PromptStyle, write_prompt_style
from core.config import to_yaml
from driver import checkpoint as ckpt
from driver.report import MetricsLog, Progress, plot_curves, summarize

log = logging.getLogger("genselect.run")


def unseen_tasks(tasks: list, seen_problems) -> list:
    """The tasks whose problem computes none of `seen_problems` (compared by `procedural.problem_key`, so the
    same expression under another template counts as seen)."""
    from driver.data.procedural import problem_key

    seen = {problem_key(p) for p in seen_problems}
    return [t for t in tasks if problem_key(t.problem) not in seen]


def on_schedule(step: int, steps: int, every: int) -> bool:
    """Whether `step` is the last one or a multiple of `every` (0: the last only)."""
    return step == steps or (every > 0 and step % every == 0)


def nocue_due(step: int, steps: int, every: int, at_start: bool = True) -> bool:
    """Whether the evaluation at `step` also reads the no-cue held-out set: at the start (unless not `at_start`),
    at the end, and at multiples of `every` (0: start and end only)."""
    return at_start if step == 0 else on_schedule(step, steps, every)


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


class Run:
    def __init__(self, cfg):
        self.cfg = cfg
        self.run_dir = Path(cfg.run_dir)
        self.version = 0
        self.handles = None
        self.started_at = time.time()
        self._anchor_context = None  # (tokenizer, held-out problem keys): stage 3b's, built at its first step

    # -- lifecycle ------------------------------------------------------------------------------------
    def __enter__(self) -> "Run":
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._log_to_file()
        try:
            self._prepare()
            (self.run_dir / "config.yaml").write_text(to_yaml(self.cfg))
            self._start_ray()
            self._launch()
        except BaseException:  # `with` calls no __exit__ when __enter__ raises: release what was taken
            self.__exit__(None, None, None)
            raise
        return self

    def _prepare(self) -> None:
        """Before any actor starts: the dataset and the model folder (`self.prepared`), the training tasks and
        the held-out ones. A selector's: GenSelect prompts (driver/prepare.py); driver/generator_run.py
        overrides it for `task=generator`."""
        from driver.data.dataset import load_dataset
        from driver.prepare import prepare

        # the warm-start is not evaluated here: the step-0 evaluation reads the same weights through vLLM (~20 s saved)
        self.prepared = prepare(self.cfg.data, self.cfg.model, eval_prompts=0, rollout_cfg=self.cfg.rollout)
        data = load_dataset(self.prepared.dataset_dir)
        self.train_tasks, self.heldout = data.train, data.heldout
        self.eval_tasks = self.heldout[: self.cfg.eval_prompts] if self.cfg.eval_prompts else self.heldout
        self.nocue_tasks = self._nocue_heldout()

    def _nocue_heldout(self) -> list:
        """When the training data carries the hedge cue: held-out prompts built without it, from problems of
        another seed (never seen in training or pretraining), tokenized by the same model. Else []."""
        import dataclasses

        from driver.data.dataset import load_dataset
        from driver.models.pretrain import pretraining_problems
        from driver.prepare import prepare

        d = self.cfg.data
        if not self.cfg.eval_without_cue or not (d.hedge_wrong_rate or d.hedge_correct_rate) or d.source == "model":
            return []
        data_cfg = dataclasses.replace(d, hedge_wrong_rate=0.0, hedge_correct_rate=0.0, seed=d.seed + 1,
                                       num_problems=min(d.num_problems, 1000), heldout_fraction=0.5)
        model_cfg = dataclasses.replace(self.cfg.model, name=str(self.prepared.model_dir))
        built = prepare(data_cfg, model_cfg, with_model=False)
        seen = {t.problem for t in self.train_tasks} | pretraining_problems(self.cfg.model.pretrain)
        heldout = unseen_tasks(load_dataset(built.dataset_dir).heldout, seen)
        return heldout[: self.cfg.eval_prompts] if self.cfg.eval_prompts else heldout

    def _log_to_file(self) -> None:
        """The console shows the progress bar, evaluations, warnings and the summary; the driver's INFO log
        goes to `run_dir/train.log`, and the actors' output (vLLM, DeepSpeed, Ray: repeated every step) to
        `run_dir/logs/` when the run ends (Ray's session folder holds it meanwhile; the path is logged)."""
        handler = logging.FileHandler(self.run_dir / "train.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler.setLevel(logging.INFO)
        root = logging.getLogger()
        for existing in root.handlers:
            if isinstance(existing, logging.StreamHandler) and not isinstance(existing, logging.FileHandler):
                existing.setLevel(max(existing.level, logging.WARNING))
        root.addHandler(handler)
        root.setLevel(min(root.level or logging.INFO, logging.INFO))
        self._file_handler = handler

    def _keep_actor_logs(self) -> None:
        """Copy this Ray session's worker logs into run_dir/logs/ (local instances only)."""
        import shutil

        session = getattr(self, "_session_dir", None)
        if not session or self.cfg.cluster.address or os.environ.get("RAY_ADDRESS"):
            return
        out = self.run_dir / "logs"
        out.mkdir(exist_ok=True)
        for f in Path(session, "logs").glob("worker-*"):
            if f.stat().st_size:
                shutil.copy(f, out / f.name)

    def __exit__(self, exc_type, exc, tb) -> None:
        import ray

        if getattr(self, "progress", None):
            self.progress.close()
        if getattr(self, "_serving", False):
            from driver.serve import stop

            stop(self.cfg.serve)
        if self.handles is not None:
            from cluster.launch import shutdown

            shutdown(self.handles)
        self._keep_actor_logs()
        if ray.is_initialized():
            ray.shutdown()
        if getattr(self, "_file_handler", None):
            logging.getLogger().removeHandler(self._file_handler)
            self._file_handler.close()

    def _start_ray(self) -> None:
        import ray

        from core.env import default_env, job_env_var_names, quiet_local_ray_auth_notice

        cluster = self.cfg.cluster
        job_owned = job_env_var_names()
        env = {"env_vars": {k: v for k, v in default_env().items() if k not in job_owned}}
        address = cluster.address or os.environ.get("RAY_ADDRESS", "")  # set inside `ray job submit`
        if address:
            ray.init(address=address, runtime_env=env, log_to_driver=False)
        else:
            # "local": always a fresh instance, never one found on this machine (`ray start`, stale files)
            quiet_local_ray_auth_notice()
            ray.init(address="local", num_cpus=cluster.num_cpus, include_dashboard=False, runtime_env=env,
                     log_to_driver=False)
        from ray._private.worker import global_worker

        self._session_dir = global_worker.node.get_session_dir_path() if global_worker.node else None
        log.info("Ray session %s; actor logs: %s/logs (copied to %s/logs at the end)", address or "local",
                 self._session_dir, self.run_dir)

    def _launch(self) -> None:
        from actors.weight_sync import WeightSyncBroadcaster
        from cluster.launch import launch
        from core.env import default_env
        from driver.collect import RolloutCollector

        self.handles = launch(self.cfg, str(self.prepared.model_dir), default_env(),
                              domains=tuple(sorted({t.domain for t in self.train_tasks})))
        self._wait_until_started()
        board = self._start_serving() if self.cfg.serve.live else None
        self.broadcaster = WeightSyncBroadcaster(self.cfg.weight_sync, self.handles.learners,
                                                 self.handles.rollouts, board=board)
        self.stream = self._curriculum()
        from core.deadlines import collect_deadline_s

        self.collector = RolloutCollector(self.handles, self._tasks_by_id(), self.stream,
                                          self.cfg.rollout, self._restore_worker,
                                          deadline_s=lambda prompts: collect_deadline_s(self.cfg, prompts))

    def _start_serving(self):
        """serve.live: the selection service (driver/serve.py) beside the trainer, on the starting weights;
        returns its weight board, to which every weight sync publishes the new version."""
        import ray

        from actors.weight_board import BOARD_NAMESPACE
        from driver.serve import start

        s = self.cfg.serve
        free = ray.available_resources().get("CPU", 0.0)
        if s.num_cpus * max(1, s.min_replicas) > free + 1e-9:
            raise RunFailed(f"serve.live: a serving replica needs serve.num_cpus={s.num_cpus} CPU but {free:g} are "
                            f"free beside the training actors; set serve.num_cpus=0 (share cores) or give Ray more "
                            f"(cluster.num_cpus)")
        _, settings = start(str(self.prepared.model_dir), s, self.cfg, policy_version=self.version)
        self._serving = True
        url = f"http://{s.host}:{s.port}"
        log.info("serving the policy live at %s (app %s)", url, s.app_name)
        print(f"[serve] the selector being trained answers at {url}/v1/select (policy_version in every answer)",
              file=sys.stderr, flush=True)
        return ray.get_actor(settings.board, namespace=BOARD_NAMESPACE)

    def _tasks_by_id(self) -> dict:
        """Every training task by prompt id, and with `curriculum.mirror` each one's reversed twin."""
        from core.algo.genselect import mirrored_task

        tasks = {t.prompt_id: t for t in self.train_tasks}
        if self.cfg.curriculum.mirror:
            style = PromptStyle.of(self.cfg.data)
            tasks.update({m.prompt_id: m for m in (mirrored_task(t, style) for t in self.train_tasks)})
        return tasks

    def _curriculum(self, state: dict | None = None):
        """The prompt stream: one stage (every prompt) unless `curriculum.enabled` (driver/curriculum.py)."""
        from driver.curriculum import CurriculumStream, curriculum_caps

        sizes = {t.prompt_id: t.num_candidates for t in self.train_tasks}
        cur = self.cfg.curriculum
        args = (list(sizes), sizes, curriculum_caps(cur, max(sizes.values())))
        kwargs = {"advance_gain": cur.advance_gain, "window": cur.window, "seed": self.cfg.seed, "mirror": cur.mirror}
        return CurriculumStream.restore(*args, state, **kwargs) if state else CurriculumStream(*args, **kwargs)

    def _wait_until_started(self) -> None:
        """Block until every actor answers (engines loaded, learner process group formed), so that start-up
        time never eats into the deadlines of later calls; fail clearly past cluster.actor_start_timeout_s."""
        from actors.calls import answer_times

        started = time.time()
        calls = {h.health.remote(): f"rollout {i}" for i, h in enumerate(self.handles.rollouts)}
        calls.update({h.health.remote(): f"verifier {i}" for i, h in enumerate(self.handles.verifiers)})
        calls.update({h.weight_version.remote(): f"learner {i}" for i, h in enumerate(self.handles.learners)})
        deadline = started + self.cfg.cluster.actor_start_timeout_s
        answered, _ = answer_times(list(calls), deadline, clock=time.time)  # errors surface in _get below
        self._get(list(calls), max(1.0, deadline - time.time()), "actor start-up")
        log.info("%d actors started in %.0f s (%s)", len(calls), time.time() - started,
                 ", ".join(f"{calls[ref]} {at - started:.0f} s" for ref, at in answered.items()))

    def start(self) -> int:
        """Resume if asked and possible; evaluate the starting checkpoint; return the first step to run."""
        self.metrics = MetricsLog(self.run_dir)
        step = 0
        folder = ckpt.resolve_resume(self.cfg.resume, self.run_dir)
        if folder is not None:
            step = self._resume(folder)
        else:
            self.metrics.truncate_after(0)
            (self.run_dir / "consumed.jsonl").write_text("")
        self.progress = Progress(self.cfg.steps, step, self.cfg.progress)
        if step == 0:
            self.evaluate(0)
        return step

    def _resume(self, folder: Path) -> int:
        state = ckpt.load_driver_state(folder)
        ckpt.check_compatible(folder, self.cfg, list(self.collector.tasks))  # with their mirror twins, if any
        self._get([l.load_checkpoint.remote(str(folder / "learner")) for l in self.handles.learners],
                  self.cfg.learner.step_timeout_s, "learner checkpoint load")
        self.version = state["version"]
        ckpt.set_rng_state(state["rng"])
        try:
            self.stream = self._curriculum(state["stream"])
        except ValueError as err:
            raise RunFailed(f"cannot resume from {folder}: {err}") from None
        self.collector.stream = self.stream
        self.sync_weights(self.version)
        self.metrics.truncate_after(state["step"])
        _truncate_jsonl(self.run_dir / "consumed.jsonl", state["step"])
        message = (f"resumed from {folder} at step {state['step']} (policy version {self.version}, "
                   f"{sum(len(s['reissue']) for s in state['stream']['streams'].values())} prompts re-issued)")
        log.info(message)
        print(f"[resume] {message}", file=sys.stderr, flush=True)  # the user must see it, not only train.log
        return state["step"]

    # -- one step -------------------------------------------------------------------------------------
    def learner_step(self, batch, step: int) -> tuple:
        """Stage 5: one DAPO step of every learner rank on its shard of `batch` (driver.batching.Batch):
        (metrics, seconds); the metrics are the batch's and rank 0's, the latter prefixed `learner/`."""
        started = time.time()
        results = self._get([l.train_step.remote(shard, batch.global_num_tokens, step)
                             for l, shard in zip(self.handles.learners, batch.shards)],
                            self.cfg.learner.step_timeout_s, f"learner step {step}")
        metrics = {**batch.stats, **{f"learner/{k}": v for k, v in results[0].items()
                                     if isinstance(v, (int, float))}}
        return metrics, time.time() - started

    def with_anchor_rows(self, sequences, groups: list, step: int):
        """Stage 3b (`algorithm.anchor_corpus_rows` > 0): `sequences` (batching.Sequences) with that many
        anchor-only worked solutions of fresh problems added after the step's prompts (driver/anchor_rows.py);
        unchanged when off."""
        count = self.cfg.algorithm.anchor_corpus_rows
        if count <= 0:
            return sequences
        import dataclasses

        from driver.anchor_rows import corpus_anchor_sequences
        from driver.data.procedural import problem_key

        if self._anchor_context is None:  # the model's tokenizer and the held-out problems, once per run
            from transformers import AutoTokenizer

            heldout = {problem_key(t.problem) for t in list(self.heldout) + list(self.nocue_tasks)}
            self._anchor_context = (AutoTokenizer.from_pretrained(str(self.prepared.model_dir)), frozenset(heldout))
        tokenizer, heldout = self._anchor_context
        rows = corpus_anchor_sequences(groups, tokenizer, count, self.cfg.seed, step, heldout)
        stats = {**sequences.stats, "batch/anchor_rows": len(rows),
                 "batch/anchor_tokens": sum(s.num_anchor_tokens for s in sequences.sequences + rows)}
        return dataclasses.replace(sequences, sequences=sequences.sequences + rows, stats=stats)

    def policy_logprobs(self, sequences: list) -> list:
        """Stage 3, off-policy estimators only (`algorithm.maxk_off_policy`): per-token log-probs of each
        response under the learner's current weights (the policy this step trains). Rank 0 computes them;
        under ZeRO-3 with several ranks the forward pass is collective, so every rank runs it."""
        ranks = self.handles.learners
        if not (self.cfg.learner.zero_stage == 3 and len(ranks) > 1):
            ranks = ranks[:1]
        results = self._get([l.compute_logprobs.remote(sequences) for l in ranks],
                            self.cfg.learner.step_timeout_s, "learner log-probs (off-policy max@k)")
        return results[0]

    def sync_weights(self, version: int, attempts: int = 3) -> dict:
        """Stage 6 (also on resume and after a rollout restart): push the learner's weights into every engine
        as `version`. A rollout actor that died meanwhile is being restarted by Ray: wait until every engine
        answers again, then retry the whole sync (the restarted engine gets the current weights that way)."""
        for attempt in range(1, attempts + 1):
            try:
                stats = self.broadcaster.sync(version)
                break
            except Exception as err:
                if attempt == attempts:
                    raise RunFailed(f"weight sync to version {version} failed: {err}") from err
                self.collector.counters["rollout/sync_retries"] += 1
                log.warning("weight sync to version %d failed (%s); waiting for the rollout actors, then "
                            "retrying", version, str(err).splitlines()[0][:200])
                self._wait_for_rollouts()
        self.version = version
        return stats

    def _wait_for_rollouts(self, timeout_s: float = 300.0) -> None:
        """Wait until every rollout actor answers again (Ray restarts a dead one, on another node if its own
        died). Stop early, naming the missing resources, when a restarted actor cannot be placed: its node died
        and no alive node can take its bundle for cluster.placement_timeout_s (cluster/recovery.py)."""
        from cluster.recovery import LostPlacement, wait_for_actors

        try:
            wait_for_actors(self.handles.rollouts, self._placement_watch(), timeout_s)
        except LostPlacement as err:
            raise RunFailed(f"{err}. Once a node that can take it is back: {self._how_to_continue()}") from None
        except TimeoutError:
            raise RunFailed(f"a rollout actor did not come back within {timeout_s:g} s; "
                            f"{self._how_to_continue()}") from None

    def _placement_watch(self):
        """The run's PlacementWatch (cluster/recovery.py), made once."""
        if getattr(self, "_watch", None) is None:
            from cluster.placement import plan
            from cluster.recovery import PlacementWatch

            c = self.cfg
            self._watch = PlacementWatch(plan(c.learner, c.rollout, c.verifier, c.cluster),
                                         self.handles.placement_group, c.cluster.placement_timeout_s)
        return self._watch

    def _how_to_continue(self) -> str:
        last = ckpt.latest(self.run_dir)
        where = f"the last checkpoint is {last}" if last else "no checkpoint was written yet"
        return f"{where}; rerun the same command (resume=auto) to continue"

    def _restore_worker(self, worker: int) -> None:
        """A rollout actor died or hung: wait for Ray to restart it, then push the current weights."""
        self._wait_for_rollouts()
        self.sync_weights(self.version)

    def record_step(self, step: int, collected, metrics: dict, times: dict) -> None:
        versions = [g.policy_version for g in collected.groups]
        tokens = metrics.get("batch/response_tokens", 0)
        train_s, step_s = times["time/train_s"], times["time/step_s"]
        values = {**metrics, **collected.stats, **times,
                  "staleness/mean": float(np.mean([self.version - 1 - v for v in versions])) if versions else 0.0,
                  "time/generate_s": collected.stats.get("collect/generate_s", 0.0),
                  "time/verify_s": collected.stats.get("collect/verify_s", 0.0),
                  "time/idle_s": max(0.0, step_s - train_s - times["time/sync_s"]),
                  "throughput/tokens_per_s": tokens / max(step_s, 1e-9),
                  "policy_version": self.version}
        values.update({k: v for k, v in self.collector.counters.items()})
        values["batch/skipped_update"] = int(not metrics)
        values["curriculum/max_candidates"] = self.stream.cap
        if self.stream.observe(collected.stats.get("curriculum/gain")):
            self.progress.write(f"[curriculum step {step + 1}] prompts with up to {self.stream.cap} candidates "
                                f"from now on")
        from actors.verifier import merge_metrics

        per_actor = self._get([v.metrics.remote() for v in self.handles.verifiers], 60, "verifier metrics")
        values.update({f"verifier/{k}": v for k, v in merge_metrics(per_actor).items()})
        self.metrics.log(step + 1, "train", values)
        with open(self.run_dir / "consumed.jsonl", "a") as f:
            f.write(json.dumps({"step": step + 1, "trained": [g.task.prompt_id for g in collected.groups],
                                "filtered": collected.filtered_ids, "stale": collected.stale_ids}) + "\n")
        self.progress.update(values)

    # -- evaluation, checkpoints, the end -------------------------------------------------------------
    def should_evaluate(self, step: int) -> bool:
        return on_schedule(step, self.cfg.steps, self.cfg.eval_every)

    def evaluate(self, step: int) -> dict:
        """Held-out accuracy (greedy and sampled, by N and by slip kind); at the start (`eval_without_cue_at_start`),
        the end and every `eval_without_cue_every` steps also on the held-out set built without the hedge cue, when
        the training data has one."""
        result = self._evaluate_on(self.eval_tasks, self.cfg.eval_samples, step)
        if self.nocue_tasks and nocue_due(step, self.cfg.steps, self.cfg.eval_without_cue_every,
                                          self.cfg.eval_without_cue_at_start):
            nocue = self._evaluate_on(self.nocue_tasks, 0, step)
            result.update({f"nocue/{k}": v for k, v in nocue.items() if isinstance(v, (int, float))})
        self.metrics.log(step, "eval", result)
        if hasattr(self, "progress"):
            self.progress.accuracy, self.progress.sampled = result["genselect"], result.get("sampled") or float("nan")
            sampled = f"  sampled {result['sampled']:.3f}" if result.get("sampled") is not None else ""
            by_n = " ".join(f"{n}:{r['genselect']:.2f}" for n, r in result["by_size"].items())
            self.progress.write(f"[eval step {step}] GenSelect@N {result['genselect']:.3f} "
                                f"[{result['genselect_lo']:.3f}, {result['genselect_hi']:.3f}]{sampled}  majority@N "
                                f"{result['majority']:.3f}  random@N {result['random']:.3f}  parse failures "
                                f"{result['parse_failure_rate']:.3f}  by N {by_n}")
            if "own_answer/solved" in result:  # a solve-then-point selector: its solving apart from its pointing
                self.progress.write(f"[eval step {step}, own answer] solved {result['own_answer/solved']:.3f}  stated "
                                    f"by a candidate {result['own_answer/stated']:.3f}  index follows it "
                                    f"{result['own_answer/follows']:.3f}  accuracy if it always did "
                                    f"{result['own_answer/follow_ceiling']:.3f}  accuracy where none states it "
                                    f"{result['own_answer/unstated_accuracy']:.3f}")
            if "knockout/genselect" in result:
                by_n = " ".join(f"{n}:{v:.2f}" for n, v in result["knockout/by_size"].items())
                orders = ", both orders" if self.cfg.eval_knockout_both_orders else ""
                self.progress.write(f"[eval step {step}, knockout of {self.cfg.eval_knockout_window}{orders}] GenSelect@N "
                                    f"{result['knockout/genselect']:.3f} [{result['knockout/genselect_lo']:.3f}, "
                                    f"{result['knockout/genselect_hi']:.3f}]  by N {by_n}")
            if "round_robin/genselect" in result:
                by_n = " ".join(f"{n}:{v:.2f}" for n, v in result["round_robin/by_size"].items())
                self.progress.write(f"[eval step {step}, round robin of pairs by {self.cfg.eval_round_robin}] "
                                    f"GenSelect@N {result['round_robin/genselect']:.3f} "
                                    f"[{result['round_robin/genselect_lo']:.3f}, {result['round_robin/genselect_hi']:.3f}]"
                                    f"  by N {by_n}")
            if "nocue/genselect" in result:
                self.progress.write(f"[eval step {step}, no-cue held-out set] GenSelect@N "
                                    f"{result['nocue/genselect']:.3f} [{result['nocue/genselect_lo']:.3f}, "
                                    f"{result['nocue/genselect_hi']:.3f}]  majority@N {result['nocue/majority']:.3f}"
                                    f"  random@N {result['nocue/random']:.3f}"
                                    + (f"  knockout {result['nocue/knockout/genselect']:.3f} "
                                       f"({result['nocue/knockout/over_majority']:+.3f} [{result['nocue/knockout/over_majority_lo']:+.3f}, "
                                       f"{result['nocue/knockout/over_majority_hi']:+.3f}] over majority@N)"
                                       if "nocue/knockout/genselect" in result else "")
                                    + (f"  round robin {result['nocue/round_robin/genselect']:.3f} "
                                       f"({result['nocue/round_robin/over_majority']:+.3f} [{result['nocue/round_robin/over_majority_lo']:+.3f}, "
                                       f"{result['nocue/round_robin/over_majority_hi']:+.3f}] over majority@N)"
                                       if "nocue/round_robin/genselect" in result else ""))
        return result

    def _warn(self, message: str) -> None:
        """A warning the user should see now: the console (above the progress bar) and train.log."""
        log.warning(message)
        self.progress.write(f"[warning] {message}")

    def _evaluate_on(self, tasks: list, samples: int, step: int) -> dict:
        """One held-out set's reading: the whole prompts (greedy, and `samples` sampled responses each), then the
        knockout and the round robin when configured, one after the other (run at once they took as long: the
        engine is busy either way). `eval_s`: its wall time."""
        from driver.evaluate import by_size, by_slip_kind, selection_metrics

        started = time.time()
        choices, sampled, own_answer = self._choose_whole_prompts(tasks, samples, step)
        result = selection_metrics(tasks, choices, seed=self.cfg.seed)
        result.update({"sampled": sampled, "by_size": by_size(tasks, choices)})
        result.update({f"own_answer/{k}": v for k, v in own_answer.items()})
        if self.cfg.eval_knockout_window:
            result.update(self._knockout_metrics(tasks, step))
        if self.cfg.eval_round_robin != "none":
            result.update(self._round_robin_metrics(tasks, step))
        result["eval_s"] = time.time() - started
        if self.cfg.data.source == "procedural_math":  # its mistakes can be read back from the text
            result["by_slip_kind"] = by_slip_kind(tasks, choices)
        return result

    def _read_on_engine(self, call, what: str):
        """`call()` (an evaluation procedure on rollout actor 0), again after its deadline while it times out
        (`retry_on_timeout`) and once after the engine died and Ray restarted it (given the current weights); any
        other error, or a second death, is a RunFailed naming `what`."""
        from driver.evaluate import retry_on_timeout

        from ray.exceptions import RayActorError

        for attempt in (1, 2):
            try:
                return retry_on_timeout(call, what, self._warn)
            except RayActorError as err:  # the engine died (or its node): once Ray restarted it, read again
                if attempt == 2:
                    raise RunFailed(f"{what} failed ({type(err).__name__}: {err})") from err
                log.warning("%s: rollout actor 0 failed (%s); waiting for its restart", what, type(err).__name__)
                self._restore_worker(0)
            except Exception as err:
                raise RunFailed(f"{what} failed ({type(err).__name__}: {err})") from err

    def _choose_whole_prompts(self, tasks: list, samples: int, step: int) -> tuple:
        """(greedy choices, sampled accuracy or None, own-answer breakdown) of `tasks` read whole by rollout actor 0
        (`driver.evaluate.choose_remote`)."""
        from core.deadlines import generate_deadline_s
        from driver.evaluate import choose_remote

        deadline = generate_deadline_s(self.cfg.rollout, self.cfg.data.max_prompt_tokens, len(tasks) * max(1, samples))
        return self._read_on_engine(lambda: choose_remote(self.handles.rollouts[0], tasks, deadline, samples),
                                    f"evaluation at step {step}")

    def _knockout_metrics(self, tasks: list, step: int) -> dict:
        """`knockout/*`: the same tasks selected by a knockout tournament (driver.evaluate.choose_knockout)."""
        from core.algo.knockout import rounds_needed
        from core.deadlines import generate_deadline_s
        from driver.evaluate import choose_knockout_remote

        # each round is one generate call of at most N / 2 sub-prompts per task (twice that read in both orders),
        # each shorter than the task's prompt
        window, n, both = self.cfg.eval_knockout_window, self.cfg.data.max_candidates, self.cfg.eval_knockout_both_orders
        deadline = rounds_needed(n, window) * generate_deadline_s(
            self.cfg.rollout, self.cfg.data.max_prompt_tokens, len(tasks) * max(1, n // 2) * (2 if both else 1))
        choices = self._read_on_engine(
            lambda: choose_knockout_remote(self.handles.rollouts[0], tasks, window, PromptStyle.of(self.cfg.data),
                                           deadline, both_orders=both),
            f"knockout evaluation at step {step}")
        return self._procedure_metrics("knockout", tasks, choices, ("parse_failure_rate", "over_majority",
                                                                   "over_majority_lo", "over_majority_hi"))

    def _round_robin_metrics(self, tasks: list, step: int) -> dict:
        """`round_robin/*`: the same tasks selected by a round robin of pairs read in both orders
        (driver.evaluate.choose_round_robin; wins pooled by final answer with eval_round_robin=answer)."""
        from core.deadlines import generate_deadline_s
        from driver.evaluate import choose_round_robin_remote

        n = self.cfg.data.max_candidates  # one batch of at most N (N - 1) pair prompts per task
        deadline = generate_deadline_s(self.cfg.rollout, self.cfg.data.max_prompt_tokens, len(tasks) * n * (n - 1))
        choices = self._read_on_engine(
            lambda: choose_round_robin_remote(self.handles.rollouts[0], tasks, PromptStyle.of(self.cfg.data),
                                              deadline, by_answer=self.cfg.eval_round_robin == "answer"),
            f"round-robin evaluation at step {step}")
        return self._procedure_metrics("round_robin", tasks, choices,
                                       ("over_majority", "over_majority_lo", "over_majority_hi"))

    def _procedure_metrics(self, prefix: str, tasks: list, choices: list, extra: tuple) -> dict:
        """`{prefix}/genselect` with its CI, the `extra` metrics and `{prefix}/by_size` of one selection procedure."""
        from driver.evaluate import by_size, selection_metrics

        metrics = selection_metrics(tasks, choices, seed=self.cfg.seed)
        out = {f"{prefix}/{k}": metrics[k] for k in ("genselect", "genselect_lo", "genselect_hi") + extra}
        out[f"{prefix}/by_size"] = {n: r["genselect"] for n, r in by_size(tasks, choices).items()}
        return out

    def checkpoint(self, step: int) -> Path:
        tmp = ckpt.begin(self.run_dir, step)
        self._get([l.save_checkpoint.remote(str(tmp / "learner"), {"step": step, "version": self.version})
                   for l in self.handles.learners], self.cfg.learner.step_timeout_s, "checkpoint save")
        state = {"step": step, "version": self.version, "rng": ckpt.rng_state(),
                 "stream": self.stream.state(self.collector.unfinished_ids()), "time": time.time()}
        folder = ckpt.commit(self.run_dir, tmp, state, self.cfg.keep_checkpoints)
        maybe_crash("driver_checkpoint", kill_group=True)
        return folder

    def finish(self) -> dict:
        export = self.run_dir / "export"
        self._get([learner.export_hf.remote(str(export)) for learner in self.handles.learners], 600, "export")
        write_prompt_style(export, PromptStyle.of(self.cfg.data))  # serving renders prompts the same way
        plot_curves(self.metrics, self.run_dir / "curves.png")
        summary = summarize(self.metrics, time.time() - self.started_at, self.cfg.steps)
        summary["dataset"] = str(self.prepared.dataset_dir)
        summary["start_model"] = str(self.prepared.model_dir)  # the warm-started model RL began from
        summary["export"] = str(export)
        summary["policy_version"] = self.version  # the exported weights' version (driver/serve.py reports it)
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
        self.metrics.close()
        return summary

    def _get(self, refs: list, timeout: float, what: str) -> list:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        try:
            return ray.get(refs, timeout=timeout)
        except (RayActorError, RayTaskError, GetTimeoutError) as err:
            lost = self._placement_watch().unplaceable() if self.handles is not None else []
            why = f"; {'; '.join(lost)}" if lost else ""  # an actor's node died and took its resources along
            raise RunFailed(f"{what} failed ({error_summary(err)}){why}; "
                            f"{self._how_to_continue()}") from err


def _truncate_jsonl(path: Path, step: int) -> None:
    if path.exists():
        rows = [l for l in path.read_text().splitlines() if l.strip() and json.loads(l)["step"] <= step]
        path.write_text("".join(r + "\n" for r in rows))


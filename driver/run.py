"""One training run's lifecycle: start, resume, record, evaluate, checkpoint, finish.

`Run` owns the Ray session, the actors (started by `cluster.launch`, held with the weight sync and the policy version
by `self.fleet`, driver/fleet.py), the prompt stream, the metrics log and the checkpoints. The stages of a step live
in driver/step.py; `driver.train.train_loop` calls them, and this object's record, evaluate and
checkpoint between steps. Nothing a stage calls comes back here.
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
from core.algo.genselect import write_prompt_style
from core.config import to_yaml
from core.rewards import function_path
from driver import checkpoint as ckpt
from driver.data.dataset import prompt_style
from driver.failure import RunFailed
from driver.heldout import HeldOutReader, eval_lines, on_schedule
from driver.report import MetricsLog, Progress, plot_curves, summarize

log = logging.getLogger("genselect.run")


class Run:
    def __init__(self, cfg):
        self.cfg = cfg
        self.run_dir = Path(cfg.run_dir)
        self.handles = None
        self.fleet = None
        self.started_at = time.time()

    # -- lifecycle ------------------------------------------------------------------------------------
    def __enter__(self) -> "Run":
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._log_to_file()
        try:
            self._prepare()
            (self.run_dir / "config.yaml").write_text(to_yaml(self.cfg))
            self.resume_from = ckpt.resolve_resume(self.cfg.resume, self.run_dir)
            self.metrics = self._metrics_log(resumed=self.resume_from is not None)  # a backend that fails, fails now
            self._start_ray()
            self._launch()
        except BaseException:  # `with` calls no __exit__ when __enter__ raises: release what was taken
            self.__exit__(*sys.exc_info())
            raise
        return self

    def _prepare(self) -> None:
        """Before any actor starts: the dataset and the model folder (`self.prepared`), the training tasks and
        the held-out ones. A selector's: GenSelect prompts (driver/prepare.py); driver/generator_run.py
        overrides it for `task=generator`."""
        from driver.data.dataset import load_dataset
        from driver.data.problem import DataError
        from driver.data.user_labels import check_rewardable
        from driver.eval_sets import missing_test_prompts, nocue_tasks, ood_tasks, split_heldout
        from driver.prepare import prepare

        # the warm-start is not evaluated here: the step-0 evaluation reads the same weights through vLLM (~20 s saved)
        self.prepared = prepare(self.cfg.data, self.cfg.model, eval_prompts=0, rollout_cfg=self.cfg.rollout,
                                tiny_cfg=self.cfg.tiny)
        data = load_dataset(self.prepared.dataset_dir)
        self.train_tasks, self.heldout = data.train, data.heldout
        check_rewardable(self.train_tasks, function_path(self.cfg.verifier.reward))  # before any actor starts
        self.eval_tasks, self.test_tasks = split_heldout(self.heldout, self.cfg.eval_prompts,
                                                         self.cfg.eval_test_prompts)
        shortfall = missing_test_prompts(self.eval_tasks, self.test_tasks, self.cfg.eval_test_prompts)
        if shortfall:
            raise DataError(shortfall)
        self.nocue_tasks = nocue_tasks(self.cfg, self.eval_tasks, self.test_tasks)
        self.ood_tasks = ood_tasks(self.cfg)

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
        if getattr(self, "metrics", None) is not None:
            self.metrics.close(failed=exc_type is not None)  # a finished run closed it already
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

    @property
    def version(self) -> int:
        """The policy version the engines serve (the number of weight syncs since the start)."""
        return self.fleet.version if self.fleet is not None else 0

    def _launch(self) -> None:
        """The actors, the fleet that calls them, the collector of stage 1, the hook of stage 3b (extra training rows
        after the step's prompts) and the held-out reader."""
        from actors.weight_sync.coordinator import WeightSyncBroadcaster
        from cluster.launch import launch
        from core.deadlines import collect_deadline_s
        from core.env import default_env
        from driver.fleet import Fleet
        from driver.models import registry
        from driver.step import RolloutCollector

        model_dir = self.prepared.model_dir
        self.handles = launch(self.cfg, str(model_dir), default_env(),
                              domains=tuple(sorted({t.domain for t in self.train_tasks})),
                              frozen=registry.frozen_entries(model_dir, self.cfg),
                              response_form=registry.response_form(model_dir, self.cfg))
        self.fleet = Fleet(self.cfg, self.handles, None, self.run_dir)
        self._wait_until_started()
        board = self._start_serving() if self.cfg.serve.live else None
        self.fleet.broadcaster = WeightSyncBroadcaster(self.cfg.weight_sync, self.handles.learners,
                                                       self.handles.rollouts, board=board)
        self.stream = self._curriculum()
        self.collector = RolloutCollector(self.handles, self._tasks_by_id(), self.stream, self.cfg.rollout,
                                          self.fleet.restore_worker,
                                          deadline_s=lambda prompts: collect_deadline_s(self.cfg, prompts))
        self.extra_rows = registry.extra_rows(self.cfg, model_dir, [t.problem for t in self.heldout])
        self.reader = HeldOutReader(self.cfg, self.fleet, self.eval_tasks, self.nocue_tasks, self._warn,
                                    test_tasks=self.test_tasks, ood_tasks=self.ood_tasks)

    def _start_serving(self):
        """serve.live: the selection service (driver/serve.py) beside the trainer, on the starting weights;
        returns its weight board, to which every weight sync publishes the new version."""
        import ray

        from actors.serving.weight_board import BOARD_NAMESPACE
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
            style = prompt_style(self.cfg)
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
        answered, _ = answer_times(list(calls), deadline, clock=time.time)  # errors surface in fleet.call below
        self.fleet.call(list(calls), max(1.0, deadline - time.time()), "actor start-up")
        log.info("%d actors started in %.0f s (%s)", len(calls), time.time() - started,
                 ", ".join(f"{calls[ref]} {at - started:.0f} s" for ref, at in answered.items()))

    def start(self) -> int:
        """Resume if asked and possible; evaluate the starting checkpoint; return the first step to run."""
        folder = self.resume_from
        step = 0
        if folder is not None:
            step = self._resume(folder)
        else:
            self.metrics.truncate_after(0)
            (self.run_dir / "consumed.jsonl").write_text("")
        self.progress = Progress(self.cfg.steps, step, self.cfg.progress)
        if step == 0:
            self.evaluate(0)
        return step

    def _metrics_log(self, resumed: bool) -> MetricsLog:
        """metrics.jsonl and the backends of `logging.backends` (a resumed run continues their W&B and MLflow
        runs)."""
        from driver.trackers import open_trackers

        return MetricsLog(self.run_dir, tensorboard=False, trackers=open_trackers(self.cfg, self.run_dir, resumed))

    def _resume(self, folder: Path) -> int:
        from driver.step import sync_weights

        state = ckpt.load_driver_state(folder)
        ckpt.check_compatible(folder, self.cfg, list(self.collector.tasks))  # with their mirror twins, if any
        self.fleet.call([l.load_checkpoint.remote(str(folder / "learner")) for l in self.handles.learners],
                        self.cfg.learner.step_timeout_s, "learner checkpoint load")
        ckpt.set_rng_state(state["rng"])
        try:
            self.stream = self._curriculum(state["stream"])
        except ValueError as err:
            raise RunFailed(f"cannot resume from {folder}: {err}") from None
        self.collector.stream = self.stream
        sync_weights(self.fleet, state["version"])
        self.metrics.resume_at(state["step"])
        _truncate_jsonl(self.run_dir / "consumed.jsonl", state["step"])
        message = (f"resumed from {folder} at step {state['step']} (policy version {self.version}, "
                   f"{sum(len(s['reissue']) for s in state['stream']['streams'].values())} prompts re-issued)")
        log.info(message)
        print(f"[resume] {message}", file=sys.stderr, flush=True)  # the user must see it, not only train.log
        return state["step"]

    # -- between steps ----------------------------------------------------------------------------------
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
        if self.fleet.sync_retries:
            values["rollout/sync_retries"] = self.fleet.sync_retries
        values["batch/skipped_update"] = int(not metrics)
        values["curriculum/max_candidates"] = self.stream.cap
        if self.stream.observe(collected.stats.get("curriculum/gain")):
            self.progress.write(f"[curriculum step {step + 1}] prompts with up to {self.stream.cap} candidates "
                                f"from now on")
        from actors.verifier.verifier_pool import merge_metrics

        per_actor = self.fleet.call([v.metrics.remote() for v in self.handles.verifiers], 60, "verifier metrics")
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
        """The held-out readings (driver/heldout.py), logged and shown above the progress bar."""
        result = self.reader.read(step)
        self.metrics.log(step, "eval", result)
        if hasattr(self, "progress"):
            self.progress.accuracy, self.progress.sampled = result["genselect"], result.get("sampled") or float("nan")
            for line in eval_lines(result, self.cfg, step):
                self.progress.write(line)
        return result

    def _warn(self, message: str) -> None:
        """A warning the user should see now: the console (above the progress bar) and train.log."""
        log.warning(message)
        self.progress.write(f"[warning] {message}")

    def checkpoint(self, step: int) -> Path:
        tmp = ckpt.begin(self.run_dir, step)
        self.fleet.call([l.save_checkpoint.remote(str(tmp / "learner"), {"step": step, "version": self.version})
                         for l in self.handles.learners], self.cfg.learner.step_timeout_s, "checkpoint save")
        state = {"step": step, "version": self.version, "rng": ckpt.rng_state(),
                 "stream": self.stream.state(self.collector.unfinished_ids()), "time": time.time(),
                 "model_dir": str(Path(self.prepared.model_dir).resolve())}  # driver.export reads its config
        folder = ckpt.commit(self.run_dir, tmp, state, self.cfg.keep_checkpoints)
        maybe_crash("driver_checkpoint", kill_group=True)
        return folder

    def should_export(self, step: int) -> bool:
        """`export_every`: a Hugging Face folder of the policy after this step, beside the end's export."""
        return bool(self.cfg.export_every) and step % self.cfg.export_every == 0

    def export(self, step: int) -> Path:
        """The policy after `step` as a Hugging Face folder, run_dir/exports/step_NNNNNN, written atomically by the
        learners (as the end's export), with the run's config and the export's step and policy version beside it."""
        from driver.export import export_files, exports_dir

        out = exports_dir(self.run_dir, step)
        files = export_files(self.cfg, step, self.version)
        self.fleet.call([learner.export_hf.remote(str(out), files) for learner in self.handles.learners], 600,
                        "export")
        log.info("exported step %d to %s", step, out)
        return out

    def finish(self) -> dict:
        export = self.run_dir / "export"
        self.fleet.call([learner.export_hf.remote(str(export)) for learner in self.handles.learners], 600, "export")
        write_prompt_style(export, prompt_style(self.cfg))  # serving renders prompts the same way
        plot_curves(self.metrics, self.run_dir / "curves.png")
        summary = summarize(self.metrics, time.time() - self.started_at, self.cfg.steps)
        summary["dataset"] = str(self.prepared.dataset_dir)
        summary["start_model"] = str(self.prepared.model_dir)  # the warm-started model RL began from
        summary["export"] = str(export)
        summary["policy_version"] = self.version  # the exported weights' version (driver/serve.py reports it)
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
        self.metrics.close()
        return summary


def _truncate_jsonl(path: Path, step: int) -> None:
    if path.exists():
        rows = [l for l in path.read_text().splitlines() if l.strip() and json.loads(l)["step"] <= step]
        path.write_text("".join(r + "\n" for r in rows))


"""`task=generator`: the policy writes solutions, on the same actors and the same loop as the selector.

`driver.train.train_loop` runs unchanged (collect -> filter_groups -> shape_and_advantage -> shard ->
learner_step -> sync_weights); only what a task is differs:

* the tasks are `SolveTask`s (driver/data/solve.py): a problem with its reference answer or tests, no
  candidates. The rollout actors sample G solutions per problem with `core.chat.format_generator_prompt`
  (the prompt of model-sampled candidates), with behaviour log-probs;
* the verifier pool scores each solution itself (`VerifierPool._score_solutions`): math-verify on its stated
  final answer (1/0), the sandbox for a program (1 when every test passes, or the pass fraction with
  `verifier.reward.name=partial`);
* the advantage is `algorithm.advantage` (its `name` and parameters): `grpo` (DAPO),
  `maxk` (max@k, arXiv 2510.23393; `off_policy` corrects stale samples with the sequence log-ratio of
  `driver.step.policy_logprobs` against the engine's behaviour log-probs), `bon_rlb` / `bon_rlb_p` (Chow et al.,
  arXiv 2412.15287);
* evaluation is pass@k on held-out problems: `eval_samples` = K solutions per problem at
  `rollout.temperature`, pass@1..pass@K and max@k with the unbiased estimators, bootstrap 95% CIs
  (core/algo/passk.py); the scored samples are kept in `eval_samples/step<S>.jsonl` (`driver.bon` measures
  Best-of-N with a selector on them).

`GeneratorRun` is `Run` with those three hooks replaced (`_prepare`, `evaluate`, `finish`); everything else
(actors, weight sync, staleness, checkpoints and resume, fault handling) is the selector's.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from core.rewards import reward_name
from driver.data.problem import DataError
from driver.report import log_k_axis, summarize
from driver.failure import RunFailed, how_to_continue
from driver.run import Run


@dataclass
class PreparedGenerator:
    """What `GeneratorRun._prepare` made: the policy's folder (warm-started when tiny) and its stats."""
    model_dir: Path
    warm_start_stats: Optional[dict]
    source: str


def preflight(cfg) -> None:
    """What `task=generator` can refuse from the file system, before anything is built or started: a
    `model.name` that is neither `tiny`, `smollm2-135m` nor a local model folder (DataError, one line)."""
    if cfg.model.name in ("tiny", "smollm2-135m"):
        return
    from driver.models.registry import ModelFolderError, validate_hf_folder

    try:
        validate_hf_folder(cfg.model.name)
    except ModelFolderError as err:
        raise DataError(f"model.name={cfg.model.name}: the generator to train is not a model folder ({err})") from None
    try:
        model_type = json.loads((Path(cfg.model.name).expanduser() / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError) as err:
        raise DataError(f"model.name={cfg.model.name}: not a model folder (config.json unreadable: "
                        f"{type(err).__name__})") from None
    if not model_type:
        raise DataError(f"model.name={cfg.model.name}: not a model folder (config.json names no model_type)")


class GeneratorRun(Run):
    """`Run` for `task=generator` (see the module docstring)."""

    def _prepare(self) -> None:
        from driver.data.solve import load_solve_data
        from driver.models.generator_warmstart import prepare_generator

        preflight(self.cfg)
        data = load_solve_data(self.cfg.data)
        model_dir, stats = prepare_generator(data, self.cfg.model, self.cfg.tiny, progress=self.cfg.progress)
        self.prepared = PreparedGenerator(Path(model_dir), stats, data.source)
        self.train_tasks, self.heldout = data.train, data.heldout
        self.eval_tasks = self.heldout[: self.cfg.eval_prompts] if self.cfg.eval_prompts else self.heldout
        # a generator is read on its held-out problems only
        self.test_tasks, self.nocue_tasks, self.ood_tasks = [], [], []

    # -- evaluation -----------------------------------------------------------------------------------
    def evaluate(self, step: int) -> dict:
        """pass@k on the held-out problems: K = `eval_samples` solutions each (rollout actor 0, verifier 0)."""
        result = self._sample_and_score(self.eval_tasks, self.cfg.eval_samples, step)
        self.metrics.log(step, "eval", result)
        if hasattr(self, "progress"):
            k = result["k"]
            self.progress.accuracy, self.progress.sampled = result["pass_at_1"], result["pass_at_n"]
            self.progress.write(f"[eval step {step}] pass@1 {result['pass_at_1']:.3f} [{result['pass_at_1_lo']:.3f}, "
                                f"{result['pass_at_1_hi']:.3f}]  pass@{k} {result['pass_at_n']:.3f} "
                                f"[{result['pass_at_n_lo']:.3f}, {result['pass_at_n_hi']:.3f}]  mean reward "
                                f"{result['mean_reward']:.3f}  no answer {result['no_answer_rate']:.3f}  "
                                f"({result['problems']} problems)")
        return result

    def _sample_and_score(self, tasks: list, k: int, step: int) -> dict:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        from core.deadlines import generate_deadline_s

        started = time.time()
        verify_s = math.ceil(len(tasks) * k / max(1, self.cfg.verifier.processes_per_worker)) * self.cfg.verifier.timeout_s
        deadline = generate_deadline_s(self.cfg.rollout, self.cfg.data.max_prompt_tokens, len(tasks) * k) + verify_s
        try:
            generated = self.handles.rollouts[0].generate.remote(tasks, n=k)
            groups = ray.get(self.handles.verifiers[0].score_groups.remote(generated), timeout=deadline)
        except (RayActorError, RayTaskError, GetTimeoutError) as err:
            raise RunFailed(f"evaluation at step {step} failed ({type(err).__name__}: "
                            f"{str(err).splitlines()[0][:300]}); {how_to_continue(self.run_dir)}") from err
        answers = stated_answers(groups)
        result = pass_metrics(groups, k, binary=reward_name(self.cfg.verifier.reward) == "binary", seed=self.cfg.seed,
                              answers=answers)
        result["eval_s"] = time.time() - started
        write_eval_samples(groups, self.run_dir / "eval_samples" / f"step{step}.jsonl", answers=answers)
        return result

    # -- the end --------------------------------------------------------------------------------------
    def finish(self) -> dict:
        export = self.run_dir / "export"
        self.fleet.call([learner.export_hf.remote(str(export)) for learner in self.handles.learners], 600, "export")
        plot_generator_curves(self.metrics, self.run_dir / "curves.png")
        base = summarize(self.metrics, time.time() - self.started_at, self.cfg.steps)
        evals = self.metrics.records("eval")
        first, last = (evals[0], evals[-1]) if evals else ({}, {})
        summary = {"task": "generator", "steps": base["steps"], "wall_seconds": base["wall_seconds"],
                   "k": last.get("k"), "heldout_problems": last.get("problems"),
                   "start_pass_at_1": first.get("pass_at_1"), "final_pass_at_1": last.get("pass_at_1"),
                   "final_pass_at_1_ci": [last.get("pass_at_1_lo"), last.get("pass_at_1_hi")],
                   "start_pass_at_n": first.get("pass_at_n"), "final_pass_at_n": last.get("pass_at_n"),
                   "final_pass_at_n_ci": [last.get("pass_at_n_lo"), last.get("pass_at_n_hi")],
                   "start_pass_curve": first.get("pass_curve"), "final_pass_curve": last.get("pass_curve"),
                   "start_max_curve": first.get("max_curve"), "final_max_curve": last.get("max_curve"),
                   "start_majority_curve": first.get("majority_curve"),
                   "final_majority_curve": last.get("majority_curve"),
                   "start_pass_at_1_ci": [first.get("pass_at_1_lo"), first.get("pass_at_1_hi")],
                   "start_pass_at_n_ci": [first.get("pass_at_n_lo"), first.get("pass_at_n_hi")],
                   "estimator": self.cfg.algorithm.advantage["name"],
                   "warm_start": self.prepared.warm_start_stats, "time_per_step": base["time_per_step"],
                   "step_seconds": _mean_step_seconds(self.metrics.records("train")),
                   "weight_sync_gbps": base["weight_sync_gbps"],
                   "dropped_stale_samples": base["dropped_stale_samples"], "export": str(export),
                   "start_model": str(self.prepared.model_dir),
                   "policy_version": self.version}
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
        self.metrics.close()
        return summary


def _mean_step_seconds(train: list) -> Optional[float]:
    values = [r["time/step_s"] for r in train if "time/step_s" in r]
    return round(sum(values) / len(values), 3) if values else None


def eval_ks(k: int) -> list:
    """The k of the reported curves: 1, 2, 4, ... up to K, and K."""
    return sorted({2 ** i for i in range(k.bit_length()) if 2 ** i <= k} | {k})


def stated_answers(groups: list) -> list:
    """Per group, the answer each solution states (`actors.verifier.solutions.stated_answer`; None when none) when the
    task is math, else None for each: extracted once per evaluation for `pass_metrics` (majority@k) and
    `write_eval_samples` (the samples' answers)."""
    from actors.verifier.solutions import stated_answer

    return [[stated_answer(r.response_text) if getattr(g.task, "domain", "math") == "math" else None
             for r in g.rollouts] for g in groups]


def pass_metrics(groups: list, k: int, binary: bool = True, seed: int = 0, answers: Optional[list] = None) -> dict:
    """Held-out metrics of a generator from scored groups of K solutions each (pure apart from the records):
    pass@k (a solution passes when its reward is 1), max@k (rewards as they are: the pass fraction for code
    with partial credit) and, for math, majority@k (self-consistency over the stated answers; None for code)
    for k in `eval_ks(K)` with the unbiased estimators (core/algo/passk.py), bootstrap 95%
    CIs over problems for pass@1 and pass@K, mean reward, the fraction of solutions stating no answer, mean
    length and the truncated fraction. `binary`: the rewards are 0/1 (then max@k equals pass@k). `answers`:
    `stated_answers(groups)` when the caller has them (else extracted here)."""
    from core.algo.passk import bootstrap_curve_ci, majority_at_k_curve, max_at_k_curve, pass_at_k_curve

    answers = stated_answers(groups) if answers is None else answers
    kept = [i for i, g in enumerate(groups) if len(g.rollouts) == k]
    groups, answers = [groups[i] for i in kept], [answers[i] for i in kept]
    if not groups:
        raise ValueError(f"no scored group of {k} solutions")
    rewards = np.array([g.rewards for g in groups], dtype=np.float64)           # (P, K)
    ks = eval_ks(k)
    passes = pass_at_k_curve(rewards >= 1.0, ks)                                  # (P, len(ks))
    maxes = max_at_k_curve(rewards, ks)
    mean, lo, hi = bootstrap_curve_ci(passes[:, [0, -1]], seed=seed)
    rollouts = [r for g in groups for r in g.rollouts]
    out = {"problems": len(groups), "k": k, "binary": binary,
           "pass_at_1": float(mean[0]), "pass_at_1_lo": float(lo[0]), "pass_at_1_hi": float(hi[0]),
           "pass_at_n": float(mean[1]), "pass_at_n_lo": float(lo[1]), "pass_at_n_hi": float(hi[1]),
           "pass_curve": {str(kk): float(v) for kk, v in zip(ks, passes.mean(axis=0))},
           "max_curve": {str(kk): float(v) for kk, v in zip(ks, maxes.mean(axis=0))},
           "majority_curve": None,
           "mean_reward": float(rewards.mean()),
           "no_answer_rate": sum(r.verifier_status == "parse_failure" for r in rollouts) / len(rollouts),
           "verifier_failure_rate": sum(r.verifier_failed for r in rollouts) / len(rollouts),
           "mean_length": float(np.mean([r.response_length for r in rollouts])),
           "truncated_fraction": sum(r.truncated for r in rollouts) / len(rollouts)}
    if all(getattr(g.task, "domain", "math") == "math" for g in groups):  # self-consistency needs an answer
        votes = majority_at_k_curve(answers, rewards >= 1.0, ks, seed=seed)
        out["majority_curve"] = {str(kk): float(v) for kk, v in zip(ks, votes.mean(axis=0))}
    return out


def write_eval_samples(groups: list, path: Path, answers: Optional[list] = None) -> Path:
    """The scored samples of one evaluation, one JSONL row per problem {id, problem, domain, texts, answers,
    rewards} (answers: the stated ones, None when none; math only, else None: `stated_answers(groups)`, passed
    in when the caller has them), written atomically: what `driver.bon` reads to measure Best-of-N with a
    selector on the same samples."""
    answers = stated_answers(groups) if answers is None else answers
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as f:
        for g, stated in zip(groups, answers, strict=True):
            f.write(json.dumps({"id": g.task.problem_id, "problem": g.task.problem, "domain": g.task.domain,
                                "texts": [r.response_text for r in g.rollouts], "answers": list(stated),
                                "rewards": [float(r) for r in g.rewards]}) + "\n")
    tmp.replace(path)
    return path


def plot_generator_curves(log, out_path) -> Path:
    """curves.png of a generator run: training reward per step; held-out pass@k against k at the first and the
    last evaluation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train, evals = log.records("train"), log.records("eval")
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    if train:
        left.plot([r["step"] for r in train], [r.get("reward/all_groups_mean", math.nan) for r in train],
                  label="mean reward (all groups)")
    left.set(xlabel="learner step", ylabel="reward", title="Training reward")
    left.legend(loc="lower right")
    for rec, style in ((evals[0], "o--"), (evals[-1], "o-")) if evals else ():
        ks = [int(k) for k in rec["pass_curve"]]
        right.plot(ks, list(rec["pass_curve"].values()), style, label=f"pass@k, step {rec['step']}")
    right.set(xlabel="k", ylabel="held-out pass@k", title="Held-out pass@k", ylim=(0, 1))
    log_k_axis(right, evals[-1]["pass_curve"] if evals else ())
    right.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return Path(out_path)


__all__ = ["GeneratorRun", "preflight", "stated_answers", "pass_metrics", "write_eval_samples", "eval_ks",
           "plot_generator_curves", "RunFailed"]

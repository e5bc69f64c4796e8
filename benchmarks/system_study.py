"""The whole Best-of-N system on the embedded models, end to end: generators trained with each
objective, selection tasks built from their own samples, selectors trained on them, and the accuracy of
generator + selector against majority@N, random@N and pass@N; one command, one report.

    .venv/bin/python benchmarks/system_study.py [--out runs/study] [--objectives grpo,maxk,bon_rlb]
        [--gen-steps 60] [--gen-lr 3e-4] [--k 64] [--eval-problems 100] [--synth-problems 2000]
        [--selector-steps 200] [--quick]

Stages (every one is an existing entry point run as a subprocess, its output in `OUT/<stage>/`, its console
output in `OUT/logs/<stage>.log`; a stage whose result file exists is skipped, so a rerun resumes):

1. `gen-<objective>`: `python -m driver.train generator` once per objective (configs/generator.yaml, the same
   warm-started base generator and the same held-out problems for all). The run's first evaluation is the base
   generator, its last the trained one: pass@k, max@k and majority@k for k = 1..K (K = `--k` samples per
   problem, unbiased estimators, bootstrap CIs). Every run measures the base again, which gives its spread.
2. `synth-{weak,strong}-{train,eval}`: `python -m driver.synth` with `data.source=model` from the base
   generator (weak) and from the trained generator with the highest final pass@1 (strong): K = 16 samples per
   problem, labelled by math-verify, filtered (at least one correct, at most half); prompts of 2..8 candidates
   to train on and of 2..16 to evaluate on (the same problems and split; sampled once per dataset).
3. `selector-weak`, `selector-strong`: `python -m driver.train selector` on each `-train` dataset (the
   plain selector recipe: tiny model, format warm-start, curriculum from 2 candidates, DAPO).
4. `eval-*`: `python -m driver.evaluate` (knockout of pairs, as the default selector is served) of
   weak->weak, weak->strong (the transfer claim: a selector trained on a weaker generator's samples) and
   strong->strong, on the held-out problems of the `-eval` datasets (never seen by either selector).
5. `bon-<generator>`: `python -m driver.bon` (knockout of pairs): Best-of-N of the base generator and of each
   trained one with the weak selector, over ALL their held-out problems (the K samples of the generator runs'
   evaluations, `eval_samples/step<S>.jsonl`; no filtering, so pass@k < 1), k = 2..16, beside pass@k,
   majority@k and random@k; problems the selector trained on are left out.
6. `report.md`, `generators.png` (pass@k, majority@k against k per objective), `system.png` (accuracy by N)
   and `bon.png` (BoN@k with the selector against k, per generator).

`--quick` shrinks every stage to a smoke test (a few steps, few problems; minutes on 2 cores, numbers
meaningless); the test suite runs it (tests/benchmarks/test_generator_system_study.py).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRAIN_CANDIDATES, EVAL_CANDIDATES = 8, 16  # the selectors train on 2-8 (the default's), are evaluated on 2-16
BON_KS = (2, 4, 8, 16)  # k of the Best-of-N curves with the selector
#: evaluation pairs: name -> (the selector's generator, the evaluation data's generator)
PAIRS = {"weak-on-weak": ("weak", "weak"), "weak-on-strong": ("weak", "strong"),
         "strong-on-strong": ("strong", "strong")}
OBJECTIVES = ("grpo", "maxk", "bon_rlb", "bon_rlb_p")
#: what each estimator needs besides its name (BoN-RLB refuses shaped rewards: overlong samples are dropped)
ESTIMATOR_OVERRIDES = {"grpo": [], "maxk": [], "bon_rlb": ["algorithm.overlong_filtering=true"],
                       "bon_rlb_p": ["algorithm.overlong_filtering=true"]}


@dataclass
class Settings:
    out: Path
    objectives: tuple = ("grpo", "maxk", "bon_rlb")
    gen_steps: int = 60
    gen_lr: float = 3e-4
    k: int = 64
    eval_problems: int = 100
    synth_problems: int = 2000
    synth_k: int = 16
    selector_steps: int = 200
    bon_draws: int = 8
    seed: int = 0
    extra_generator: list = field(default_factory=list)
    extra_selector: list = field(default_factory=list)


def quick(settings: Settings) -> Settings:
    """The smoke-test sizes of `--quick`."""
    settings.gen_steps, settings.k, settings.eval_problems = 2, 4, 8
    settings.synth_problems, settings.synth_k, settings.selector_steps, settings.bon_draws = 100, 8, 2, 2
    settings.extra_generator = ["prompts_per_step=4", "checkpoint_every=0"]
    settings.extra_selector = ["prompts_per_step=4", "rollout.samples_per_prompt=4", "eval_every=0",
                               "eval_prompts=16", "tiny.warm_start.steps=10", "checkpoint_every=0"]
    return settings


# ------------------------------------------------------------------------------------- the commands
def generator_command(s: Settings, objective: str) -> list:
    return [sys.executable, "-m", "driver.train", "generator", f"run_dir={s.out / f'gen-{objective}'}",
            f"steps={s.gen_steps}", f"eval_samples={s.k}", f"eval_prompts={s.eval_problems}", "eval_every=0",
            f"seed={s.seed}", f"learner.lr={s.gen_lr}", f"algorithm.advantage.name={objective}",
            *ESTIMATOR_OVERRIDES[objective], *s.extra_generator]


def synth_overrides(s: Settings, generator: str, max_candidates: int) -> list:
    """The selection data of one generator: the same problems (seed) for every generator and every window, so
    the held-out split is the same problems whichever generator wrote the candidates. Over 10 candidates the
    tiny selector cannot answer with one constrained token (core/config.py), so those datasets are built for
    evaluation by knockout only."""
    return ["data.source=model", f"data.generator={generator}", "data.generator_problems=procedural_math",
            f"data.num_problems={s.synth_problems}", f"data.candidates_per_problem={s.synth_k}",
            f"data.max_candidates={min(max_candidates, s.synth_k)}", "data.generator_max_tokens=64",
            f"data.seed={s.seed + 17}", "data.hedge_wrong_rate=0", "data.hedge_correct_rate=0",
            *(["rollout.constrain_index=false"] if max_candidates > 10 else [])]


def synth_command(s: Settings, generator: str, max_candidates: int) -> list:
    return [sys.executable, "-m", "driver.synth", "selector", *synth_overrides(s, generator, max_candidates)]


def selector_command(s: Settings, name: str, generator: str) -> list:
    """The plain selector recipe (configs/selector.yaml) on the generator's samples, at its 2-8 candidates."""
    return [sys.executable, "-m", "driver.train", "selector", f"run_dir={s.out / f'selector-{name}'}",
            f"steps={s.selector_steps}", f"seed={s.seed}", *synth_overrides(s, generator, TRAIN_CANDIDATES),
            *s.extra_selector]


def evaluate_command(selector: Path, dataset: str, out: Path) -> list:
    return [sys.executable, "-m", "driver.evaluate", "--model", str(selector), "--dataset", dataset,
            "--split", "heldout", "--knockout-window", "2", "--out", str(out)]


def bon_command(s: Settings, selector: Path, samples: Path, excludes: list, out: Path) -> list:
    ks = ",".join(str(k) for k in BON_KS if k <= s.k)
    return [sys.executable, "-m", "driver.bon", "--selector", str(selector), "--samples", str(samples), "--ks", ks,
            "--draws", str(s.bon_draws), "--knockout-window", "2", *[a for e in excludes for a in ("--exclude", e)],
            "--seed", str(s.seed), "--out", str(out)]


def trained_selector(run_dir: Path) -> tuple:
    """(export folder, folders whose problems it saw: its dataset and its start model) of a selector run
    (`--selector`), from its summary.json."""
    summary_file = run_dir / "summary.json"
    if not summary_file.is_file():
        raise SystemExit(f"--selector {run_dir}: no summary.json (a finished `python -m driver.train` run folder)")
    summary = json.loads(summary_file.read_text())
    return Path(summary["export"]), [summary["dataset"], summary["start_model"]]


def bon_samples(s: Settings) -> dict:
    """generator name -> its held-out samples: the base (the first objective's run, before its first step) and
    each objective after training."""
    first = s.objectives[0]
    return {"base": s.out / f"gen-{first}" / "eval_samples" / "step0.jsonl",
            **{o: s.out / f"gen-{o}" / "eval_samples" / f"step{s.gen_steps}.jsonl" for o in s.objectives}}


# ---------------------------------------------------------------------------------------- stages
def run_stage(name: str, command: list, done: Path, logs: Path, finish=None) -> float:
    """Run `command` (cwd: the checkout) unless `done` exists; its output goes to `logs/<name>.log`, then
    `finish(log)` (if given) may write `done`. Returns the seconds it took (0 when skipped); a failure stops
    the study with the log's tail."""
    if done.exists():
        print(f"[{name}] done before ({done}), skipped", flush=True)
        return 0.0
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    print(f"[{name}] running ... (log: {log})", flush=True)
    started = time.time()
    with open(log, "w") as f:
        rc = subprocess.run(command, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT).returncode
    seconds = time.time() - started
    if rc == 0 and finish is not None:
        finish(log)
    if rc != 0 or not done.exists():
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"[{name}] failed (exit {rc}) after {seconds:.0f} s; the end of {log}:\n{tail}")
    print(f"[{name}] finished in {seconds:.0f} s", flush=True)
    return seconds


class StageTimes(dict):
    """Seconds of each stage, kept in `times.json` so that a resumed study reports the time a stage took when
    it ran, not the 0 of its skip."""

    def __init__(self, path: Path):
        super().__init__(json.loads(path.read_text()) if path.exists() else {})
        self.path = path

    def __setitem__(self, stage: str, seconds: float) -> None:
        if seconds or stage not in self:
            super().__setitem__(stage, seconds)
            self.path.write_text(json.dumps(self, indent=1))


def dataset_folder(log: Path) -> str:
    """The dataset folder `driver.synth` printed (`dataset folder: PATH`)."""
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("dataset folder:"):
            return line.split(":", 1)[1].strip()
    raise SystemExit(f"no 'dataset folder:' line in {log}")


def train_generators(s: Settings, logs: Path, times: dict) -> dict:
    """Stage 1: one generator run per objective; returns objective -> its summary.json."""
    for o in s.objectives:
        times[f"gen-{o}"] = run_stage(f"gen-{o}", generator_command(s, o), s.out / f"gen-{o}" / "summary.json", logs)
    return {o: json.loads((s.out / f"gen-{o}" / "summary.json").read_text()) for o in s.objectives}


def synthesize(s: Settings, generators: dict, logs: Path, times: dict) -> dict:
    """Stage 2: a training (2-8 candidates) and an evaluation (2-16) dataset per generator; returns
    '<generator>-<train|eval>' -> dataset folder (each recorded in synth-*.json, so a rerun skips it)."""
    datasets = {}
    for name, folder in generators.items():
        for kind, window in (("train", TRAIN_CANDIDATES), ("eval", EVAL_CANDIDATES)):
            stage, done = f"synth-{name}-{kind}", s.out / f"synth-{name}-{kind}.json"
            record = lambda log, done=done: done.write_text(json.dumps({"dataset": dataset_folder(log)}))  # noqa: E731
            times[stage] = run_stage(stage, synth_command(s, folder, window), done, logs, finish=record)
            datasets[f"{name}-{kind}"] = json.loads(done.read_text())["dataset"]
    return datasets


def strongest(summaries: dict) -> str:
    """The objective whose trained generator has the highest final pass@1 (ties: the first)."""
    return max(summaries, key=lambda o: (summaries[o]["final_pass_at_1"], -list(summaries).index(o)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/study")
    parser.add_argument("--objectives", default="grpo,maxk,bon_rlb", help=f"comma list of {', '.join(OBJECTIVES)}")
    parser.add_argument("--gen-steps", type=int, default=60)
    parser.add_argument("--gen-lr", type=float, default=3e-4, help="the generator learner's lr (1e-3 collapsed it)")
    parser.add_argument("--k", type=int, default=64, help="samples per held-out problem for pass@k / majority@k")
    parser.add_argument("--eval-problems", type=int, default=100)
    parser.add_argument("--synth-problems", type=int, default=2000)
    parser.add_argument("--selector-steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--selector", default=None,
                        help="a trained selector's run folder (e.g. runs/default): Best-of-N with it, stages 2-4 "
                             "(selectors trained on the generators' samples) skipped")
    parser.add_argument("--quick", action="store_true", help="smoke-test sizes (minutes; numbers meaningless)")
    args = parser.parse_args(argv)
    objectives = tuple(o.strip() for o in args.objectives.split(",") if o.strip())
    unknown = [o for o in objectives if o not in OBJECTIVES]
    if unknown or not objectives:
        parser.error(f"--objectives: {', '.join(unknown) or 'none given'}; choose from {', '.join(OBJECTIVES)}")
    s = Settings(Path(args.out).resolve(), objectives, args.gen_steps, args.gen_lr, args.k, args.eval_problems,
                 args.synth_problems, selector_steps=args.selector_steps, seed=args.seed)
    if args.quick:
        quick(s)
    if s.k < 2:
        parser.error("--k must be >= 2 (pass@k needs at least two samples per problem)")
    s.out.mkdir(parents=True, exist_ok=True)
    logs, times = s.out / "logs", StageTimes(s.out / "times.json")

    given = trained_selector(Path(args.selector).resolve()) if args.selector else None  # refused before any stage
    summaries = train_generators(s, logs, times)                                   # 1. generators
    strong = strongest(summaries)
    generators = {"weak": summaries[s.objectives[0]]["start_model"], "strong": str(s.out / f"gen-{strong}" / "export")}
    if given:  # a given selector: Best-of-N only
        selector, excludes = given
        datasets, pairs = {}, {}
        about = (f"The selector of the run `{args.selector}` (its export) chooses among k samples of each generator "
                 f"by a knockout of pairs; problems of its training dataset and of its pretraining corpus are left "
                 f"out.")
    else:
        datasets = synthesize(s, generators, logs, times)                         # 2. synthesis
        for name, folder in generators.items():                                    # 3. selectors
            times[f"selector-{name}"] = run_stage(f"selector-{name}", selector_command(s, name, folder),
                                                  s.out / f"selector-{name}" / "summary.json", logs)
        for pair, (sel, data) in PAIRS.items():                                    # 4. evaluation
            out = s.out / f"eval-{pair}.json"
            times[f"eval-{pair}"] = run_stage(f"eval-{pair}", evaluate_command(s.out / f"selector-{sel}" / "export",
                                                                               datasets[f"{data}-eval"], out), out, logs)
        selector, excludes, pairs = s.out / "selector-weak" / "export", [datasets["weak-train"]], PAIRS
        about = ("The weak selector (trained on the base generator's samples) chooses among k samples of each "
                 "generator by a knockout of pairs; problems the selector trained on are left out.")
    for name, samples in bon_samples(s).items():                                   # 5. Best-of-N, all problems
        out = s.out / f"bon-{name}.json"
        times[f"bon-{name}"] = run_stage(f"bon-{name}", bon_command(s, selector, samples, excludes, out), out, logs)
    from benchmarks.system_report import write_report                             # 6. report

    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(s).items()}
    report = write_report(s.out, summaries, strong, generators, datasets, pairs, times, settings, about)
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())

"""Best-of-N accuracy of a generator with a selector, over ALL problems (no filtering): the GenSelect paper's Table 1.

    python -m driver.bon --selector runs/study/selector-weak/export \\
        --samples runs/study/gen-grpo/eval_samples/step60.jsonl [--ks 2,4,8,16] [--draws 8] \\
        [--knockout-window 2] [--exclude DATASET] [--out FILE]

    python -m driver.bon --selector RUN/export --problems benchmark.jsonl --generator MODEL \\
        [--samples-per-problem 16] [--ks 2,4,8,16] [--out runs/bon/NAME.json]

`--problems FILE` is a benchmark in the project's data-file format (problems with answers; docs/data.md):
`--generator MODEL` samples k solutions per problem with vLLM, else the file's own candidates are used; every
candidate is labelled by the verifiers (math-verify; a file's `candidate_labels` or `--label-function` instead) and
the scored samples are written beside the output as `NAME.samples.jsonl` (driver/bon_problems.py), which `--samples`
reads again without sampling. Output: a table with a row per metric (pass@1, maj@k, GenSelect@k, pass@k) and a
column per k (GenSelect, arXiv 2602.02143, Table 1), and the same as JSON (default runs/bon/<file>-<selector>.json).

The selection datasets keep only problems with 1..half correct samples, so GenSelect@N measured on them is
conditional (pass@N = 1 there by construction). This asks the unconditional question a Best-of-N user asks:
the generator writes k solutions to a problem, the selector picks one; how often is it right, over every
held-out problem? For each problem with n scored samples (a generator run's evaluation file,
`eval_samples/step<S>.jsonl`, written by `task=generator` runs) and each k:

* BoN@k with the selector: the chosen sample's reward averaged over `draws` random k-subsets (each in a random
  order; all of them when there are fewer), i.e. `core.algo.passk.bon_at_k` with the selector as the chooser
  (max@k paper, arXiv 2510.23393, and BoN-aware fine-tuning, arXiv 2412.15287, report Best-of-N this way).
  The selector judges a subset with a knockout tournament of groups of at most `--knockout-window`
  candidates (`driver.evaluate.choose_knockout`, the serving rule), greedy. A subset whose samples all have the
  same reward is not sent to the selector: no choice changes its outcome, so it scores that reward;
* beside it, on all n samples with the unbiased estimators (core/algo/passk.py): pass@k (the oracle selector),
  majority@k over the stated answers (math) and random@k = pass@1 (the mean reward).

Every value is a mean over problems with a 95% bootstrap CI over problems. `--exclude DATASET` (the selector's
training dataset) drops every problem that computes the same thing as one of its training problems
(`driver.data.procedural.problem_key`), `--exclude MODEL` (a tiny selector's start model) those of its pretraining
corpus, and says how many, so the selector is measured on problems it never saw.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from core.algo.genselect import PromptStyle, build_prompt
from core.records import SelectionTask


@dataclass(frozen=True)
class SampledProblem:
    """One problem with a generator's n scored samples (one row of an `eval_samples` file).

    Attributes: id, problem (its statement), domain ("math" or "code"), texts (n, the samples as written),
    answers (n, the stated answers; None = none stated), rewards (n, the verifier's scores in [0, 1])."""
    id: str
    problem: str
    domain: str
    texts: tuple
    answers: tuple
    rewards: tuple


class SamplesFileError(ValueError):
    """An eval-samples file that cannot be read; the message is `path:line: reason`."""


def read_samples(path) -> list:
    """The SampledProblems of a JSONL file (rows {id, problem, domain, texts, answers, rewards}); every row must
    have the same number n >= 2 of samples (the estimators average over n)."""
    out = []
    for line_no, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            item = SampledProblem(str(row["id"]), str(row["problem"]), row.get("domain", "math"),
                                  tuple(row["texts"]), tuple(row["answers"]), tuple(float(r) for r in row["rewards"]))
        except (ValueError, KeyError, TypeError) as err:
            raise SamplesFileError(f"{path}:{line_no}: not a samples row ({type(err).__name__}: {err})") from None
        if not len(item.texts) == len(item.answers) == len(item.rewards) >= 2:
            raise SamplesFileError(f"{path}:{line_no}: texts, answers and rewards must have the same length >= 2")
        if out and len(item.texts) != len(out[0].texts):
            raise SamplesFileError(f"{path}:{line_no}: {len(item.texts)} samples, the first row has {len(out[0].texts)}")
        out.append(item)
    if not out:
        raise SamplesFileError(f"{path}: no rows")
    return out


def seen_problems(folder) -> frozenset:
    """The problem texts a selector saw in training, from one folder: a dataset folder (its training prompts' problems)
    or a model folder (the pretraining corpus of a pretrained tiny model, `pretrain.json`, followed through a
    warm-start's `warm_start.json` to the model it started from; nothing for a model without them)."""
    import json as json_module

    from driver.data.dataset import load_dataset
    from driver.models.hooks import model_hook

    folder = Path(folder)
    if (folder / "manifest.json").is_file():
        return frozenset(t.problem for t in load_dataset(folder).train)
    own = model_hook("problems_seen", folder)  # the model's own record (a pretrained tiny model's corpus)
    seen = own(folder) if own is not None and folder.is_dir() else None
    if seen is not None:
        return frozenset(seen)
    if (folder / "warm_start.json").is_file():
        base = json_module.loads((folder / "warm_start.json").read_text()).get("base_model")
        return seen_problems(base) if base and Path(base).is_dir() else frozenset()
    if not folder.is_dir():
        raise ValueError(f"--exclude {folder}: no such folder")
    return frozenset()


def exclude_seen(problems: Sequence[SampledProblem], folders: Sequence) -> tuple:
    """(the problems that none of `folders` shows (`seen_problems`), how many were dropped), compared by
    `problem_key` (a procedural problem's expression, whatever its wording; else the text)."""
    from driver.data.procedural import problem_key

    seen = {problem_key(p) for folder in folders for p in seen_problems(folder)}
    kept = [p for p in problems if problem_key(p.problem) not in seen]
    return kept, len(problems) - len(kept)


def _sampling(draws: int, seed: int) -> dict:
    """The subset arguments of `core.algo.passk.k_subsets` for one problem: every subset up to `draws` of them,
    else `draws` random ones. `draw_subsets` and `selector_scores` (through `bon_at_k`) both use them, so the
    selector judges exactly the subsets that `bon_at_k` averages over."""
    return {"max_exact": draws, "draws": draws, "seed": seed}


def draw_subsets(n: int, k: int, draws: int, seed: int) -> list:
    """`draws` random k-subsets of range(n), each a tuple in a random order (the order the selector sees);
    every subset, each shuffled, when there are at most `draws` of them. Deterministic for the seed."""
    from core.algo.passk import k_subsets

    subsets, _ = k_subsets(n, k, **_sampling(draws, seed))
    rng = random.Random(f"bon-{seed}-{n}-{k}")
    out = []
    for row in subsets:
        order = [int(i) for i in row]
        rng.shuffle(order)
        out.append(tuple(order))
    return out


def plan(problems: Sequence[SampledProblem], ks: Sequence[int], draws: int, seed: int = 0) -> dict:
    """{(problem index, k): [subsets]} for every problem and k (k <= n); problem p's subsets are drawn with seed
    `seed + p` (`selector_scores` needs the same `draws` and `seed`)."""
    return {(p, k): draw_subsets(len(item.rewards), k, draws, seed + p)
            for p, item in enumerate(problems) for k in ks if k <= len(item.rewards)}


def needs_choice(item: SampledProblem, subset: tuple) -> bool:
    """Whether the selector's choice can change this subset's outcome (its samples' rewards differ)."""
    return len({item.rewards[i] for i in subset}) > 1


def selection_task(item: SampledProblem, subset: tuple, style: PromptStyle, tag: str) -> SelectionTask:
    """The GenSelect prompt of `subset` (Solution j = sample subset[j])."""
    texts = tuple(item.texts[i] for i in subset)
    return SelectionTask(prompt_id=f"{item.id}/bon-{tag}", problem_id=item.id, domain=item.domain,
                         problem=item.problem, candidates=texts,
                         candidate_answers=tuple(str(item.answers[i]) for i in subset),
                         labels=tuple(item.rewards[i] for i in subset), reference="",
                         prompt=build_prompt(item.problem, texts, style=style))


def selector_scores(problems: Sequence[SampledProblem], subsets: dict, choices: dict, draws: int,
                    seed: int = 0) -> dict:
    """{k: (P,) BoN@k of each problem}: `core.algo.passk.bon_at_k` with the selector's choices as the chooser,
    i.e. the mean over the problem's subsets of the chosen sample's reward. `subsets` is `plan(problems, ks,
    draws, seed)` (the same `draws` and `seed`): bon_at_k draws the same subsets in the same order, and each
    call of the chooser reads the next planned subset, in the order the selector saw it. `choices` maps
    (problem index, subset) -> the chosen position in the subset (None: no parsed judgment, scores 0) for the
    subsets that needed a choice; the others score their common reward."""
    from core.algo.passk import bon_at_k

    by_k: dict = {}
    for (p, k), drawn in subsets.items():
        item, shown = problems[p], iter(drawn)

        def choose(indices: tuple, item=item, p=p, shown=shown) -> Optional[int]:
            subset = next(shown, None)
            if subset is None or sorted(subset) != sorted(indices):
                raise ValueError(f"problem {p}: planned subset {subset} is not bon_at_k's {indices} "
                                 "(plan and selector_scores need the same draws and seed)")
            if not needs_choice(item, subset):
                return subset[0]
            chosen = choices[(p, subset)]
            return None if chosen is None else subset[chosen]

        by_k.setdefault(k, {})[p] = bon_at_k(item.rewards, k, choose, **_sampling(draws, seed + p))
    return {k: np.array([v[p] for p in sorted(v)]) for k, v in sorted(by_k.items())}


def baseline_scores(problems: Sequence[SampledProblem], ks: Sequence[int], seed: int = 0) -> dict:
    """{name: {k: (P,)}} for pass@k (rewards >= 1 pass), random@k (the mean reward) and, when every problem is
    math, majority@k over the stated answers: unbiased estimators over all n samples (core/algo/passk.py)."""
    from core.algo.passk import majority_at_k_curve, pass_at_k_curve

    rewards = np.array([p.rewards for p in problems], dtype=np.float64)            # (P, n)
    passes = pass_at_k_curve(rewards >= 1.0, list(ks))                              # (P, len(ks))
    out = {"pass": {k: passes[:, i] for i, k in enumerate(ks)},
           "random": {k: rewards.mean(axis=1) for k in ks}}
    if all(p.domain == "math" for p in problems):
        votes = majority_at_k_curve([list(p.answers) for p in problems], rewards >= 1.0, list(ks), seed=seed)
        out["majority"] = {k: votes[:, i] for i, k in enumerate(ks)}
    return out


def summarize_curves(curves: dict, seed: int = 0) -> dict:
    """{name: {k: (P,)}} -> {name: {k: {mean, lo, hi}}} with 95% bootstrap CIs over problems."""
    from core.algo.metrics import bootstrap_ci

    out = {}
    for name, by_k in curves.items():
        out[name] = {}
        for k, values in by_k.items():
            mean, lo, hi = bootstrap_ci(list(values), seed=seed)
            out[name][str(k)] = {"mean": mean, "lo": lo, "hi": hi}
    return out


def evaluate(problems: Sequence[SampledProblem], choose_batch: Callable[[list], list], ks: Sequence[int],
             draws: int, style: PromptStyle, seed: int = 0) -> dict:
    """The BoN curves of one generator's samples with one selector. `choose_batch(tasks)` returns one chosen
    position (or None) per SelectionTask; it is called once, with every subset that needs a choice.
    Returns {"curves": {selector, pass, random[, majority]}: {k: {mean, lo, hi}}, "problems", "draws",
    "judged_subsets", "subsets", "parse_failures"}."""
    ks = sorted({int(k) for k in ks})
    subsets = plan(problems, ks, draws, seed)
    jobs = [(p, s) for (p, _), drawn in subsets.items() for s in drawn if needs_choice(problems[p], s)]
    tasks = [selection_task(problems[p], s, style, f"{len(s)}-{j}") for j, (p, s) in enumerate(jobs)]
    picked = choose_batch(tasks) if tasks else []
    if len(picked) != len(tasks):
        raise ValueError(f"choose_batch answered {len(picked)} of {len(tasks)} tasks")
    choices = dict(zip(jobs, picked))
    curves = {"selector": selector_scores(problems, subsets, choices, draws, seed),
              **baseline_scores(problems, ks, seed)}
    return {"curves": summarize_curves(curves, seed), "problems": len(problems), "draws": draws,
            "judged_subsets": len(tasks), "subsets": sum(len(v) for v in subsets.values()),
            "parse_failures": sum(c is None for c in picked)}


#: the rows of the table (GenSelect, arXiv 2602.02143, Table 1) and the curve each reads; pass@1 is the mean reward,
#: the same at every k
TABLE_ROWS = (("pass@1", "random"), ("maj@k", "majority"), ("GenSelect@k", "selector"), ("pass@k", "pass"))


def table1(curves: dict) -> dict:
    """{row name: {k: {mean, lo, hi}}} in TABLE_ROWS order from `evaluate`'s curves; maj@k only when the curves
    have majority@k (every problem is math)."""
    return {row: dict(curves[name]) for row, name in TABLE_ROWS if name in curves}


def format_cell(cell: dict) -> str:
    """`mean [lo, hi]` with three decimals."""
    return f"{cell['mean']:.3f} [{cell['lo']:.3f}, {cell['hi']:.3f}]"


def format_table(result: dict) -> str:
    """`evaluate`'s result as a table: one row per metric (`table1`), one column per k, each cell a mean over
    problems with its 95% bootstrap CI, then how many subsets the selector judged."""
    rows = table1(result["curves"])
    ks = list(rows["GenSelect@k"])
    width = max(len(format_cell(c)) for by_k in rows.values() for c in by_k.values()) + 2
    lines = [f"{'metric':<12}" + "".join(f"{'k=' + k:>{width}}" for k in ks)]
    lines += [f"{row:<12}" + "".join(f"{format_cell(by_k[k]):>{width}}" for k in ks) for row, by_k in rows.items()]
    lines.append(f"{result['problems']} problems, 95% bootstrap CIs over problems; {result['judged_subsets']} of "
                 f"{result['subsets']} subsets judged by the selector (the others' samples all score the same); "
                 f"{result['parse_failures']} parse failures")
    return "\n".join(lines)


class LocalEngine:
    """One vLLM RolloutWorker of `model` in this process, on its own event loop, started on first use and shut down
    by `close` (or on leaving a `with` block): the selector's knockouts and, when the generator is the selector,
    its sampling too (one engine start instead of two)."""

    def __init__(self, model: str, rollout_cfg, dtype: str, response_form=None):
        self.model, self.rollout_cfg, self.dtype, self.response_form = str(model), rollout_cfg, dtype, response_form
        self.loop, self.worker = None, None

    def run(self, call: Callable):
        """`call(worker)`'s coroutine run to its end on the engine's loop (the engine starts on the first run)."""
        if self.worker is None:
            self.loop = self.loop or asyncio.new_event_loop()
            self.worker = self.loop.run_until_complete(self._start())
        return self.loop.run_until_complete(call(self.worker))

    async def _start(self):
        from actors.rollout.rollout_worker import RolloutWorker

        return RolloutWorker(self.rollout_cfg, self.model, dtype=self.dtype, response_form=self.response_form)

    def close(self) -> None:
        if self.worker is not None:
            self.loop.run_until_complete(self.worker.shutdown())
        if self.loop is not None:
            self.loop.close()
        self.loop, self.worker = None, None

    def __enter__(self) -> "LocalEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def selector_engine(selector: str, dtype: str = "float32", config: Optional[str] = None) -> LocalEngine:
    """The selector's LocalEngine (not started yet): the rollout settings of `config`, else of the run `selector`
    was exported from (driver.evaluate.rollout_settings), and its response form
    (driver.models.registry.response_form: `rollout.response_form.name: forced_judgment` included)."""
    from driver.evaluate import rollout_settings, run_config
    from driver.models.registry import response_form

    cfg = rollout_settings(selector, config)
    return LocalEngine(selector, cfg, dtype, response_form(selector, run_config(selector, config)))


async def knockouts_in_chunks(worker, tasks: list, window: int, style: PromptStyle) -> list:
    """`driver.evaluate.choose_knockout` over `tasks` in chunks of `driver.evaluate.CHUNK_PROMPTS` behind a progress
    bar (each task's tournament is its own, so the choices are those of one batch)."""
    from tqdm import tqdm

    from driver.evaluate import CHUNK_PROMPTS, choose_knockout

    choices = []
    with tqdm(total=len(tasks), desc="select", unit="subset", file=sys.stderr, dynamic_ncols=True) as bar:
        for start in range(0, len(tasks), CHUNK_PROMPTS):
            chunk = tasks[start:start + CHUNK_PROMPTS]
            choices += await choose_knockout(worker, chunk, window, style)
            bar.update(len(chunk))
    return choices


def knockout_chooser(selector: str, window: int, style: PromptStyle, dtype: str = "float32",
                     config: Optional[str] = None, engine: Optional[LocalEngine] = None) -> Callable[[list], list]:
    """choose_batch through a vLLM engine of `selector` (`engine`, else its own `selector_engine`, shut down after
    the batch): a greedy knockout tournament of groups of at most `window` candidates per task."""
    def choose_batch(tasks: list) -> list:
        with (selector_engine(selector, dtype, config) if engine is None else nullcontext(engine)) as used:
            return used.run(lambda worker: knockouts_in_chunks(worker, tasks, window, style))

    return choose_batch


def same_model(a: Optional[str], b: str) -> bool:
    """Whether two model paths name one folder (then one engine samples and selects)."""
    return bool(a) and Path(a).resolve() == Path(b).resolve()


def parse_ks(text: str) -> list:
    """The sorted distinct k of a comma list ("2,4,8"); ValueError naming `--ks` for anything else."""
    try:
        ks = sorted({int(k) for k in text.split(",") if k.strip()})
    except ValueError:
        raise ValueError(f"--ks {text}: not a comma list of whole numbers") from None
    if not ks or ks[0] < 1:
        raise ValueError(f"--ks {text}: give at least one k, each >= 1")
    return ks


def check_ks(ks: Sequence[int], n: int, source: str) -> None:
    """ValueError unless every k is at most `n`, the samples per problem (`source` says where n comes from)."""
    if max(ks) > n:
        raise ValueError(f"--ks {','.join(map(str, ks))}: every k must be in 1..{n} ({source})")


def selector_name(selector: str) -> str:
    """A short name for a selector folder: the run's name for RUN/export, else the folder's own."""
    folder = Path(selector).resolve()
    return folder.parent.name if folder.name == "export" else folder.name


def default_out(args: argparse.Namespace) -> Path:
    """The JSON output when --out is not given: beside --samples (bon-<selector>.json), else
    runs/bon/<problems file>-<selector>.json; never inside a model folder."""
    if args.samples:
        return Path(args.samples).with_name(f"bon-{Path(args.selector).parent.name}.json")
    return Path("runs") / "bon" / f"{Path(args.problems).stem}-{selector_name(args.selector)}.json"


def samples_beside(out: Path) -> Path:
    """Where `--problems` writes the scored samples of the output `out`: NAME.samples.jsonl beside NAME.json."""
    return out.with_name(f"{out.stem}.samples.jsonl")


def benchmark_samples(args: argparse.Namespace, ks: Sequence[int], out: Path,
                      engine: Optional[LocalEngine] = None) -> tuple:
    """(the samples file, what the output records about it) for `--problems`: the generator's samples (or the file's
    own candidates), labelled and written beside `out` (driver/bon_problems.py); `engine`: the generator's engine
    when it is already there (the selector's, when the generator is the selector). ValueError (DataError) for a bad
    file, row or generator folder, and for a k above the samples per problem, before any engine starts."""
    from driver.bon_problems import (benchmark_settings, label_benchmark, labels_summary, read_benchmark,
                                     sample_benchmark, sampling_cache, write_samples)
    from driver.data.files import BadRowError
    from driver.evaluate import engine_dtype, rollout_settings
    from driver.synth import format_labels

    cfg = benchmark_settings(args.problems, args.generator or "", args.samples_per_problem, args.temperature,
                             args.max_tokens, args.seed, args.label_function)
    path, record = samples_beside(out), {"problems_file": str(args.problems)}
    try:
        if args.generator:
            check_ks(ks, args.samples_per_problem, "--samples-per-problem")
            own = LocalEngine(args.generator, rollout_settings(args.generator, args.config),
                              engine_dtype(args.generator, args.config, args.dtype))
            with nullcontext(engine) if engine else own as generator:  # the generator's own is shut down after
                problems, record["generator"] = sample_benchmark(cfg, generator, sampling_cache(path, cfg))
        else:
            problems = read_benchmark(cfg)
            check_ks(ks, len(problems[0].candidates), f"the candidates per row of {args.problems}")
    except BadRowError as err:
        hint = "" if args.generator or "'candidates'" not in str(err) else " (a problems-only file needs --generator)"
        raise ValueError(f"{err}{hint}") from None
    labelled, stats = label_benchmark(problems, args.label_function)
    print(format_labels(stats.to_dict()))
    record["labels"] = labels_summary(stats)
    print(f"wrote {write_samples(labelled, path)} ({len(labelled)} problems x {len(labelled[0].candidates)} samples)")
    return path, record


def _parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m driver.bon", description=__doc__.split("\n\n")[0])
    parser.add_argument("--selector", required=True, help="selector model folder (e.g. RUN/export)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--samples", help="a generator's scored samples (eval_samples/step<S>.jsonl, or the "
                                          "NAME.samples.jsonl a --problems run wrote)")
    source.add_argument("--problems", help="a benchmark: the project's data file (.jsonl or .parquet; id, problem, "
                                           "answer, and candidates unless --generator samples them)")
    parser.add_argument("--generator", default=None, help="with --problems: the model folder that samples the "
                                                          "solutions (the file's own candidates are then not read)")
    parser.add_argument("--samples-per-problem", type=int, default=16, help="with --generator: solutions per problem")
    parser.add_argument("--temperature", type=float, default=1.0, help="with --generator: sampling temperature")
    parser.add_argument("--max-tokens", type=int, default=256, help="with --generator: longest solution in tokens")
    parser.add_argument("--label-function", default="",
                        help="with --problems: package.module:function labels every candidate instead of "
                             "math-verify (as data.label_function.name)")
    parser.add_argument("--ks", default="2,4,8,16", help="comma list of k (each at most the samples per problem)")
    parser.add_argument("--draws", type=int, default=8, help="random k-subsets per problem and k")
    parser.add_argument("--knockout-window", type=int, default=2, help="candidates per knockout group (>= 2)")
    parser.add_argument("--exclude", action="append", default=[],
                        help="a folder whose problems are left out of the evaluation (repeatable): the selector's "
                             "training dataset, or its start model (a pretrained tiny model's corpus)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default=None, choices=["float32", "bfloat16"],
                        help="engine dtype (default: the model.dtype of --config, else of the run each model was "
                             "exported from, else float32)")
    parser.add_argument("--config", default=None,
                        help="a config (name or YAML path) whose rollout.* settings (response budget, engine, "
                             "deadlines) to read the selector and run the generator with (default: each model's "
                             "run config.yaml beside RUN/export, else the schema's)")
    parser.add_argument("--out", default=None, help="JSON output (default: beside --samples, bon-<selector>.json; "
                                                    "with --problems runs/bon/<file>-<selector>.json)")
    return parser.parse_args(argv)


def _argument_errors(args: argparse.Namespace) -> list:
    """What is wrong with the options alone, before any file is read (messages naming the option)."""
    return [m for m, bad in (("--generator needs --problems (--samples are sampled already)",
                              bool(args.generator and args.samples)),
                             ("--samples-per-problem must be >= 2", args.samples_per_problem < 2),
                             ("--knockout-window must be >= 2", args.knockout_window < 2),
                             ("--draws must be >= 1", args.draws < 1)) if bad]


def main(argv: Optional[Sequence[str]] = None) -> int:
    from core.env import apply_defaults
    from driver.evaluate import engine_dtype

    args = _parse_args(sys.argv[1:] if argv is None else argv)
    apply_defaults()
    out = Path(args.out) if args.out else default_out(args)
    try:
        errors = _argument_errors(args)
        if errors:
            raise ValueError(errors[0])
        ks = parse_ks(args.ks)
        engine = selector_engine(args.selector, engine_dtype(args.selector, args.config, args.dtype), args.config)
    except (ValueError, OSError) as err:  # a bad option, --config or response form: one line
        print(f"driver.bon: {err}", file=sys.stderr)
        return 2
    with engine:
        return measure(args, ks, out, engine)


def measure(args: argparse.Namespace, ks: Sequence[int], out: Path, engine: LocalEngine) -> int:
    """The command's work once its options are read: the samples (sampled and labelled with --problems), the
    selector's choices on `engine`, the table printed and the JSON written to `out`; 2 with one line for bad input."""
    from core.algo.genselect import read_prompt_style

    try:
        shared = engine if same_model(args.generator, args.selector) else None
        samples, record = benchmark_samples(args, ks, out, shared) if args.problems else (Path(args.samples), {})
        problems = read_samples(samples)
        check_ks(ks, len(problems[0].rewards), "the samples per problem")
        problems, excluded = exclude_seen(problems, args.exclude)
    except (ValueError, OSError) as err:
        print(f"driver.bon: {err}", file=sys.stderr)
        return 2
    if not problems:
        print(f"driver.bon: every problem of {samples} is in {', '.join(args.exclude)}", file=sys.stderr)
        return 2
    style = read_prompt_style(args.selector)
    chooser = knockout_chooser(args.selector, args.knockout_window, style, engine=engine)
    result = evaluate(problems, chooser, ks, args.draws, style, args.seed)
    result.update({"table": table1(result["curves"]), "selector": str(args.selector), "samples": str(samples),
                   **record, "knockout_window": args.knockout_window, "seed": args.seed,
                   "excluded_problems": excluded, "exclude": args.exclude})
    if excluded:
        print(f"{excluded} problems left out: the selector saw them ({', '.join(args.exclude)})")
    print(format_table(result))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

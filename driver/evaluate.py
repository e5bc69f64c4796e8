"""Best-of-N evaluation of a selector on a held-out selection set.

    python -m driver.evaluate --model runs/default/export --dataset .cache/datasets/<name> [--prompts 200]

    python -m driver.evaluate ... --knockout-window 2    # select by a knockout tournament of pairs

prints GenSelect@N (the selector's accuracy) next to pass@1, majority@N, random@N and pass@N, each with a
95% bootstrap confidence interval over *problems* (prompts of one problem are averaged first), and writes
the same as JSON. The selector answers greedily (temperature 0), one response per prompt; the chosen
candidate is scored with the labels the verifiers gave at synthesis (math-verify / sandboxed unit tests).
With `--knockout-window W`, every prompt of more than W candidates is selected by a knockout tournament
(core/algo/knockout.py, as NeMo-Skills' GenSelect does for N beyond its window): balanced groups of at
most W candidates, one greedy judgment each, the winners go on to the next round; the same prompts, labels and
metrics, so the two modes compare directly. The JSON keeps each prompt's choice (`choices`, by prompt id), so
runs on the same prompts can be compared paired, prompt by prompt.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

from core.algo.genselect import PromptStyle, parse_judgment, reordered_task
from core.algo.knockout import both_orders_pick
from core.algo.selection import knockout, round_robin
from driver.eval_metrics import (BASELINES, by_size, own_answer_breakdown, own_answers,
                                 sampled_accuracy, selection_metrics)
from core.algo.metrics import unforced_rate

CHUNK_PROMPTS = 64  # prompts per batch of the command line's evaluation: one progress update each

async def choose(worker, tasks: Sequence, max_tokens: Optional[int] = None) -> list:
    """Greedy selections of `worker` (a RolloutWorker or its Ray handle's async call) for `tasks`."""
    groups = await worker.generate(list(tasks), n=1, temperature=0.0, max_tokens=max_tokens)
    return [parse_judgment(g.rollouts[0].response_text, g.task.num_candidates, g.rollouts[0].truncated).index
            for g in groups]


def sub_task(task, members: Sequence[int], style: PromptStyle):
    """`task` restricted to the candidates `members` (in that order), its prompt rendered again."""
    return reordered_task(task, members, style, f"{task.prompt_id}/ko{'-'.join(map(str, members))}")


async def choose_knockout(worker, tasks: Sequence, window: int, style: PromptStyle,
                          max_tokens: Optional[int] = None, both_orders: bool = False) -> list:
    """Greedy knockout selections (indices into each task's candidates; None = the final judgment did not
    parse): `core.algo.selection.knockout`, the procedure the HTTP service runs, with every round's groups of
    every task judged in one batch. `both_orders`: each group is judged as given and reversed from the log-probs
    of every index (`worker.index_logprobs`), and the candidate with the higher summed log-prob advances
    (core.algo.knockout.both_orders_pick: a position preference cancels); else one greedy judgment a group."""
    async def judge(judged: list) -> list:
        if both_orders:
            prompts = [sub_task(tasks[i], order, style) for i, g in judged for order in (g, g[::-1])]
            logprobs = await worker.index_logprobs(prompts)
            return [{"local": both_orders_pick(logprobs[2 * k][0], logprobs[2 * k + 1][0])}
                    for k in range(len(judged))]
        results = await worker.generate([sub_task(tasks[i], g, style) for i, g in judged], n=1, temperature=0.0,
                                        max_tokens=max_tokens)
        return [{"local": parse_judgment(r.rollouts[0].response_text, len(g), r.rollouts[0].truncated).index}
                for (_, g), r in zip(judged, results)]

    choices, _ = await knockout([t.num_candidates for t in tasks], window, judge)
    return choices


async def choose_round_robin(worker, tasks: Sequence, style: PromptStyle, by_answer: bool = True) -> list:
    """Round-robin selections (`core.algo.selection.round_robin`, the procedure the HTTP service runs): every pair
    of every task judged as given and reversed from the log-probs of its two indices (`worker.index_logprobs`, one
    batch for all tasks), wins pooled by the candidates' final answers (`by_answer`; else every candidate alone).
    Indices into each task's candidates."""
    async def read(orders: list) -> list:
        readings = await worker.index_logprobs([sub_task(tasks[i], order, style) for i, order in orders])
        return [logprobs for logprobs, _version in readings]

    answers = [t.candidate_answers for t in tasks] if by_answer else None
    return [index for index, _wins in await round_robin([t.num_candidates for t in tasks], read, answers)]


EVAL_TIMEOUT_RETRIES = 2  # a held-out evaluation past its deadline is run again this many times before the run stops


def is_timeout(err: BaseException) -> bool:
    """An error that says a call ran past its deadline: the rollout actor's RolloutTimeout (also as Ray's
    RayTaskError, which subclasses the remote error's type), ray.get's GetTimeoutError, asyncio's TimeoutError."""
    from ray.exceptions import GetTimeoutError

    from actors.rollout.rollout_worker import RolloutTimeout

    return isinstance(err, (RolloutTimeout, GetTimeoutError, asyncio.TimeoutError, TimeoutError))


def retry_on_timeout(call, what: str, warn, retries: int = EVAL_TIMEOUT_RETRIES):
    """`call()`, run again up to `retries` times while it times out (`is_timeout`); `warn(message)` is told each
    time. An evaluation is not on the training path, and a deadline missed because another job shared the
    machine (an 8x slowdown was seen on 2 cores) should not end a run. The last timeout, and any other error,
    propagate."""
    for attempt in range(retries + 1):
        try:
            return call()
        except Exception as err:
            if not is_timeout(err) or attempt == retries:
                raise
            warn(f"{what} ran past its deadline (attempt {attempt + 1} of {retries + 1}; the machine may be busy "
                 f"with other work); running it again")


def choose_remote(rollout_handle, tasks: Sequence, timeout_s: float, samples: int = 0) -> tuple:
    """Greedy choices through a Ray actor handle (used by the training driver), with `samples > 0` the sampled
    accuracy of that many temperature-1 responses per prompt (else None), the greedy responses'
    `own_answer_breakdown` ({} unless they solve then point) and their `own_answers`:
    (choices, sampled, breakdown, answers). Under a forced judgment (`rollout.response_form.name=forced_judgment`) the
    breakdown also holds `unforced_judgment_rate`, the share of greedy responses whose judgment the model wrote itself.

    The two generate calls run one after the other: the rollout actor derives each call's deadline from that
    call's own sequences (core/deadlines.py), so a greedy call sharing the engine with the sampled one (4x its
    sequences) could time out on a loaded machine (it did: a 200-prompt step-0 evaluation past its 70 s)."""
    groups = _get_or_cancel(rollout_handle.generate.remote(list(tasks), n=1, temperature=0.0), timeout_s)
    choices = [parse_judgment(g.rollouts[0].response_text, g.task.num_candidates, g.rollouts[0].truncated).index
               for g in groups]
    responses = [g.rollouts[0].response_text for g in groups]
    breakdown = {**own_answer_breakdown([g.task for g in groups], responses, choices), **unforced_rate(groups)}
    if not samples:
        return choices, None, breakdown, own_answers(responses)
    sampled = _get_or_cancel(rollout_handle.generate.remote(list(tasks), n=samples, temperature=1.0), timeout_s)
    return choices, sampled_accuracy(sampled), breakdown, own_answers(responses)


def solve_remote(rollout_handle, problems: Sequence, max_tokens: int, timeout_s: float) -> list:
    """One greedy solution of each `(problem_id, problem_text, domain)` of `problems`, written without seeing any
    candidate (`RolloutWorker.sample_solutions`: the generator prompt, temperature 0, at most `max_tokens` tokens),
    through a Ray actor handle: Q solution texts, in order (the solve-alone rule, driver/baselines.py)."""
    groups = _get_or_cancel(rollout_handle.sample_solutions.remote(list(problems), 1, 0.0, max_tokens), timeout_s)
    return [group[0].response_text for group in groups]


def _get_or_cancel(ref, timeout_s: float):
    """`ray.get(ref, timeout=timeout_s)`; past the deadline the actor call is cancelled before the timeout error
    propagates (as `_answer_or_cancel` does for the tournaments)."""
    import ray

    try:
        return ray.get(ref, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        ray.cancel(ref)
        raise


async def _answer_or_cancel(ref):
    """Await a Ray actor call; when the waiting is cancelled (the tournament's deadline), cancel the call in the
    actor too (an async actor cancels its asyncio task; vLLM aborts the requests), so that a retried evaluation
    does not share the engine with the abandoned one."""
    import ray

    try:
        return await ref
    except asyncio.CancelledError:
        ray.cancel(ref)
        raise


class _RemoteWorker:
    """A Ray rollout actor handle with the async `generate` of a RolloutWorker (for choose_knockout)."""

    def __init__(self, handle):
        self.handle = handle

    async def generate(self, tasks, **kwargs):
        return await _answer_or_cancel(self.handle.generate.remote(tasks, **kwargs))

    async def index_logprobs(self, tasks):
        return await _answer_or_cancel(self.handle.index_logprobs.remote(tasks))


def choose_knockout_remote(rollout_handle, tasks: Sequence, window: int, style: PromptStyle, timeout_s: float,
                           both_orders: bool = False) -> list:
    """choose_knockout through a Ray actor handle, from synchronous code (the training driver); raises
    asyncio.TimeoutError when the whole tournament takes longer than `timeout_s`, its calls in flight cancelled."""
    return asyncio.run(asyncio.wait_for(choose_knockout(_RemoteWorker(rollout_handle), tasks, window, style,
                                                        both_orders=both_orders), timeout_s))


def choose_round_robin_remote(rollout_handle, tasks: Sequence, style: PromptStyle, timeout_s: float,
                               by_answer: bool = True) -> list:
    """choose_round_robin through a Ray actor handle, from synchronous code (the training driver)."""
    return asyncio.run(asyncio.wait_for(choose_round_robin(_RemoteWorker(rollout_handle), tasks, style, by_answer),
                                        timeout_s))


def format_table(result: dict) -> str:
    names = {"genselect": "GenSelect@N (selector)", "pass_at_1": "pass@1", "majority": "majority@N",
             "random": "random@N", "pass_at_n": "pass@N (oracle)"}
    lines = [f"{'metric':<24}{'value':>8}   95% CI (over {result['problems']} problems)"]
    for key in BASELINES:
        lines.append(f"{names[key]:<24}{result[key]:>8.3f}   [{result[key + '_lo']:.3f}, {result[key + '_hi']:.3f}]")
    lines.append(f"{'selector - majority@N':<24}{result['over_majority']:>+8.3f}   [{result['over_majority_lo']:+.3f}, "
                 f"{result['over_majority_hi']:+.3f}] (paired by problem)")
    lines.append(f"{'parse failures':<24}{result['parse_failure_rate']:>8.3f}   ({result['prompts']} prompts)")
    return "\n".join(lines)


def rollout_settings(model: str, config: Optional[str] = None):
    """The rollout.* settings (core.config.RolloutConfig, one sample a prompt) a selector is read with: those of
    `config` (a config name in configs/ or a YAML path), else those of the run it was exported from (`RUN/config.yaml`
    beside `RUN/export`: its response budget, engine settings and deadlines), else the schema's."""
    import dataclasses

    from core.config import RolloutConfig

    run = run_config(model, config)
    return dataclasses.replace(run.rollout if run else RolloutConfig(), samples_per_prompt=1)


def engine_dtype(model: str, config: Optional[str] = None, dtype: Optional[str] = None) -> str:
    """The dtype an engine of `model` runs in: `dtype` when given, else `model.dtype` of `config`, else of the run
    `model` was exported from (as `rollout_settings`), else float32."""
    if dtype:
        return dtype
    run = run_config(model, config)
    return run.model.dtype if run else "float32"


def split_tasks(dataset, split: str, run=None) -> list:
    """The prompts of `split` of `dataset` (a loaded selection dataset): "validation" and "test" as a run with the
    config `run` reads them (driver/eval_sets.py: its eval_prompts and eval_test_prompts; None: the schema's),
    "heldout" every held-out prompt, "train" the training prompts."""
    from core.config import TrainConfig
    from driver.eval_sets import split_heldout

    if split in ("heldout", "train"):
        return list(getattr(dataset, split))
    cfg = run or TrainConfig()
    validation, test = split_heldout(dataset.heldout, cfg.eval_prompts, cfg.eval_test_prompts)
    return validation if split == "validation" else test


def default_output(model: str, name: str) -> Path:
    """Where an evaluation of `model` writes `name` by default: beside RUN/export in its run folder, else under
    runs/evaluate/<model folder name>/; never inside the model folder."""
    model = Path(model)
    folder = model.parent if model.name == "export" else Path("runs") / "evaluate" / model.resolve().name
    return folder / name


def run_config(model: str, config: Optional[str] = None):
    """The TrainConfig of `config` (a config name or YAML path), else of the run `model` was exported from (the
    config.yaml inside an export of `export_every` or `driver.export`, or `RUN/config.yaml` beside `RUN/export`;
    read as written, older key paths moved), else None."""
    from core.config import from_yaml, load_config

    if config:
        return load_config(config)
    for written in (Path(model) / "config.yaml", Path(model).parent / "config.yaml"):
        if written.is_file() and (written.parent == Path(model) or Path(model).name == "export"):
            return from_yaml(written.read_text())
    return None


def _parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m driver.evaluate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="selector: a Hugging Face folder (e.g. RUN/export)")
    parser.add_argument("--dataset", required=True, help="selection dataset folder (with manifest.json)")
    parser.add_argument("--split", default="validation", choices=["validation", "test", "heldout", "train"],
                        help="validation (default): the first eval_prompts held-out prompts, as a run reads them; "
                             "test: eval_test_prompts prompts of the other held-out problems (driver/eval_sets.py; "
                             "both sizes from the config); heldout: every held-out prompt; train")
    parser.add_argument("--prompts", type=int, default=0, help="evaluate the first N prompts (0: all)")
    parser.add_argument("--max-tokens", type=int, default=None, help="response budget (default: config's)")
    parser.add_argument("--config", default=None,
                        help="a config (name in configs/ or YAML path) whose rollout.* engine settings, response "
                             "budget and deadlines to use (default: the run's config.yaml beside MODEL when MODEL is "
                             "RUN/export, else the schema's)")
    parser.add_argument("--knockout-window", type=int, default=0,
                        help="select by a knockout tournament of groups of at most this many candidates (>= 2)")
    parser.add_argument("--both-orders", action="store_true",
                        help="with --knockout-window: judge each group as given and reversed, from the log-probs of "
                             "every index (needs a one-token index answer)")
    parser.add_argument("--round-robin", choices=["answer", "candidate"], default=None,
                        help="select by a round robin of pairs, each read in both orders, wins pooled by final answer "
                             "(`answer`: majority voting's pick for a selector at chance) or per candidate; "
                             "core/algo/round_robin.py")
    parser.add_argument("--dtype", default=None, choices=["float32", "bfloat16"],
                        help="engine dtype (default: the config's model.dtype, else float32)")
    parser.add_argument("--out", default=None, help="JSON output (default: RUN/eval_<split>.json for MODEL=RUN/export, "
                                                    "else runs/evaluate/<model folder>/eval_<split>.json; never "
                                                    "inside the model folder)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    from core.env import apply_defaults

    apply_defaults()
    from actors.rollout.rollout_worker import RolloutWorker
    from driver.models.registry import response_form
    from driver.data.dataset import load_dataset

    args = _parse_args(sys.argv[1:] if argv is None else argv)
    run_cfg = run_config(args.model, args.config)
    tasks = split_tasks(load_dataset(args.dataset), args.split, run_cfg)
    tasks = tasks[: args.prompts] if args.prompts else tasks
    if not tasks:
        print(f"no prompts in {args.dataset} ({args.split}"
              f"{': the config sets eval_test_prompts=0' if args.split == 'test' else ''})", file=sys.stderr)
        return 2
    args.dtype = engine_dtype(args.model, args.config, args.dtype)
    if args.knockout_window == 1 or args.knockout_window < 0:
        print("--knockout-window must be 0 (off) or at least 2", file=sys.stderr)
        return 2
    if args.both_orders and not args.knockout_window:
        print("--both-orders needs --knockout-window", file=sys.stderr)
        return 2
    if args.round_robin and args.knockout_window:
        print("--round-robin and --knockout-window are two selection procedures: pick one", file=sys.stderr)
        return 2
    from types import SimpleNamespace

    built_with = json.loads((Path(args.dataset) / "manifest.json").read_text())["config"]
    style = PromptStyle.of(SimpleNamespace(**built_with))  # as the dataset's prompts were rendered
    cfg = rollout_settings(args.model, args.config)
    if args.max_tokens:
        cfg.max_response_tokens = args.max_tokens

    async def select(worker, chunk: list) -> list:
        if args.round_robin:
            return await choose_round_robin(worker, chunk, style, by_answer=args.round_robin == "answer")
        if args.knockout_window:
            return await choose_knockout(worker, chunk, args.knockout_window, style, both_orders=args.both_orders)
        return await choose(worker, chunk)

    async def run() -> list:
        from tqdm import tqdm

        form = response_form(args.model, run_cfg)
        worker = RolloutWorker(cfg, args.model, dtype=args.dtype, response_form=form)
        choices = []
        try:  # chunks of prompts (each prompt's selection is its own: the same choices as one batch)
            with tqdm(total=len(tasks), desc="evaluate", unit="prompt", file=sys.stderr, dynamic_ncols=True) as bar:
                for start in range(0, len(tasks), CHUNK_PROMPTS):
                    chunk = tasks[start:start + CHUNK_PROMPTS]
                    choices += await select(worker, chunk)
                    bar.update(len(chunk))
            return choices
        finally:
            await worker.shutdown()

    choices = asyncio.run(run())
    result = selection_metrics(tasks, choices)
    result.update({"model": str(args.model), "dataset": str(args.dataset), "split": args.split,
                   "knockout_window": args.knockout_window, "both_orders": args.both_orders,
                   "round_robin": args.round_robin, "by_size": by_size(tasks, choices),
                   "choices": {t.prompt_id: c for t, c in zip(tasks, choices)}})
    print(format_table(result))
    suffix = (f"_knockout{args.knockout_window}" + ("_both" if args.both_orders else "")) if args.knockout_window else ""
    suffix = f"_round_robin_{args.round_robin}" if args.round_robin else suffix
    out = Path(args.out) if args.out else default_output(args.model, f"eval_{args.split}{suffix}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

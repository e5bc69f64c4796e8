"""How far can "solve, then point" get on the no-cue set? The model's own solutions with an exact pointer.

    .venv/bin/python benchmarks/solve_then_match.py --model .cache/models/<pretrained> \
        --dataset .cache/datasets/<no-cue 2-8 set> [--problems 500] [--out FILE]

The no-cue routes sessions 17-20 left open write the answer the selector believes and then name a candidate that
states it. Session 20 showed the naming half (a pointer) is learnable once the index sits beside the answer
(`pointer_pretrain.py --query beside`). This measures the other half with no selection training at all: the model
solves each held-out problem itself (greedy, the pretraining corpus's `Problem: ... Solution:` format, its last
`Answer:` line), and a fixed rule then points *exactly* at a candidate with that final answer. What the rule scores
is therefore an upper bound on what a learned pointer over the model's own answer could give. When no candidate
states the model's answer the rule falls back to:

* `majority`: a candidate of the most common answer (ties broken by a seeded draw), i.e. majority voting;
* `random`: a seeded random candidate;
* `none`: no choice (scored wrong): the route alone, with no fallback.

With `--context prompt` the model solves each prompt's problem after that whole selection prompt, where a selector
would write its solution; with `--context other-prompt`, after the selection prompt of another held-out problem (the
same positions and form, none of this problem's candidates in view) (positions ~300-900; session 19 found arithmetic learned one text per row fails there).

Printed per rule: GenSelect@N with its 95% bootstrap CI over problems, majority@N, and the margin over majority@N
paired by problem (`driver.evaluate.selection_metrics`), plus the model's own solve rate over problems and the share
of prompts where its answer matches a candidate. Problems of the model's pretraining corpus (`pretrain.json`) are
left out, and those of any model named by `--exclude-pretraining-of` (a model continued from another one). Pure torch on CPU (batched greedy generation), a minute or two for 500 problems.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from driver.models.pick_point_start import normalize_answer as normalize  # noqa: E402  (the library's rule)

FALLBACKS = ("majority", "random", "none")
ANSWER_LINE = re.compile(r"^\s*Answer:\s*(.+?)\s*$", re.MULTILINE)


def own_answer(solution_text: str) -> str | None:
    """The last `Answer:` line's value of a generated solution (normalized), None when there is none."""
    found = ANSWER_LINE.findall(solution_text)
    return normalize(found[-1]) if found else None


def choose(candidate_answers, own, fallback: str, rng: random.Random):
    """Index of the first candidate whose answer equals `own`; else the `fallback`'s choice (None for `none`).

    Args:
        candidate_answers: N final answers as the dataset holds them.
        own: the model's normalized answer, or None.
        fallback: one of FALLBACKS.
        rng: the seeded draw for ties (`majority`) and for `random`.
    """
    answers = [normalize(a) for a in candidate_answers]
    if own is not None and own in answers:
        return answers.index(own)
    if fallback == "none":
        return None
    if fallback == "random":
        return rng.randrange(len(answers))
    votes = Counter(a for a in answers if a is not None)
    if not votes:
        return rng.randrange(len(answers))
    top = max(votes.values())
    pick = rng.choice(sorted(a for a, n in votes.items() if n == top))
    return answers.index(pick)


def head_text(problem) -> str:
    """What the model continues with its solution: `Problem: ... Solution:`, after the text before if given."""
    from driver.models.pretrain import worked_solution_head

    before, text = problem if isinstance(problem, tuple) else ("", problem)
    return before + worked_solution_head(text)


def solve(model, tokenizer, problems: list, max_new_tokens: int = 64, batch_size: int = 32) -> list:
    """The model's greedy worked solutions of `problems` (the text after `Solution:`, cut at EOS or a blank
    line), generated in left-padded batches of `batch_size`. A problem is its text, or (text before, problem):
    the text before is read first (a selection prompt)."""
    import torch

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    texts = []
    for start in range(0, len(problems), batch_size):
        rows = [tokenizer(head_text(p))["input_ids"] for p in problems[start:start + batch_size]]
        width = max(map(len, rows))
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        with torch.no_grad():
            out = model.generate(ids.to(model.device), attention_mask=mask.to(model.device), max_new_tokens=max_new_tokens, do_sample=False,
                                 eos_token_id=tokenizer.eos_token_id, pad_token_id=pad)
        texts += [tokenizer.decode(row[width:], skip_special_tokens=True).split("\n\n")[0] for row in out]
    return texts


def evaluate_rules(tasks: list, own_by_prompt: dict, seed: int = 0) -> dict:
    """{fallback: selection_metrics} of the exact-pointer rule on `tasks`, plus `matched_share` (prompts where
    the model's answer is one of the candidates') and `solve_rate` (its answer equals the reference: the mean
    over each problem's prompts, averaged over problems). `own_by_prompt`: {prompt_id: the model's normalized
    answer or None}."""
    from collections import defaultdict

    from driver.evaluate import selection_metrics

    out = {}
    for fallback in FALLBACKS:
        rng = random.Random(f"{seed}-{fallback}")
        choices = [choose(t.candidate_answers, own_by_prompt[t.prompt_id], fallback, rng) for t in tasks]
        out[fallback] = selection_metrics(tasks, choices, seed=seed)
    matched = [own_by_prompt[t.prompt_id] in {normalize(a) for a in t.candidate_answers} for t in tasks]
    out["matched_share"] = sum(matched) / len(tasks)
    solved = defaultdict(list)
    for t in tasks:
        solved[t.problem_id].append(own_by_prompt[t.prompt_id] == normalize(t.reference))
    out["solve_rate"] = sum(sum(v) / len(v) for v in solved.values()) / len(solved)
    out["problems"] = len(solved)
    return out


CONTEXTS = ("start", "prompt", "other-prompt")


def solving_inputs(tasks: list, context: str) -> dict:
    """{key: (text before, problem)} to solve. `start`: one per problem (key = problem_id), nothing before;
    `prompt`: one per prompt (key = prompt_id), its own selection prompt before, where a selector writes;
    `other-prompt`: one per prompt, the prompt of the next task that belongs to another problem before."""
    if context == "start":
        return {t.problem_id: ("", t.problem) for t in tasks}
    if context == "prompt":
        return {t.prompt_id: (t.prompt + "\n\n", t.problem) for t in tasks}
    inputs, n = {}, len(tasks)
    for i, t in enumerate(tasks):
        other = next(tasks[(i + k) % n] for k in range(1, n) if tasks[(i + k) % n].problem_id != t.problem_id)
        inputs[t.prompt_id] = (other.prompt + "\n\n", t.problem)
    return inputs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a tiny model folder (pretrained on worked solutions)")
    parser.add_argument("--dataset", required=True, help="a no-cue selection dataset folder (its held-out split)")
    parser.add_argument("--problems", type=int, default=500, help="held-out problems to solve (all their prompts)")
    parser.add_argument("--exclude-pretraining-of", action="append", default=[], metavar="MODEL",
                        help="also leave out the problems this model folder was pretrained on (its pretrain.json): "
                             "for a model continued from another one")
    parser.add_argument("--context", choices=CONTEXTS, default="start",
                        help="what precedes the problem: nothing (once per problem), its own selection prompt "
                             "(where a selector writes), or another problem's selection prompt")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="JSON output")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from driver.data.dataset import load_dataset
    from driver.data.procedural import problem_key
    from driver.models.pretrain import problems_of_pretrained

    torch.manual_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    seen = {problem_key(p) for folder in [args.model, *args.exclude_pretraining_of]
            for p in problems_of_pretrained(folder)}
    tasks = [t for t in load_dataset(args.dataset).heldout if problem_key(t.problem) not in seen]
    kept = set(list(dict.fromkeys(t.problem_id for t in tasks))[: args.problems])
    tasks = [t for t in tasks if t.problem_id in kept]
    inputs = solving_inputs(tasks, args.context)
    solutions = solve(model, tokenizer, list(inputs.values()), batch_size=32 if args.context == "start" else 8)
    own = dict(zip(inputs, map(own_answer, solutions)))
    if args.context == "start":
        own = {t.prompt_id: own[t.problem_id] for t in tasks}
    result = evaluate_rules(tasks, own, seed=args.seed)
    print(f"{result['problems']} problems, {len(tasks)} prompts: the model solves {result['solve_rate']:.3f} of "
          f"the problems; its answer is a candidate's in {result['matched_share']:.3f} of the prompts")
    for fallback in FALLBACKS:
        m = result[fallback]
        print(f"  point at its answer, else {fallback:8s}: GenSelect@N {m['genselect']:.3f} "
              f"[{m['genselect_lo']:.3f}, {m['genselect_hi']:.3f}]  majority@N {m['majority']:.3f}  "
              f"over majority {m['over_majority']:+.3f} [{m['over_majority_lo']:+.3f}, {m['over_majority_hi']:+.3f}]")
    if args.out:
        Path(args.out).write_text(json.dumps({"model": args.model, "dataset": args.dataset, **result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

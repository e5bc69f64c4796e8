"""Does the model's arithmetic survive a selection prompt? Its preference at the first disputed line, by context.

    .venv/bin/python benchmarks/context_likelihood.py --model .cache/models/<pretrained> \
        --dataset .cache/datasets/<hedge-free pairs> [--pairs 400] [--out FILE]

`likelihood_check.py` showed that a model pretrained on correct worked solutions prefers the correct candidate of
92% of hedge-free pairs when it scores each candidate *on its own*, as a worked solution. A selector never sees a
candidate on its own. For each held-out pair whose first disputed line has a shared beginning (`16 + 9 = ` of
`16 + 9 = 15` / `16 + 9 = 25`), this compares the model's log-probability of the two continuations (`15` and
`25`, each with its newline) after that beginning, in four contexts:

* `worked_solution`: the pretraining format (`Problem: ... Solution:`), the correct candidate's lines before the
  disputed one, then the shared beginning: the model's own arithmetic, nothing else in view;
* `far_worked_solution`: the same, after other problems' worked solutions at least as long as the selection
  prompt (the same positions as the next context, but no slipped version in view);
* `prompt_then_worked_solution`: the same, after the whole selection prompt (both candidates in view);
* `selection_open_line`: the selection prompt, the response separator, then `Work it out: ` and the shared
  beginning (benchmarks/route_probe.py's `--open-line`);
* `selection_diff_open_line`: as the last, with the first disputed row repeated before the question
  (learnability.py's `--diff-view`).

Pair accuracy (the correct continuation more likely) with a 95% bootstrap CI, and `later_shown`, how often the
preferred continuation is the one of candidate 1 (the version shown last): a preference for what is in view
rather than for what is right.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

CONTEXTS = ("worked_solution", "far_worked_solution", "prompt_then_worked_solution", "selection_open_line",
            "selection_diff_open_line")


def contexts(task, filler: str = "") -> dict:
    """{context name: text ending at the first disputed line's shared beginning} for a pair `task` with one
    correct candidate (see the module docstring; `filler`: the other problems' worked solutions that precede
    `far_worked_solution`); {} when the disputed line has no shared beginning."""
    from driver.models.pretrain import worked_solution_head
    from learnability import with_diff_view
    from route_probe import disputed_line, open_prefix, route_prompt

    line, lines, common = disputed_line(task.candidates)
    shared = open_prefix(lines, common)
    if not shared:
        return {}
    right = task.labels.index(1.0)
    before = "".join(row + "\n" for row in task.candidates[right].split("\n")[:line])
    worked = worked_solution_head(task.problem) + before + shared
    return {"worked_solution": worked, "far_worked_solution": filler + worked, "prompt_then_worked_solution": task.prompt + "\n\n" + worked,
            "selection_open_line": route_prompt(task, open_line=True),
            "selection_diff_open_line": route_prompt(with_diff_view(task), open_line=True)}


def filler_for(task, others: list) -> str:
    """Correct worked solutions of `others` (other problems), one after another, until at least as long as
    `task`'s selection prompt, each ending with a blank line."""
    from driver.models.pretrain import worked_solution_head

    text = ""
    for other in others:
        if len(text) >= len(task.prompt):
            break
        text += worked_solution_head(other.problem) + other.candidates[other.labels.index(1.0)] + "\n\n"
    return text


def continuations(task) -> list:
    """Each candidate's rest of the first disputed line after the shared beginning, with its newline."""
    from route_probe import disputed_line, open_prefix

    _, lines, common = disputed_line(task.candidates)
    shared = open_prefix(lines, common)
    return [line[len(shared):] + "\n" for line in lines]


def continuation_logp(model, tokenizer, context: str, continuation: str) -> float:
    """log p(continuation | context), summed over the continuation's tokens."""
    import torch

    head = tokenizer(context, add_special_tokens=False)["input_ids"]
    tail = tokenizer(continuation, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([head + tail])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
    return float(logp[len(head) - 1:].gather(1, ids[0, len(head):, None]).sum())


def main(argv=None) -> int:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from core.algo.metrics import bootstrap_ci
    from driver.data.dataset import load_dataset

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--pairs", type=int, default=400, help="held-out pairs to read (before the shared-prefix filter)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype="float32").eval()
    pairs = [t for t in load_dataset(args.dataset).heldout[: args.pairs]
             if t.num_candidates == 2 and sorted(t.labels) == [0.0, 1.0]]
    hits = {name: [] for name in CONTEXTS}
    later = {name: [] for name in CONTEXTS}
    for i, task in enumerate(pairs):
        others = [t for t in pairs[i + 1:] + pairs[:i] if t.problem != task.problem]
        texts, right = contexts(task, filler_for(task, others)), task.labels.index(1.0)
        for name, context in texts.items():
            scores = [continuation_logp(model, tokenizer, context, c) for c in continuations(task)]
            hits[name].append(float(scores[right] > scores[1 - right]))
            later[name].append(float(scores[1] > scores[0]))
    out = {"model": args.model, "dataset": args.dataset, "pairs": len(hits[CONTEXTS[0]])}
    for name in CONTEXTS:
        mean, lo, hi = bootstrap_ci(hits[name])
        out[name] = {"pair_accuracy": mean, "lo": lo, "hi": hi, "later_shown": sum(later[name]) / len(later[name])}
        print(f"{name:>28}: pair accuracy {mean:.3f} [{lo:.3f}, {hi:.3f}], prefers the later-shown version "
              f"{out[name]['later_shown']:.2f} ({len(hits[name])} pairs)")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How well a (pretrained) tiny model flags slipped worked solutions by itself, with no selection involved.

    .venv/bin/python benchmarks/line_check.py --model .cache/models/<tiny>-pt-<hash> [--problems 150]

For fresh procedural problems (an unused seed, none of the model's pretraining problems; half of the
candidates slipped, no hedging), every candidate is
written as the pretraining corpus writes a solution (`Problem:` ... `Solution:` ...), and the model's probability
of the slip mark `?` (model.pretrain.slipped_share, docs/models.md) is read at the end of every solution line. A
solution's score is the maximum over its lines; the report is the AUC of that score, slipped against correct
(0.5 = chance, 1 = every slipped solution scored above every correct one). With `--verdict`, a solution's score is
instead the log-odds of ` wrong` over ` ok` after it is written as a candidate block and ` Check:`
(`model.pretrain.solution_check`). With `--in-prompt` the marks are read where a selector reads the solutions: a
problem's 4 candidates in one GenSelect prompt (end lines, `--line-labels` optional), each candidate scored over
its own lines at positions ~50-500 (session 20; the corpus's one-text rows trained positions 0-80 only).
Pure torch on CPU, a few seconds.
"""
from __future__ import annotations

import argparse
import sys


def auc(positive: list, negative: list) -> float:
    """P(score of a random positive > score of a random negative), ties counted half (Mann-Whitney U / n1 n2)."""
    wins = sum((p > n) + 0.5 * (p == n) for p in positive for n in negative)
    return wins / (len(positive) * len(negative))


def mark_scores(model, tokenizer, problem: str, solution: str) -> float:
    """Max over the solution's line ends of log P('?' next), as the pretraining corpus renders the text."""
    import torch

    from driver.models.pretrain import worked_solution_head

    text = f"{worked_solution_head(problem)}{solution}\n"
    head = len(tokenizer(text[: text.index("Solution:")])["input_ids"])
    ids = tokenizer(text)["input_ids"]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    mark = tokenizer("?", add_special_tokens=False)["input_ids"][0]
    with torch.no_grad():
        logp = model(input_ids=torch.tensor([ids])).logits[0].log_softmax(-1)
    ends = [i for i in range(head, len(ids) - 1) if tokens[i + 1] in ("\n", "Ċ")]
    return max(logp[i, mark].item() for i in ends)


def prompt_mark_scores(model, tokenizer, problem: str, solutions: list, line_labels: bool) -> list:
    """`mark_scores` of every solution read where a selection prompt shows it: all of `solutions` in one GenSelect
    prompt (end lines; `line_labels` as the style), the max over each candidate's lines of log P('?' next) at the
    last token of the line. One score per solution, in order."""
    import torch

    from core.algo.genselect import PromptStyle, build_prompt, render_block

    style = PromptStyle(end_lines=True, line_labels=line_labels)
    prompt = build_prompt(problem, solutions, style=style)
    enc = tokenizer(prompt, return_offsets_mapping=True, add_special_tokens=False)
    token_at_char = {}
    for t, (a, b) in enumerate(enc["offset_mapping"]):
        for c in range(a, b):
            token_at_char[c] = t
    mark = tokenizer("?", add_special_tokens=False)["input_ids"][0]
    with torch.no_grad():
        logp = model(input_ids=torch.tensor([enc["input_ids"]])).logits[0].log_softmax(-1)
    scores = []
    for i, solution in enumerate(solutions):
        block = render_block(i, solution.strip(), style)
        start = prompt.index(block)
        body_lines = block.split("\n")[1:-1]  # not the `Solution i:` header nor the end line
        ends, at = [], start + len(block.split("\n")[0]) + 1
        for line in body_lines:
            if line.strip():
                ends.append(token_at_char[at + len(line.rstrip()) - 1])
            at += len(line) + 1
        scores.append(max(logp[t, mark].item() for t in ends))
    return scores


def verdict_scores(model, tokenizer, problem: str, solution: str) -> float:
    """log P(' wrong') - log P(' ok') after the solution written as a candidate block and ` Check:` (the
    per-solution check of model.pretrain.solution_check): higher = judged wrong."""
    import torch

    from driver.models.pretrain import corpus_text

    text = corpus_text(problem, solution, position=1)
    text = text[: text.rindex(" Check:") + len(" Check:")]
    ids = tokenizer(text)["input_ids"]
    wrong, ok = (tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in (" wrong", " ok"))
    with torch.no_grad():
        logp = model(input_ids=torch.tensor([ids])).logits[0, -1].log_softmax(-1)
    return (logp[wrong] - logp[ok]).item()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a tiny model folder (e.g. a -pt- pretrained one)")
    parser.add_argument("--problems", type=int, default=150, help="fresh problems, 4 candidates each")
    parser.add_argument("--seed", type=int, default=99_991)
    parser.add_argument("--verdict", action="store_true",
                        help="score the per-solution check (model.pretrain.solution_check) instead of the line marks")
    parser.add_argument("--in-prompt", action="store_true",
                        help="read the marks where a selection prompt shows each solution (all 4 in one prompt, "
                             "end lines) instead of alone at the start of a text")
    parser.add_argument("--line-labels", action="store_true", help="with --in-prompt: line-labelled candidates")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from driver.data import procedural
    from driver.data.slips import slip_kind
    from driver.models.pretrain import problems_of_pretrained

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    seen = {procedural.problem_key(p) for p in problems_of_pretrained(args.model)}
    rows = [r for r in procedural.generate(args.problems + len(seen), 4, args.seed,
                                           procedural.ProceduralSpec(error_rate=0.5))
            if procedural.problem_key(r["problem"]) not in seen][: args.problems]
    score = verdict_scores if args.verdict else mark_scores
    slipped, correct = [], []
    for row in rows:
        if args.in_prompt:
            scores = prompt_mark_scores(model, tokenizer, row["problem"], row["candidates"], args.line_labels)
        else:
            scores = [score(model, tokenizer, row["problem"], text) for text in row["candidates"]]
        for text, value in zip(row["candidates"], scores):
            (correct if slip_kind(text) == "none" else slipped).append(value)
    what = "the check's log-odds of 'wrong'" if args.verdict else "the slip mark's probability"
    where = " in selection prompts" + (" (line labels)" if args.line_labels else "") if args.in_prompt else ""
    print(f"{len(slipped) + len(correct)} solutions ({len(slipped)} slipped){where}: AUC of {what}, "
          f"slipped vs correct: {auc(slipped, correct):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How well a (pretrained) tiny model flags slipped worked solutions by itself, with no selection involved.

    .venv/bin/python benchmarks/line_check.py --model .cache/models/<tiny>-pt-<hash> [--problems 150]

For fresh procedural problems (an unused seed, none of the model's pretraining problems; half of the
candidates slipped, no hedging), every candidate is
written as the pretraining corpus writes a solution (`Problem:` ... `Solution:` ...), and the model's probability
of the slip mark `?` (model.pretrain.slipped_share, docs/models.md) is read at the end of every solution line. A
solution's score is the maximum over its lines; the report is the AUC of that score, slipped against correct
(0.5 = chance, 1 = every slipped solution scored above every correct one). With `--verdict`, a solution's score is
instead the log-odds of ` wrong` over ` ok` after it is written as a candidate block and ` Check:`
(`model.pretrain.solution_check`). Pure torch on CPU, a few seconds.
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
        for text in row["candidates"]:
            (correct if slip_kind(text) == "none" else slipped).append(score(model, tokenizer, row["problem"], text))
    what = "the check's log-odds of 'wrong'" if args.verdict else "the slip mark's probability"
    print(f"{len(slipped) + len(correct)} solutions ({len(slipped)} slipped): AUC of {what}, "
          f"slipped vs correct: {auc(slipped, correct):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

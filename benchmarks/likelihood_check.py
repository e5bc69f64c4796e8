"""Is the check in the weights? A language model's own likelihood as a pair selector (a diagnostic, not a selector).

For every held-out prompt with exactly two candidates (one correct, one slipped), each candidate is scored by the
model's log-likelihood of its text as a worked solution (`Problem:\\n{problem}\\n\\nSolution:\\n{candidate}\\n`, the
format of `model.pretrain`'s corpus; hedging sentences removed), and the higher one is "picked". Pair accuracy
above 0.5 says the model's next-token predictions already separate correct from slipped solutions (the arithmetic
and the copying are in its weights), whatever its selection head reads; 0.5 says they do not. Two scores per
candidate: the total log-likelihood, and the mean over the *result* tokens of each line only (the digits after
`= ` and after `Answer: `), where a slip is written.

    python benchmarks/likelihood_check.py --model .cache/models/<pretrained> --dataset .cache/datasets/<pairs>
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def result_spans(text: str) -> list:
    """[(start, end)] character spans of the results in `text`: what follows `= ` or `Answer: ` to the line end."""
    spans, offset = [], 0
    for line in text.split("\n"):
        for marker in ("= ", "Answer: "):
            at = line.rfind(marker)
            if at >= 0:
                spans.append((offset + at + len(marker), offset + len(line)))
                break
        offset += len(line) + 1
    return spans


def candidate_scores(model, tokenizer, problem: str, candidate: str) -> tuple:
    """(total log-likelihood of the candidate's tokens, mean log-likelihood of its result tokens)."""
    import torch

    from driver.models.pretrain import worked_solution_head

    head = worked_solution_head(problem)
    text = head + candidate + "\n"
    enc = tokenizer(text, return_offsets_mapping=True)
    ids = torch.tensor([enc["input_ids"]])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, :-1].float(), dim=-1)
    token_logp = logp.gather(1, ids[0, 1:, None])[:, 0].tolist()  # (T - 1,): log p(token t+1 | ..t)
    starts = [s for s, _ in enc["offset_mapping"][1:]]
    spans = [(a + len(head), b + len(head)) for a, b in result_spans(candidate)]
    in_candidate = [s >= len(head) for s in starts]
    in_result = [any(a <= s < b for a, b in spans) for s in starts]
    total = float(sum(v for v, keep in zip(token_logp, in_candidate) if keep))
    results = [v for v, keep in zip(token_logp, in_result) if keep]
    return total, (sum(results) / len(results) if results else 0.0)


def main(argv=None) -> int:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from core.algo.metrics import bootstrap_ci
    from driver.data.dataset import load_dataset
    from driver.data.procedural import strip_hedges
    from driver.data.slips import slip_kind

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--pairs", type=int, default=400, help="held-out pairs to score")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype="float32").eval()
    pairs = [t for t in load_dataset(args.dataset).heldout
             if t.num_candidates == 2 and sorted(t.labels) == [0.0, 1.0]][: args.pairs]
    hits = {"total": [], "results": []}
    by_kind = {}
    for task in pairs:
        texts = [strip_hedges(c) for c in task.candidates]
        scores = [candidate_scores(model, tokenizer, task.problem, c) for c in texts]
        right = task.labels.index(1.0)
        for k, name in enumerate(hits):
            hits[name].append(float(scores[right][k] > scores[1 - right][k]))
        by_kind.setdefault(slip_kind(texts[1 - right]), []).append(hits["results"][-1])
    out = {"model": args.model, "dataset": args.dataset, "pairs": len(pairs)}
    for name, values in hits.items():
        mean, lo, hi = bootstrap_ci(values)
        out[name] = {"pair_accuracy": mean, "lo": lo, "hi": hi}
        print(f"{name:>8}: pair accuracy {mean:.3f} [{lo:.3f}, {hi:.3f}] ({len(values)} pairs)")
    out["results_by_slip_kind"] = {k: {"n": len(v), "pair_accuracy": sum(v) / len(v)} for k, v in by_kind.items()}
    print("by slip kind (results score):", {k: f"{v['pair_accuracy']:.2f} (n={v['n']})"
                                          for k, v in out["results_by_slip_kind"].items()})
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

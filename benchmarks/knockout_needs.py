"""How good must a pair judgment be for a knockout, or a round robin, of pairs to beat majority voting?

    .venv/bin/python benchmarks/knockout_needs.py .cache/datasets/<dataset>/heldout.jsonl [--repeats 50]

For each held-out prompt (its candidates' labels and answers) it plays the knockout tournament of
`core.algo.knockout` with groups of two (its `plan_round`: balanced, in order, a group of one advancing), a
correct-vs-wrong match won by the correct one with probability p, any other match a coin flip. It prints
majority@N (ties scored as a uniform tie-break, as `core.algo.metrics.majority_at_k`) and the knockout's
expected accuracy for p from 0.5 to 1.0: the per-match accuracy a selector's check needs (issue 7). Beside it, the
round robin of `core.algo.round_robin` with the same matches (each pair decided once, P = 1 for its winner), its
wins scored per candidate and pooled by final answer (the evaluation's `eval_round_robin: answer`).
"""
import argparse
import json
import random

from core.algo.knockout import plan_round
from core.algo.metrics import majority_at_k
from core.algo.round_robin import all_pairs, round_robin_pick


def match_winner(a: int, b: int, labels: list, p: float, rng: random.Random) -> int:
    """A correct-vs-wrong match goes to the correct candidate with probability p; any other is a coin flip."""
    if (labels[a] >= 1.0) == (labels[b] >= 1.0):
        return rng.choice((a, b))
    good, bad = (a, b) if labels[a] >= 1.0 else (b, a)
    return good if rng.random() < p else bad


def knockout_correct(labels: list, p: float, rng: random.Random) -> float:
    """Label of the knockout's winner, the rounds planned as the evaluation plans them (`plan_round`, window 2,
    no token budget): a group of one advances, a pair is decided by `match_winner`."""
    alive = list(range(len(labels)))
    while len(alive) > 1:
        alive = [g[0] if len(g) == 1 else match_winner(*g, labels, p, rng)
                 for g in plan_round(alive, 2, lambda group: True)]
    return float(labels[alive[0]] >= 1.0)


def round_robin_correct(labels: list, answers, p: float, rng: random.Random) -> float:
    """Label of a round robin's pick: every pair decided by `match_winner` (its winner gets P = 1), wins pooled
    by `answers` (None: per candidate); ties to the lowest index, as `round_robin_pick`. The candidates are
    shuffled first, so that its tie rule is a uniform tie-break, as majority@N's expected score assumes."""
    order = list(range(len(labels)))
    rng.shuffle(order)
    labels = [labels[i] for i in order]
    answers = None if answers is None else [answers[i] for i in order]
    win_prob = {(i, j): float(match_winner(i, j, labels, p, rng) == i) for i, j in all_pairs(len(labels))}
    return float(labels[round_robin_pick(len(labels), win_prob, answers)[0]] >= 1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("heldout", help="a dataset's heldout.jsonl")
    ap.add_argument("--repeats", type=int, default=50, help="tournaments per prompt and p")
    args = ap.parse_args()
    rows = [json.loads(line) for line in open(args.heldout)]
    rng = random.Random(0)
    majority = sum(majority_at_k(r["candidate_answers"], [x >= 1.0 for x in r["labels"]]) for r in rows) / len(rows)
    print(f"{len(rows)} prompts; majority@N {majority:.3f}")
    total = len(rows) * args.repeats
    for p in (0.5, 0.55, 0.6, 0.65, 0.7, 0.8, 0.9, 1.0):
        ko = sum(knockout_correct(r["labels"], p, rng) for r in rows for _ in range(args.repeats)) / total
        rr = sum(round_robin_correct(r["labels"], None, p, rng) for r in rows for _ in range(args.repeats)) / total
        by_answer = sum(round_robin_correct(r["labels"], r["candidate_answers"], p, rng)
                        for r in rows for _ in range(args.repeats)) / total
        print(f"pair accuracy {p:.2f}: knockout {ko:.3f}  round robin {rr:.3f}  round robin by answer {by_answer:.3f}")


if __name__ == "__main__":
    main()

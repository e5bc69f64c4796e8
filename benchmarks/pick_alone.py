"""What the pick of a pick-then-point selector reads, alone (issue 7, session 33; BENCHMARKS.md).

    .venv/bin/python benchmarks/pick_alone.py DATASET MODEL [MODEL ...] [--train] [--solver-effect]

For each MODEL folder (a start model in `.cache/models/...-ws-...`, or a run's `export/`), the pick `Pick: #g` right
after the selection prompt, on the first 200 held-out prompts (or, with `--train`, the first 300 training pairs), with
their hedges and with the hedges stripped: the greedy pick's accuracy, the exact sampled accuracy (the probability
mass on correct candidates) and the pick's entropy. `--solver-effect` writes the model's greedy solution after each
pick of 100 hedged training pairs and reports how often its answer is a correct candidate's, by whether the pick was
correct: whether the pick changes what the solver writes (and so whether the final index pays the pick there).
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def pick_scores(logps, correct) -> tuple:
    """(greedy hit, sampled accuracy, entropy) of one pick distribution: `logps` the log-probs over the prompt's N
    indices (length N, finite), `correct` its N candidate labels."""
    probs = [math.exp(x) for x in logps]
    greedy = max(range(len(logps)), key=lambda i: logps[i])
    return (float(bool(correct[greedy])), sum(p for p, c in zip(probs, correct) if c),
            -sum(p * x for p, x in zip(probs, logps) if p > 0))


def mean_scores(rows: list) -> dict:
    """{greedy, sampled, entropy}: the means of `pick_scores` rows."""
    n = max(1, len(rows))
    return {name: sum(r[i] for r in rows) / n for i, name in enumerate(("greedy", "sampled", "entropy"))}


def solver_effect(records: list) -> dict:
    """{pick correct (bool): {n, solved, stated}} from (pick correct, own answer stated, own answer correct)."""
    out = {}
    for pick_right, stated, solved in records:
        row = out.setdefault(bool(pick_right), {"n": 0, "solved": 0, "stated": 0})
        row["n"] += 1
        row["stated"] += bool(stated)
        row["solved"] += bool(solved)
    return {k: {"n": v["n"], "solved": v["solved"] / v["n"], "stated": v["stated"] / v["n"]} for k, v in out.items()}


def read_picks(model, tokenizer, tasks: list, pad: int, index_ids: list) -> dict:
    """`mean_scores` of the model's pick on `tasks` (its prompts end in `Pick: #`)."""
    import torch

    from core.chat import prompt_token_ids
    from point_rl_probe import index_logps

    rows = []
    with torch.no_grad():
        for s in range(0, len(tasks), 16):
            batch = tasks[s:s + 16]
            lp = index_logps(model, [prompt_token_ids(tokenizer, t.prompt) for t in batch],
                             [t.num_candidates for t in batch], index_ids, pad)
            rows += [pick_scores(row[:t.num_candidates].tolist(), t.correct) for t, row in zip(batch, lp)]
    return mean_scores(rows)


def pick_solver_records(model, tokenizer, tasks: list, index_ids: list) -> list:
    """(pick correct, own answer stated, own answer correct) for each task and each pick g."""
    from core.chat import pick_point_head, prompt_token_ids
    from driver.models.pick_point_start import normalize_answer
    from driver.models.warmstart import first_answer, greedy_continuations

    contexts, meta = [], []
    for t in tasks:
        head = tokenizer(pick_point_head(t.problem), add_special_tokens=False)["input_ids"]
        for g in range(t.num_candidates):
            contexts.append(prompt_token_ids(tokenizer, t.prompt) + [index_ids[g]] + head)
            meta.append((t, g))
    records = []
    for (t, g), text in zip(meta, greedy_continuations(model, tokenizer, contexts, 96)):
        answered = first_answer(text)
        own = normalize_answer(answered[1]) if answered else None
        answers = [normalize_answer(a) for a in t.candidate_answers]
        stated = own is not None and own in answers
        records.append((t.correct[g], stated, stated and t.correct[answers.index(own)]))
    return records


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset")
    ap.add_argument("models", nargs="+")
    ap.add_argument("--train", action="store_true", help="the first 300 training pairs instead of the held-out set")
    ap.add_argument("--solver-effect", action="store_true")
    args = ap.parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM

    from driver.data.dataset import load_dataset
    from driver.data.procedural import strip_hedges
    from point_rl_probe import probe_tokenizer

    data = load_dataset(args.dataset)
    tasks = [t for t in data.train if t.num_candidates == 2][:300] if args.train else data.heldout[:200]
    hedged = [t for t in data.train if t.num_candidates == 2 and strip_hedges(t.prompt) != t.prompt][:100]
    torch.set_num_threads(1)
    for path in args.models:
        tokenizer, pad, index_ids = probe_tokenizer(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        for name, subset in (("cued", tasks), ("no cue", [replace(t, prompt=strip_hedges(t.prompt)) for t in tasks])):
            m = read_picks(model, tokenizer, subset, pad, index_ids)
            print(f"{path}: {name}: pick greedy {m['greedy']:.3f}  sampled {m['sampled']:.3f}  "
                  f"entropy {m['entropy']:.3f}  ({len(subset)} prompts)", flush=True)
        if args.solver_effect:
            for right, row in sorted(solver_effect(pick_solver_records(model, tokenizer, hedged, index_ids)).items()):
                print(f"{path}: pick {'right' if right else 'wrong'}: own answer stated {row['stated']:.2f}, "
                      f"correct {row['solved']:.2f} ({row['n']} solutions)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

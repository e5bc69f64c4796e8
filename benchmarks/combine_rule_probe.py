"""Can the tiny model write the pick-then-point combination itself? A supervised probe with label-free targets.

    .venv/bin/python benchmarks/combine_rule_probe.py --model <solve-and-point base> --dataset <set> \\
        --out runs/s28/combine.json [--max-candidates 2] [--steps 200] [--lr 1e-3]

Context per prompt: the selection prompt (beside layout), `Pick: #g` with g an index drawn uniformly from 0..N-1
(so it is right no more often than chance: no label is read), the problem, the model's own greedy worked solution
cut after its `Answer: X` line, and ` #`. Target (the format rule of a response that picks first, then solves and
points; issue 7, session 28): every candidate stating X, uniformly, where one does; else g. Trained by cross-entropy
against that target (AdamW, `--steps` of `--prompts`, induction circuit frozen). Read on held-out prompts with their
own random picks: the share of greedy indices that follow the rule where X is stated and where it is not.
"""
from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from driver.models.pick_point_start import rule_targets  # noqa: E402  (the library's format rule)
from point_rl_probe import (decision_contexts, index_logps, probe_arguments, probe_prompts,  # noqa: E402
                            probe_tokenizer, states)


def contexts(model, tokenizer, tasks: list, rng: random.Random) -> list:
    """[(token ids ending in ` #`, own answer, pick)] per task, the pick drawn uniformly from its indices."""
    picks = [rng.randrange(t.num_candidates) for t in tasks]
    return [(ids, own, g) for (ids, own), g in zip(decision_contexts(model, tokenizer, tasks, picks=picks), picks)]


def follows(model, ctx, tasks, index_ids, pad, normalize) -> dict:
    """Greedy indices that follow the rule, where the own answer is stated and where it is not."""
    import torch

    rows = {"stated": [], "unstated": []}
    with torch.no_grad():
        for s in range(0, len(tasks), 32):
            lp = index_logps(model, [c[0] for c in ctx[s:s + 32]], [t.num_candidates for t in tasks[s:s + 32]],
                             index_ids, pad)
            for t, (_, own, g), k in zip(tasks[s:s + 32], ctx[s:s + 32], lp.argmax(-1).tolist()):
                stated = states(t, own, normalize)
                rows["stated" if stated else "unstated"].append(k in rule_targets(t.candidate_answers, own, g))
    return {f"{k}_follows": sum(v) / max(1, len(v)) for k, v in rows.items()} | \
        {f"{k}_n": len(v) for k, v in rows.items()}


def main(argv=None) -> int:
    ap = probe_arguments(__doc__, train_prompts=800, problems=410, max_candidates=0, lr=1e-3, eval_every=50)
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM

    from driver.data.dataset import load_dataset
    from driver.models.warmstart import clipped_step, torch_threads
    from induction_wiring import freeze_circuit
    from solve_then_match import normalize

    data = load_dataset(args.dataset)
    rng = random.Random(args.seed)
    train, held = probe_prompts(data, args.train_prompts, args.problems, args.max_candidates, args.seed, rng)
    tokenizer, pad, index_ids = probe_tokenizer(args.model)
    log, t0 = [], time.time()
    with torch_threads(2):
        torch.manual_seed(args.seed)
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
        train_ctx, held_ctx = contexts(model, tokenizer, train, rng), contexts(model, tokenizer, held, rng)
        freeze_circuit(model)
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
        constant = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        for step in range(0, args.steps + 1):
            if step % args.eval_every == 0:
                model.eval()
                log.append({"step": step, "seconds": round(time.time() - t0, 1),
                            **follows(model, held_ctx, held, index_ids, pad, normalize)})
                print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in log[-1].items()}),
                      flush=True)
                model.train()
            if step == args.steps:
                break
            batch = rng.sample(range(len(train)), args.prompts)
            lp = index_logps(model, [train_ctx[i][0] for i in batch], [train[i].num_candidates for i in batch],
                             index_ids, pad)
            loss = torch.stack([-lp[j, rule_targets(train[i].candidate_answers, train_ctx[i][1], train_ctx[i][2])].mean()
                                for j, i in enumerate(batch)]).mean()
            clipped_step(loss, model, opt, constant)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "log": log}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

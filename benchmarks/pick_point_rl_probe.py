"""RL on both indices of a response that picks, then solves and points, from a start that knows nothing.

    .venv/bin/python benchmarks/pick_point_rl_probe.py --model <solve-and-point base> --dataset <cued set> \\
        --out runs/s29/pick_point.json [--max-candidates 2] [--warm-pointer uniform|rule] [--rl-steps 200]

The response (issue 7, sessions 28-29): `Pick: #g` right after the selection prompt (beside layout), then the
model's own greedy worked solution with that line in its context, cut after its `Answer: X` line, then ` #k`.
Two sampled tokens, g and k, each an index 0..N-1 (renormalised over those tokens); the solution between them is
generated once per (prompt, g) before training, so only the two decisions train: a bandit version of the full
system's rollouts. The reward is 1 when candidate k is correct.

1. Format-only warm-start (`--warm-steps`, label-free): the pick towards uniform over 0..N-1; the pointer, for a
   pick g drawn uniformly, towards g where no candidate states the model's answer X (copy the pick) and, where one
   does, towards uniform (`--warm-pointer uniform`: the start knows nothing about which candidate is right) or
   towards the candidates stating X (`--warm-pointer rule`: the label-free rule of `combine_rule_probe.py`, whose
   start already points where the model's own solution decides).
2. RL (`--rl-steps`): `--prompts` training prompts a step, `--group` picks sampled per prompt at temperature 1 and
   one index k after each pick's solution, advantage = reward minus the group mean over the group's std (GRPO),
   loss = -mean(advantage x (log p(g) + log p(k | g))) over groups with mixed rewards (dynamic sampling), AdamW;
   `--train pick`: -mean(advantage x log p(g)), the pointer kept as the warm-start left it.

Every `--eval-every` steps, on the held-out prompts with their cue and on the same prompts without it (hedging
sentences removed; solutions generated for those too): GenSelect@N of the greedy response (greedy g, then greedy
k after g's solution) against majority@N and random@N, its sampled accuracy at temperature 1 (exact: the sum over
g and k of p(g) p(k | g) [k correct]), the greedy pick's own accuracy, and the split by whether a candidate states
the model's answer after the greedy pick (there: the share of k naming such a candidate; elsewhere: the accuracy
and the share of k that copy the pick).
"""
from __future__ import annotations

import hashlib
import json
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from driver.models.pick_point_start import rule_targets  # noqa: E402  (the library's format rule)
from point_rl_probe import (decision_contexts, group_advantages, index_logps, probe_arguments,  # noqa: E402
                            probe_prompts, probe_tokenizer, states)


def pointer_contexts(model, tokenizer, tasks: list) -> list:
    """Per task, [(token ids ending in ` #`, own answer)] for every pick g in 0..N-1: the prompt (beside),
    `Pick: #g`, and the model's greedy solution written with that line in its context."""
    out = [[] for _ in tasks]
    for g in range(max((t.num_candidates for t in tasks), default=0)):
        rows = [i for i, t in enumerate(tasks) if g < t.num_candidates]
        for i, ctx in zip(rows, decision_contexts(model, tokenizer, [tasks[i] for i in rows], picks=[g] * len(rows))):
            out[i].append(ctx)
    return out


def warm_pointer_target(task, own, pick: int, mode: str, normalize) -> list:
    """The indices the format-only warm-start spreads the pointer over after pick `pick`: [pick] where no candidate
    states `own`; else every index (mode "uniform") or those stating it (mode "rule": `rule_targets`)."""
    if mode == "uniform" and states(task, own, normalize):
        return list(range(task.num_candidates))
    return rule_targets(task.candidate_answers, own, pick)


def sampled_accuracy(pick_probs: list, pointer_probs: list, correct: list) -> float:
    """The exact accuracy of sampling both indices at temperature 1 for one prompt: sum over g and k of
    p(g) p(k | g) [candidate k correct]. pick_probs: N floats; pointer_probs: N lists of N floats (row g)."""
    return sum(pg * sum(pk for pk, ok in zip(row, correct) if ok) for pg, row in zip(pick_probs, pointer_probs))


def evaluate(model, tasks, pick_ctx, ptr_ctx, index_ids, pad, seed: int, normalize) -> dict:
    """The evaluation line of the held-out `tasks` (see the module docstring)."""
    import torch

    from driver.evaluate import selection_metrics

    with torch.no_grad():
        picks = torch.cat([index_logps(model, pick_ctx[s:s + 32], [t.num_candidates for t in tasks[s:s + 32]],
                                       index_ids, pad) for s in range(0, len(tasks), 32)]).exp()
        flat = [(i, g) for i, t in enumerate(tasks) for g in range(t.num_candidates)]
        ptr = torch.cat([index_logps(model, [ptr_ctx[i][g][0] for i, g in flat[s:s + 32]],
                                     [tasks[i].num_candidates for i, _ in flat[s:s + 32]], index_ids, pad)
                         for s in range(0, len(flat), 32)]).exp()
    row = {ig: m for m, ig in enumerate(flat)}
    entropy = lambda p: float(-(p * p.clamp_min(1e-12).log()).sum())  # noqa: E731
    choices, sampled, pick_right, hits, unstated, entropies = [], [], [], [], [], []
    for i, t in enumerate(tasks):
        n = t.num_candidates
        g = int(picks[i, :n].argmax())
        k = int(ptr[row[(i, g)], :n].argmax())
        choices.append(k)
        pick_right.append(bool(t.correct[g]))
        sampled.append(sampled_accuracy(picks[i, :n].tolist(), [ptr[row[(i, h)], :n].tolist() for h in range(n)],
                                        t.correct))
        entropies.append((entropy(picks[i, :n]), entropy(ptr[row[(i, g)], :n])))
        own = ptr_ctx[i][g][1]
        if states(t, own, normalize):
            hits.append(normalize(t.candidate_answers[k]) == own)
        else:
            unstated.append((bool(t.correct[k]), k == g))
    m = selection_metrics(tasks, choices, seed=seed)
    return {"genselect": m["genselect"], "lo": m["genselect_lo"], "hi": m["genselect_hi"],
            "sampled": sum(sampled) / len(sampled), "majority": m["majority"], "random": m["random"],
            "over_majority": m["over_majority"], "over_majority_lo": m["over_majority_lo"],
            "over_majority_hi": m["over_majority_hi"], "pick_accuracy": sum(pick_right) / len(pick_right),
            "stated_n": len(hits), "pointer_rate": sum(hits) / max(1, len(hits)), "unstated_n": len(unstated),
            "unstated_accuracy": sum(a for a, _ in unstated) / max(1, len(unstated)),
            "copies_pick": sum(c for _, c in unstated) / max(1, len(unstated)),
            "pick_entropy": sum(e for e, _ in entropies) / len(entropies),
            "pointer_entropy": sum(e for _, e in entropies) / len(entropies)}


def cached_contexts(model, tokenizer, sets: dict, args) -> dict:
    """{name: (pick contexts, pointer contexts)} of each task list in `sets`, generated once and kept in a JSON file
    beside `args.out`, keyed by what decides them (the model, the dataset, the prompts drawn)."""
    key = json.dumps([str(Path(args.model).resolve()), str(Path(args.dataset).resolve()), args.train_prompts,
                      args.problems, args.max_candidates, args.seed])
    path = Path(args.out).parent / f"contexts-{hashlib.sha256(key.encode()).hexdigest()[:12]}.json"
    if path.is_file():
        return {name: tuple(pair) for name, pair in json.loads(path.read_text()).items()}
    contexts = {name: ([ids for ids, _ in decision_contexts(model, tokenizer, tasks, "prior")],
                       pointer_contexts(model, tokenizer, tasks)) for name, tasks in sets.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(contexts))
    return contexts


def rounded(value):
    """`value` with every float rounded to 3 places (nested dicts too), for the console."""
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    return round(value, 3) if isinstance(value, float) else value


def main(argv=None) -> int:
    ap = probe_arguments(__doc__, train_prompts=600, problems=410, max_candidates=2, lr=3e-4, eval_every=25,
                         freeze_option=True)
    ap.add_argument("--warm-steps", type=int, default=100)
    ap.add_argument("--warm-lr", type=float, default=1e-3)
    ap.add_argument("--warm-pointer", choices=["uniform", "rule"], default="uniform")
    ap.add_argument("--rl-steps", type=int, default=200)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--train", choices=["both", "pick"], default="both",
                    help="which indices RL trains: both, or the pick alone (the pointer as the warm-start left it)")
    args = ap.parse_args(argv)

    import torch
    from dataclasses import replace
    from transformers import AutoModelForCausalLM

    from driver.data.dataset import load_dataset
    from driver.data.procedural import strip_hedges
    from driver.models.warmstart import clipped_step, torch_threads
    from solve_then_match import normalize

    data = load_dataset(args.dataset)
    rng = random.Random(args.seed)
    train, held = probe_prompts(data, args.train_prompts, args.problems, args.max_candidates, args.seed, rng)
    sets = {"cued": held, "no_cue": [replace(t, prompt=strip_hedges(t.prompt)) for t in held]}
    tokenizer, pad, index_ids = probe_tokenizer(args.model)
    log, t0 = [], time.time()
    with torch_threads(2):
        torch.manual_seed(args.seed)
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
        contexts = cached_contexts(model, tokenizer, {"train": train, **sets}, args)
        print(f"contexts ready in {time.time() - t0:.0f} s", flush=True)
        if args.freeze_circuit:
            from induction_wiring import freeze_circuit

            freeze_circuit(model)

        def report(phase: str, step: int) -> None:
            model.eval()
            line = {"phase": phase, "step": step, "seconds": round(time.time() - t0, 1)}
            for name, tasks in sets.items():
                line[name] = evaluate(model, tasks, *contexts[name], index_ids, pad, args.seed, normalize)
            log.append(line)
            model.train()
            print(json.dumps(rounded(line)).replace('"', ""), flush=True)

        report("pretrained", 0)
        pick_train, ptr_train = contexts["train"]
        opt = torch.optim.AdamW(model.parameters(), lr=args.warm_lr, weight_decay=0.0)
        constant = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        for _ in range(args.warm_steps):
            batch = rng.sample(range(len(train)), args.prompts)
            sizes = [train[i].num_candidates for i in batch]
            lp = index_logps(model, [pick_train[i] for i in batch], sizes, index_ids, pad)
            valid = torch.isfinite(lp)
            pick_loss = -(lp.masked_fill(~valid, 0).sum(-1) / valid.sum(-1)).mean()
            gs = [rng.randrange(train[i].num_candidates) for i in batch]
            lp = index_logps(model, [ptr_train[i][g][0] for i, g in zip(batch, gs)], sizes, index_ids, pad)
            ptr_loss = torch.stack([-lp[j, warm_pointer_target(train[i], ptr_train[i][g][1], g, args.warm_pointer,
                                                               normalize)].mean()
                                    for j, (i, g) in enumerate(zip(batch, gs))]).mean()
            clipped_step(pick_loss + ptr_loss, model, opt, constant)
        if args.warm_steps:
            report("warm-start", args.warm_steps)
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
        constant = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        for step in range(1, args.rl_steps + 1):
            batch = rng.sample(range(len(train)), args.prompts)
            sizes = [train[i].num_candidates for i in batch]
            pick_lp = index_logps(model, [pick_train[i] for i in batch], sizes, index_ids, pad)
            picks = torch.multinomial(pick_lp.exp().detach(), args.group, replacement=True)       # (P, G)
            pairs = sorted({(j, g) for j, row in enumerate(picks.tolist()) for g in row})
            ptr_lp = index_logps(model, [ptr_train[batch[j]][g][0] for j, g in pairs], [sizes[j] for j, _ in pairs],
                                 index_ids, pad)                                                   # (M, 10)
            row = {jg: m for m, jg in enumerate(pairs)}
            rows = torch.tensor([[row[(j, g)] for g in gs] for j, gs in enumerate(picks.tolist())])  # (P, G)
            ks = torch.multinomial(ptr_lp.exp().detach()[rows.flatten()], 1).view_as(picks)            # (P, G)
            rewards = torch.tensor([[float(train[i].correct[k]) for k in ks_i] for i, ks_i in zip(batch, ks.tolist())])
            keep, adv = group_advantages(rewards)
            if keep.any():
                chosen = pick_lp.gather(1, picks)
                if args.train == "both":
                    chosen = chosen + ptr_lp[rows.flatten(), ks.flatten()].view_as(picks)
                clipped_step(-(adv * chosen[keep]).mean(), model, opt, constant)
            if step % args.eval_every == 0:
                report("rl", step)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "log": log}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

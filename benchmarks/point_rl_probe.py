"""Does RL teach a solving model to name the candidate that agrees with its own solution, from a format-only start?

    .venv/bin/python benchmarks/point_rl_probe.py --model runs/s22/<solve-and-point model> \
        --dataset .cache/datasets/<no-cue set> --out runs/s22/<name>.json [--warm-steps 100] [--rl-steps 200]

The action is one token: after the selection prompt (beside layout, `solve_point_probe.beside`), the problem,
the model's own greedy worked solution cut after its `Answer: X` line, and ` #`, the model names an index 0..N-1
(its distribution renormalised over those tokens). Solutions are generated once, before training, so only the
decision is trained: a bandit version of the full system's rollouts. `--decision prior` asks for the index right
after the prompt instead (`PRIOR_MARK`, no solution): what the prompt alone lets the same model learn.
`--max-candidates 2` trains and reads pairs only; `--strip-cue-heldout` reads the held-out prompts without their
hedging sentences.

1. Format-only warm-start (`--warm-steps`): the index distribution is trained towards uniform over 0..N-1 (cross-
   entropy against the soft target, as `model.warm_start.target=format` does): the start knows the format and
   nothing about which candidate is right, whatever pointer the pretraining built.
2. RL (`--rl-steps`): `--prompts` training prompts a step, `--group` indices sampled per prompt at temperature 1,
   reward 1 when the named candidate is correct, advantage = reward minus the group mean over the group's std
   (GRPO/DAPO), loss = -mean(advantage x log-prob of the index), groups with uniform reward dropped (dynamic
   sampling), AdamW at `--lr`.
Every `--eval-every` steps: held-out GenSelect@N of the greedy index and the pointer rate (the named candidate
states the model's own answer, among prompts where one does), against majority@N and random@N, and the
accuracy where no candidate states the model's answer (`unstated_accuracy`, beside its random rate): there only
what the prompt itself shows (on a cued dataset, the hedge) can decide.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


from core.chat import PICK_MARK as PRIOR_MARK  # noqa: E402  --decision prior: the index right after the prompt


def decision_contexts(model, tokenizer, tasks: list, decision: str = "after_solution", picks=None) -> list:
    """[(token ids ending in ` #`, own answer or None)] per task: prompt (beside), head, own greedy solution cut
    after its `Answer: X` line (a solution without one is kept whole). decision="prior": the prompt (beside) and
    `PRIOR_MARK` only, no solution (own answer None): an index the prompt alone decides. picks: one index per task,
    written after the prompt as `PRIOR_MARK` + pick before the solution (combine_rule_probe.py)."""
    from solve_point_probe import beside, cut_at_answer
    from solve_then_match import head_text, solve

    befores = [beside(t.prompt) + "\n\n" for t in tasks]
    if picks is not None:
        befores = [f"{before}{PRIOR_MARK}{g}\n\n" for before, g in zip(befores, picks)]
    if decision == "prior":
        return [(tokenizer(before + PRIOR_MARK)["input_ids"], None) for before in befores]
    solutions = solve(model, tokenizer, list(zip(befores, [t.problem for t in tasks])))
    out = []
    for t, before, sol in zip(tasks, befores, solutions):
        cut, own = cut_at_answer(sol)   # a solution without an `Answer:` line is kept whole
        out.append((tokenizer(head_text((before, t.problem)) + (sol.rstrip() if cut is None else cut) + " #")["input_ids"],
                    own))
    return out


def index_logps(model, rows: list, sizes: list, index_ids: list, pad: int):
    """(B, 10) log-probs over the index tokens at each row's last position, renormalised over the first
    sizes[j] indices (the rest -inf). Rows are left-padded."""
    import torch

    width = max(map(len, rows))
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    attn = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    pos = (attn.cumsum(1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits[:, -1][:, index_ids].float()
    valid = torch.arange(len(index_ids))[None] < torch.tensor(sizes)[:, None]
    return torch.log_softmax(logits.masked_fill(~valid, float("-inf")), -1)


def group_advantages(rewards):
    """(P, G) rewards -> (kept row mask (P,), advantages (kept, G)): reward minus the group mean over the group's
    std (GRPO / DAPO eq. 4), rows whose rewards are all equal dropped (DAPO's dynamic sampling)."""
    std = rewards.std(-1, keepdim=True)
    keep = (std > 0).squeeze(-1)
    return keep, ((rewards - rewards.mean(-1, keepdim=True)) / (std + 1e-6))[keep]


def states(task, own, normalize) -> bool:
    """Whether a candidate of `task` states the model's own answer `own` (normalised; None: no `Answer:` line)."""
    return own is not None and own in {normalize(a) for a in task.candidate_answers}


def own_answer_split(tasks, choices: list, owns: list, normalize) -> tuple:
    """(hits, unstated) over prompts whose candidates do / do not state the model's own answer `owns[i]`
    (normalised; None: no `Answer:` line). hits: [the choice states it] where one does; unstated: [(the choice is
    correct, the share of correct candidates)] where none does: there only what the prompt itself shows (on a
    cued dataset, the hedge) can decide."""
    hits, unstated = [], []
    for t, k, own in zip(tasks, choices, owns):
        if states(t, own, normalize):
            hits.append(normalize(t.candidate_answers[k]) == own)
        else:
            unstated.append((bool(t.correct[k]), sum(t.correct) / t.num_candidates))
    return hits, unstated


def probe_prompts(data, train_prompts: int, problems: int, max_candidates: int, seed: int,
                  rng: random.Random) -> tuple:
    """(train, held): `train_prompts` training prompts drawn with `rng`, and every held-out prompt of `problems`
    held-out problems drawn with `seed`; both only of at most `max_candidates` candidates (0: any)."""
    from solve_point_probe import heldout_sample

    fits = lambda t: not max_candidates or t.num_candidates <= max_candidates  # noqa: E731
    pool = [t for t in data.train if fits(t)]
    train = rng.sample(pool, min(train_prompts, len(pool)))
    return train, [t for t in heldout_sample(data, problems, seed) if fits(t)]


def probe_arguments(description: str, train_prompts: int, problems: int, max_candidates: int, lr: float,
                    eval_every: int, freeze_option: bool = False) -> argparse.ArgumentParser:
    """The arguments the probes share (model, data, prompts drawn, steps' size, seed), with their defaults;
    `freeze_option`: also `--freeze-circuit`."""
    ap = argparse.ArgumentParser(description=description.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--train-prompts", type=int, default=train_prompts)
    ap.add_argument("--problems", type=int, default=problems, help="held-out problems read (all their prompts)")
    ap.add_argument("--max-candidates", type=int, default=max_candidates,
                    help="train and read only prompts of at most this many candidates (0: all)")
    ap.add_argument("--prompts", type=int, default=16, help="training prompts a step")
    ap.add_argument("--lr", type=float, default=lr)
    ap.add_argument("--eval-every", type=int, default=eval_every)
    ap.add_argument("--seed", type=int, default=0)
    if freeze_option:
        ap.add_argument("--freeze-circuit", action="store_true",
                        help="keep the wired induction circuit's weights as written (induction_wiring.freeze_circuit)")
    return ap


def probe_tokenizer(path: str) -> tuple:
    """(tokenizer, pad id, the token ids of the indices 0..9) of the model folder `path`."""
    from transformers import AutoTokenizer

    from core.chat import index_token_ids

    tokenizer = AutoTokenizer.from_pretrained(path)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return tokenizer, pad, index_token_ids(tokenizer, 10)


def greedy_choices(model, contexts, tasks, index_ids, pad) -> list:
    """The most likely index of each held-out task, in order."""
    import torch

    choices = []
    with torch.no_grad():
        for s in range(0, len(tasks), 32):
            lp = index_logps(model, [c[0] for c in contexts[s:s + 32]], [t.num_candidates for t in tasks[s:s + 32]],
                             index_ids, pad)
            choices += lp.argmax(-1).tolist()
    return choices


def read(choices: list, contexts, tasks, seed: int) -> dict:
    """The evaluation line of the greedy `choices` on the held-out `tasks` (their `contexts` give the own answers)."""
    from driver.evaluate import selection_metrics
    from solve_then_match import normalize

    hits, unstated = own_answer_split(tasks, choices, [own for _, own in contexts], normalize)
    m = selection_metrics(tasks, choices, seed=seed)
    return {"genselect": m["genselect"], "lo": m["genselect_lo"], "hi": m["genselect_hi"],
            "majority": m["majority"], "random": m["random"], "over_majority": m["over_majority"],
            "over_majority_lo": m["over_majority_lo"], "over_majority_hi": m["over_majority_hi"],
            "pointer_rate": sum(hits) / max(1, len(hits)), "unstated_n": len(unstated),
            "unstated_accuracy": sum(h for h, _ in unstated) / max(1, len(unstated)),
            "unstated_random": sum(r for _, r in unstated) / max(1, len(unstated))}


def main(argv=None) -> int:
    ap = probe_arguments(__doc__, train_prompts=800, problems=100, max_candidates=0, lr=3e-4, eval_every=25,
                         freeze_option=True)
    ap.add_argument("--warm-steps", type=int, default=100)
    ap.add_argument("--warm-lr", type=float, default=1e-3)
    ap.add_argument("--rl-steps", type=int, default=200)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--decision", choices=["after_solution", "prior"], default="after_solution",
                    help="where the index is asked: after the model's own solution, or right after the prompt")
    ap.add_argument("--strip-cue-heldout", action="store_true",
                    help="read the held-out prompts with their hedging sentences removed (the same problems, "
                         "candidates and labels without the cue); training is unchanged")
    args = ap.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM

    from driver.data.dataset import load_dataset
    from driver.models.warmstart import clipped_step, torch_threads
    data = load_dataset(args.dataset)
    rng = random.Random(args.seed)
    train, held = probe_prompts(data, args.train_prompts, args.problems, args.max_candidates, args.seed, rng)
    if args.strip_cue_heldout:
        from dataclasses import replace

        from driver.data.procedural import strip_hedges

        held = [replace(t, prompt=strip_hedges(t.prompt)) for t in held]
    tokenizer, pad, index_ids = probe_tokenizer(args.model)
    log, t0 = [], time.time()
    with torch_threads(2):
        torch.manual_seed(args.seed)
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
        train_ctx = decision_contexts(model, tokenizer, train, args.decision)
        held_ctx = decision_contexts(model, tokenizer, held, args.decision)
        print(f"solutions generated in {time.time() - t0:.0f} s", flush=True)

        def report(phase, step) -> list:
            """Log the held-out evaluation; returns the greedy choices it read."""
            model.eval()
            choices = greedy_choices(model, held_ctx, held, index_ids, pad)
            log.append({"phase": phase, "step": step, "seconds": round(time.time() - t0, 1),
                        **read(choices, held_ctx, held, args.seed)})
            model.train()
            print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in log[-1].items()}),
                  flush=True)
            return choices

        if args.freeze_circuit:
            from induction_wiring import freeze_circuit

            freeze_circuit(model)
        per_prompt = {"prompt_ids": [t.prompt_id for t in held], "own": [own for _, own in held_ctx],
                      "pretrained": report("pretrained", 0)}
        opt = torch.optim.AdamW(model.parameters(), lr=args.warm_lr, weight_decay=0.0)
        constant = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        for step in range(1, args.warm_steps + 1):
            batch = rng.sample(range(len(train)), args.prompts)
            sizes = [train[i].num_candidates for i in batch]
            lp = index_logps(model, [train_ctx[i][0] for i in batch], sizes, index_ids, pad)
            valid = torch.isfinite(lp)
            clipped_step(-(lp.masked_fill(~valid, 0).sum(-1) / valid.sum(-1)).mean(), model, opt, constant)
        current = per_prompt["pretrained"]  # the greedy choices of the model as it is now (None: trained since)
        if args.warm_steps:
            current = report("warm-start", args.warm_steps)
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
        constant = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        for step in range(1, args.rl_steps + 1):
            batch = rng.sample(range(len(train)), args.prompts)
            sizes = [train[i].num_candidates for i in batch]
            lp = index_logps(model, [train_ctx[i][0] for i in batch], sizes, index_ids, pad)
            picks = torch.multinomial(lp.exp().detach(), args.group, replacement=True)         # (P, G)
            rewards = torch.tensor([[float(train[i].correct[k]) for k in row] for i, row in zip(batch, picks.tolist())])
            keep_rows, adv = group_advantages(rewards)
            if keep_rows.any():
                chosen = lp[keep_rows].gather(1, picks[keep_rows])
                clipped_step(-(adv * chosen).mean(), model, opt, constant)
            current = report("rl", step) if step % args.eval_every == 0 else None
        per_prompt["final"] = current if current is not None else greedy_choices(model.eval(), held_ctx, held,
                                                                                 index_ids, pad)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "log": log, "choices": per_prompt}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Solve, then point with the model's own induction head: one label-free pretraining stage, read where a selector writes.

    .venv/bin/python benchmarks/solve_point_probe.py --model runs/s22/wired-c3 --dataset .cache/datasets/<no-cue set> \
        --out runs/s22/sp [--steps 600] [--problems 100]

Session 21 found that a model pretrained on worked solutions (and then on worked solutions after selection prompts)
solves 54-61% of the no-cue problems where a selector writes, and that an exact pointer at its own answer would beat
majority voting by 26-32 points; the pointer itself was never learned together with solving. Session 22 writes an
induction circuit into the initial weights (`induction_wiring.py`): it copies the token that followed the earlier
occurrence of the last three tokens, so in a prompt whose answer lines carry their candidate's index
(`Answer: 24 #3`, the `beside` layout), the text `Answer: 24 #` is followed by the index of a candidate that states 24.

This trains one stage, every step one kind of row (drawn with the given shares), loss on the target part only:
  * `solution`: a correct worked solution of a fresh procedural problem (`Problem: ... Solution: ...`), alone;
  * `context`:  the beside-layout selection prompt of a *training* task, then such a worked solution of another
    problem (the solver learns to work after a long prompt; the prompt is text only, no label is read);
  * `pointer`:  the beside-layout selection prompt of a training task, then `Answer: X #i` lines for its distinct
    final answers in random order (finding a stated answer's candidate; answers only, no correctness read).
Held-out problems of `--dataset` are left out of every corpus. Then, on `--problems` held-out problems of
`--dataset` (all their prompts, beside layout): the model solves greedily after its own prompt
(`prompt`, `Problem: ... Solution:`), the text is cut after its `Answer: X` and ` #` is appended; the model's most
likely index among 0..N-1 is its choice. Printed: solve rate, the share of prompts whose own answer a candidate
states, pointer accuracy (the chosen candidate states the model's answer, among those prompts), and GenSelect@N of
that choice against majority@N (95% bootstrap CIs, margin paired by problem).
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

CORPUS_SEED = 902
KINDS = ("solution", "context", "pointer")
END_OF_ANSWER = re.compile(r"(Answer: [^\n]*)\nEnd of solution (\d+)\.")


def beside(prompt: str) -> str:
    """`prompt` (a selection prompt with end lines) with each block's answer line carrying its index:
    `Answer: 24\\nEnd of solution 3.` -> `Answer: 24 #3\\nEnd of solution 3.`"""
    out, count = END_OF_ANSWER.subn(r"\1 #\2\nEnd of solution \2.", prompt)
    if not count:
        raise ValueError("the beside layout needs prompts whose blocks end with `End of solution i.`")
    return out


def pointer_lines(task, rng: random.Random) -> str:
    """`Answer: X #i` for each distinct final answer X of `task` (i: its first candidate), in random order."""
    from driver.models.selection_rows import pointer_text

    return pointer_text(task.candidate_answers, rng)


def plain_row(tokenizer, text: str) -> tuple:
    ids = tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]
    return [], ids, [1] * len(ids)


def corpus(tokenizer, data, solutions: list, steps: int, shares: dict, batch: dict, seed: int,
           max_candidates: int = 0) -> list:
    """`steps` batches [(kind, rows)], each row (context ids, target ids, weights) as route_probe.batch_tensors
    pads; the kind of each step drawn with `shares`, `batch[kind]` rows a step; context and pointer rows read
    training prompts of at most `max_candidates` candidates (0: any)."""
    from prompt_context_pretrain import context_row

    rng = random.Random(seed)
    prompts = [t for t in data.train if not max_candidates or t.num_candidates <= max_candidates]
    kinds = rng.choices(KINDS, weights=[shares[k] for k in KINDS], k=steps)
    texts = iter(solutions)
    out = []
    for kind in kinds:
        rows = []
        for _ in range(batch[kind]):
            if kind == "solution":
                rows.append(plain_row(tokenizer, next(texts)))
            elif kind == "context":
                rows.append(context_row(tokenizer, beside(rng.choice(prompts).prompt), next(texts)))
            else:
                task = rng.choice(prompts)
                rows.append(context_row(tokenizer, beside(task.prompt), pointer_lines(task, rng)))
        out.append((kind, rows))
    return out


def cut_at_answer(solution: str) -> tuple:
    """(text, own answer): `solution` cut after its first `Answer:` line and the normalized answer there (None when
    the line is empty), or (None, None) when it has no such line."""
    from driver.models.warmstart import ANSWER_LINE
    from solve_then_match import own_answer

    match = ANSWER_LINE.search(solution)
    if not match:
        return None, None
    cut = solution[:match.end()].rstrip()
    return cut, own_answer(cut)


def heldout_sample(data, problems: int, seed: int) -> list:
    """The held-out tasks of `problems` problems of `data` drawn with `seed` (all their prompts)."""
    ids = sorted({t.problem_id for t in data.heldout})
    keep = set(random.Random(seed).sample(ids, min(problems, len(ids))))
    return [t for t in data.heldout if t.problem_id in keep]


def point(model, tokenizer, before: str, solution: str, n: int):
    """(own answer, chosen index): `solution` cut after its first `Answer: X` line, ` #` appended after
    `before` + it, and the most likely of the index tokens 0..n-1. (None, None) without an answer line."""
    import torch

    from core.chat import index_token_ids

    cut, own = cut_at_answer(solution)
    if cut is None:
        return None, None
    ids = tokenizer(before + cut + " #")["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids], device=model.device)).logits[0, -1]
    index_ids = index_token_ids(tokenizer, n)
    return own, int(logits[index_ids].argmax())


def pointer_reading(model, tokenizer, tasks: list, seed: int = 0) -> float:
    """Share of `tasks` where, after the beside prompt and `Answer: X #` for a random candidate's answer X (a
    `pointer` row's form), the most likely index among 0..N-1 names a candidate that states X."""
    import torch

    from core.chat import index_token_ids
    from solve_then_match import normalize

    rng, hits = random.Random(seed), 0
    for t in tasks:
        answer = normalize(rng.choice(t.candidate_answers))
        ids = tokenizer(beside(t.prompt) + "\n\n" + f"Answer: {answer} #")["input_ids"]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids], device=model.device)).logits[0, -1]
        k = int(logits[index_token_ids(tokenizer, t.num_candidates)].argmax())
        hits += normalize(t.candidate_answers[k]) == answer
    return hits / len(tasks)


def evaluate(model, tokenizer, data, problems: int, seed: int = 0) -> dict:
    from driver.evaluate import selection_metrics
    from solve_then_match import head_text, normalize, solve

    tasks = heldout_sample(data, problems, seed)
    befores = [beside(t.prompt) + "\n\n" for t in tasks]
    solutions = solve(model, tokenizer, list(zip(befores, [t.problem for t in tasks])))
    choices, matched, pointed, solved = [], 0, 0, 0
    for t, before, sol in zip(tasks, befores, solutions):
        own, k = point(model, tokenizer, head_text((before, t.problem)), sol, t.num_candidates)
        choices.append(k)
        answers = [normalize(a) for a in t.candidate_answers]
        solved += own == normalize(t.reference)
        if own is not None and own in answers:
            matched += 1
            pointed += k is not None and answers[k] == own
    metrics = selection_metrics(tasks, choices, seed=seed)
    return {"prompts": len(tasks), "problems": len({t.problem_id for t in tasks}), "pointer_reading": pointer_reading(model, tokenizer, tasks),
            "solve_rate_prompts": solved / len(tasks),
            "matched_share": matched / len(tasks), "pointer_accuracy": pointed / max(1, matched),
            "selection": metrics, "examples": [{"prompt_id": t.prompt_id, "solution": s, "choice": c}
                                               for t, s, c in list(zip(tasks, solutions, choices))[:5]]}


def reading_summary(reading: dict) -> str:
    """Two lines: what `evaluate` read (solve rate, pointer) and the selection against majority voting."""
    r, s = reading, reading["selection"]
    return (f"solve rate {r['solve_rate_prompts']:.3f}, answer stated by a candidate {r['matched_share']:.3f}, pointer "
            f"accuracy {r['pointer_accuracy']:.3f} (on a candidate's answer: {r['pointer_reading']:.3f})\n"
            f"own pointer: GenSelect@N {s['genselect']:.3f} [{s['genselect_lo']:.3f}, {s['genselect_hi']:.3f}]  "
            f"majority@N {s['majority']:.3f}  over majority {s['over_majority']:+.3f} "
            f"[{s['over_majority_lo']:+.3f}, {s['over_majority_hi']:+.3f}]")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the start (session 22: the induction-wired base)")
    ap.add_argument("--dataset", required=True, help="a selection dataset with end lines (no-cue: the reading)")
    ap.add_argument("--out", required=True, help="folder: the trained model and probe.json")
    ap.add_argument("--steps", type=int, default=600, help="0: only read --model")
    ap.add_argument("--shares", default="0.5,0.3,0.2", help="solution,context,pointer shares of the steps")
    ap.add_argument("--batch", default="32,4,4", help="rows a step of each kind")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--problems", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus-seed", type=int, default=CORPUS_SEED,
                    help="seed of the worked solutions' problems (a continued stage: another, for fresh problems)")
    ap.add_argument("--max-candidates", type=int, default=0,
                    help="context and pointer rows read training prompts of at most this many candidates (0: any)")
    ap.add_argument("--device", default="cpu", help="torch device of the model (cuda: a sweep on a GPU machine)")
    ap.add_argument("--freeze-circuit", action="store_true",
                    help="keep the wired induction circuit's weights as written (induction_wiring.freeze_circuit)")
    args = ap.parse_args(argv)

    import torch
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from core.config import PretrainConfig
    from driver.data.dataset import load_dataset
    from driver.models.pretrain import lm_loss, solution_texts
    from driver.models.warmstart import clipped_step, save_model_folder, torch_threads
    from route_probe import batch_tensors

    shares = dict(zip(KINDS, map(float, args.shares.split(","))))
    batch = dict(zip(KINDS, map(int, args.batch.split(","))))
    data = load_dataset(args.dataset)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    need = args.steps * max(batch["solution"], batch["context"]) * 5 // 4   # held-out problems are left out
    solutions = solution_texts(PretrainConfig(steps=need // 32 + 1, batch_size=32, seed=args.corpus_seed),
                               frozenset(t.problem for t in data.heldout))
    steps = corpus(tokenizer, data, solutions, args.steps, shares, batch, args.seed, args.max_candidates)
    record = {"args": vars(args)}
    with torch_threads(2):
        torch.manual_seed(args.seed)
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).to(args.device)
        if args.freeze_circuit:
            from induction_wiring import freeze_circuit

            freeze_circuit(model)
        if args.steps:
            opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
            warmup = max(1, args.steps // 20)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
            model.train()
            losses, start = {k: [] for k in KINDS}, time.time()
            bar = tqdm(steps, desc="solve-and-point pretraining")
            for kind, rows in bar:
                ids, attention, weights = (t.to(args.device) for t in batch_tensors(rows, pad))
                logits = model(input_ids=ids, attention_mask=attention).logits.float()
                losses[kind].append(clipped_step(lm_loss(logits, ids, weights), model, opt, sched))
                bar.set_postfix(loss=f"{losses[kind][-1]:.3f}", kind=kind)
            record.update(seconds=round(time.time() - start, 1),
                          loss_last20={k: sum(v[-20:]) / max(1, len(v[-20:])) for k, v in losses.items()},
                          steps_by_kind={k: len(v) for k, v in losses.items()})
            save_model_folder(model.cpu(), tokenizer, args.model, args.out, {"solve_point.json": record})
        model.to(args.device).eval()
        start = time.time()
        record["reading"] = evaluate(model, tokenizer, data, args.problems, args.seed)
        record["reading_seconds"] = round(time.time() - start, 1)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "probe.json").write_text(json.dumps(record, indent=1))
    print(f"trained {record.get('seconds', 0)} s; {reading_summary(record['reading'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

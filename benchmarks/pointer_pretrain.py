"""Pointer pretraining probe: can the tiny model learn to find, in a selection prompt, the candidate that states
a given final answer, when the task is taught densely in packed language-model rows?

    .venv/bin/python benchmarks/pointer_pretrain.py --model .cache/models/<tiny>[-pt-...] \
        --train-dataset .cache/datasets/<2-8 candidates> --heldout-dataset .cache/datasets/<pairs> \
        --out runs/<name> [--steps 400] [--rows-per-step 4] [--pack-tokens 1024] [--lr 1e-3]

Why. Issue 7's pointer probes (the selection prompt, then "Answer X.", target: the candidate stating X; one
supervised index per prompt) never left chance: 2-8 candidates in 400 steps, pairs in 300 (BENCHMARKS.md, session
17). Every route to a no-cue selector (solve and match, read a per-solution check) needs that pointer. Here the
same knowledge is taught as language modelling: each training prompt (no correctness labels; the training split
only) is followed by one query per candidate whose answer no other candidate states,

    Find:
    Answer: 24
    It is in Solution 3.

and the episodes are packed into rows of `--pack-tokens` tokens (EOS between episodes), the loss on every token:
2-8 pointer targets per ~300-token episode instead of one. The held-out reading: the prompt of a held-out task,
then `Find:\\nAnswer: X\\nIt is in Solution ` for one uniquely stated X (chosen by a fixed seed), argmax over the
index tokens 0..N-1; chance is 1/N. Reported on held-out pairs and on held-out prompts of 2-8 candidates.
"""
from __future__ import annotations

import argparse
import json
import re
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

QUERY = "\n\nFind:\nAnswer: {answer}\nIt is in Solution "
# `echo`: the query repeats the context that precedes the index in an end-lined block (`Answer: X` then
# `End of solution `), so copying the token that followed the same context earlier (an induction head) answers it
QUERIES = {"find": QUERY, "echo": "\n\nFind:\nAnswer: {answer}\nEnd of solution "}
# `beside` (short episodes only): each block's answer line carries its index (`Answer: 24 #3`) and the query is
# `Answer: 24 #`: the match and the token to copy are adjacent
QUERIES["beside"] = "\n\nFind:\nAnswer: {answer} #"


def unique_answers(task) -> list:
    """(index, answer) of the candidates whose final answer no other candidate of `task` states."""
    answers = list(task.candidate_answers)
    return [(i, a) for i, a in enumerate(answers) if answers.count(a) == 1]


def episode(task, rng: random.Random, query: str = QUERY) -> str:
    """`task`'s prompt followed by one pointer query per uniquely stated answer, in random order."""
    pairs = unique_answers(task)
    rng.shuffle(pairs)
    return task.prompt + "".join(query.format(answer=a) + f"{i}." for i, a in pairs)


def short_episode(task, rng: random.Random, query: str = QUERY) -> str:
    """`episode` with each candidate cut to its final `Answer:` line: the same pointer over ~10 tokens a candidate
    instead of ~50 (the short end of a curriculum from short sequences to long ones)."""
    pairs = unique_answers(task)
    rng.shuffle(pairs)
    return short_blocks(task, query) + "".join(query.format(answer=a) + f"{i}." for i, a in pairs)


def answer_blocks(answers, query: str = QUERY) -> str:
    """Candidate blocks that hold only their final answers (`Solution i:` / `Answer: X` / `End of solution i.`); for
    the `beside` query each answer line carries its candidate's index (`Answer: 24 #3`)."""
    beside = query == QUERIES["beside"]
    return "\n\n".join(f"Solution {i}:\nAnswer: {a}" + (f" #{i}" if beside else "") + f"\nEnd of solution {i}."
                         for i, a in enumerate(answers))


def short_blocks(task, query: str = QUERY) -> str:
    """The candidates of `task` cut to their final `Answer:` lines (what `short_episode` queries)."""
    return answer_blocks(task.candidate_answers, query)


def synthetic_draw(rng: random.Random, repeats: int, answer_max: int) -> tuple:
    """(answers, order): 2-8 distinct random answers (0..answer_max-1) and the indices to query, each `repeats`
    times, every pass in a random order."""
    n = rng.randint(2, 8)
    answers = [str(a) for a in rng.sample(range(answer_max), n)]
    return answers, [i for _ in range(repeats) for i in rng.sample(range(n), n)]


def synthetic_episode(rng: random.Random, query: str = QUERY, repeats: int = 2, answer_max: int = 1000) -> str:
    """A short episode of 2-8 candidates with distinct random answers and no problem: every answer queried `repeats`
    times in random order (the pointer alone, as densely as it can be written)."""
    answers, order = synthetic_draw(rng, repeats, answer_max)
    return answer_blocks(answers) + "".join(query.format(answer=answers[i]) + f"{i}." for i in order)


def synthetic_items(count: int, seed: int, query: str = QUERY, answer_max: int = 1000) -> list:
    """Held-out items of `synthetic_episode`'s kind: (blocks + the query of the first index it would ask, that
    index, N)."""
    rng = random.Random(seed)
    items = []
    for _ in range(count):
        answers, order = synthetic_draw(rng, 1, answer_max)
        items.append((answer_blocks(answers) + query.format(answer=answers[order[0]]), order[0], len(answers)))
    return items


def probe_items(tasks, seed: int = 1, short: bool = False, query: str = QUERY) -> list:
    """(prompt + query text, target index, N) for every task with a uniquely stated answer; `short`: the
    short rendering (`short_blocks`) instead of the prompt."""
    rng = random.Random(seed)
    items = []
    for t in tasks:
        pairs = unique_answers(t)
        if pairs:
            i, a = pairs[rng.randrange(len(pairs))]
            items.append(((short_blocks(t, query) if short else t.prompt) + query.format(answer=a), i,
                          t.num_candidates))
    return items


TARGET = re.compile(r"Find:\nAnswer: \S+(?:\n(?:It is in Solution|End of solution) | #)(\d)")


def target_rows(tokenizer, texts: list, width: int) -> list:
    """`texts` as packed rows of (token id, 1 if the token is a pointer query's index else 0), each text followed
    by EOS (weight 0), packed as `pretrain.pack` packs."""
    from driver.models.pretrain import pack

    lists = []
    for text in texts:
        enc = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
        starts = {m.start(1) for m in TARGET.finditer(text)}
        lists.append([(t, int(a in starts)) for t, (a, _) in zip(enc["input_ids"], enc["offset_mapping"])]
                     + [(tokenizer.eos_token_id, 0)])
    return pack(lists, width)


def weighted_loss(logits, ids, mask, weights, lm_weight: float):
    """`lm_weight` x the mean next-token loss over real tokens + the mean loss over the weighted (pointer) tokens,
    both `pretrain.lm_loss` (the pointer part with `weights` as its mask). Shapes: logits (B, T, V); ids, mask,
    weights (B, T)."""
    from driver.models.pretrain import lm_loss

    return lm_weight * lm_loss(logits, ids, mask) + lm_loss(logits, ids, weights)


def pointer_accuracy(model, tokenizer, items, batch: int = 16) -> float:
    """Share of `items` whose argmax over the index tokens 0..N-1 at the query's end is the target."""
    import torch

    from core.chat import index_token_ids

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    index_ids = index_token_ids(tokenizer, 10)
    model.eval()
    right = 0
    with torch.no_grad():
        for s in range(0, len(items), batch):
            chunk = items[s:s + batch]
            seqs = [tokenizer(text, add_special_tokens=False)["input_ids"] for text, _, _ in chunk]
            width = max(map(len, seqs))
            ids = torch.full((len(seqs), width), pad)
            mask = torch.zeros_like(ids)
            for k, q in enumerate(seqs):  # left-padded so the query ends at the last position
                ids[k, width - len(q):] = torch.tensor(q)
                mask[k, width - len(q):] = 1
            position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
            logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids).logits[:, -1]
            for row, (_, target, n) in zip(logits, chunk):
                right += int(int(row[index_ids[:n]].argmax()) == target)
    model.train()
    return right / max(1, len(items))


def main(argv=None) -> int:
    import torch
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from driver.data.dataset import load_dataset
    from driver.models.pretrain import lm_batch, lm_loss
    from driver.models.warmstart import clipped_step, save_model_folder

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the start (a cached tiny model, pretrained or not)")
    ap.add_argument("--train-dataset", required=True, help="episodes from its training split")
    ap.add_argument("--heldout-dataset", action="append", required=True, help="read on its held-out split")
    ap.add_argument("--out", required=True, help="folder for pointer.json and the model")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--rows-per-step", type=int, default=4)
    ap.add_argument("--pack-tokens", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-items", type=int, default=200)
    ap.add_argument("--short-share", type=float, default=0.0,
                    help="share of episodes written short (short_episode), mixed in at random")
    ap.add_argument("--query", choices=sorted(QUERIES), default="find",
                    help="find: `It is in Solution i.`; echo: `End of solution i.` (the block's own context)")
    ap.add_argument("--lm-weight", type=float, default=None,
                    help="loss = this x language modelling + the mean loss on the pointer indices only (default: "
                         "language modelling on every token, the indices among them)")
    ap.add_argument("--synthetic", type=int, default=0,
                    help="train on this many synthetic episodes (synthetic_episode) instead of the dataset's")
    ap.add_argument("--answer-max", type=int, default=1000, help="synthetic answers are 0..this-1")
    ap.add_argument("--seed", type=int, default=0, help="of the episodes' order and queries (a continued run: another)")
    ap.add_argument("--epochs", type=int, default=1, help="passes over the training split")
    ap.add_argument("--max-candidates", type=int, default=0, help="train on episodes of at most this many (0: all)")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(2)
    query = QUERIES[args.query]
    if args.query == "beside" and (args.short_share < 1 or args.synthetic):
        ap.error("--query beside writes the index beside each answer: short episodes only (--short-share 1.0)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    train = [t for t in load_dataset(args.train_dataset).train
             if not args.max_candidates or t.num_candidates <= args.max_candidates]
    rng = random.Random(args.seed)
    rng.shuffle(train)
    texts = [synthetic_episode(rng, query, answer_max=args.answer_max) for _ in range(args.synthetic)]
    for _ in range(args.epochs if not args.synthetic else 0):  # each pass: episodes and queries in another order
        rng.shuffle(train)
        texts += [(short_episode if rng.random() < args.short_share else episode)(t, rng, query) for t in train]
    rows = target_rows(tokenizer, texts, args.pack_tokens)
    held = {}
    for path in args.heldout_dataset:
        tasks = load_dataset(path).heldout
        held[f"{Path(path).name}/pairs"] = probe_items([t for t in tasks if t.num_candidates == 2], query=query)[:args.eval_items]
        held[f"{Path(path).name}/all"] = probe_items(tasks, query=query)[:args.eval_items]
        if args.short_share:
            held[f"{Path(path).name}/short"] = probe_items(tasks, short=True, query=query)[:args.eval_items]
    if args.synthetic:
        held["synthetic"] = synthetic_items(args.eval_items, 12345, query, args.answer_max)
    held = {k: v for k, v in held.items() if v}
    steps = min(args.steps, len(rows) // args.rows_per_step)
    print(f"{len(train)} episodes -> {len(rows)} rows of <= {args.pack_tokens} tokens; {steps} steps of "
          f"{args.rows_per_step}; held-out items: " + ", ".join(f"{k} {len(v)}" for k, v in held.items()), flush=True)

    def evaluate(step, loss=None):
        entry = {"step": step, "seconds": round(time.time() - t0, 1),
                 **{k: round(pointer_accuracy(model, tokenizer, v), 4) for k, v in held.items()}}
        if loss is not None:
            entry["loss"] = round(loss, 4)
        log.append(entry)
        tqdm.write(json.dumps(entry))

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    t0, log, losses = time.time(), [], []
    evaluate(0)
    model.train()
    for step in tqdm(range(1, steps + 1), desc="pointer pretraining", mininterval=5):
        batch = rows[(step - 1) * args.rows_per_step:step * args.rows_per_step]
        ids, mask = lm_batch(tokenizer, [[t for t, _ in row] for row in batch])
        weights, _ = lm_batch(tokenizer, [[w for _, w in row] for row in batch])
        weights = weights * mask  # lm_batch pads with the pad token's id: zero the padding
        if args.lm_weight is None:  # plain language modelling on every token
            loss = lm_loss(model(input_ids=ids, attention_mask=mask).logits, ids, mask)
        else:
            loss = weighted_loss(model(input_ids=ids, attention_mask=mask).logits, ids, mask, weights, args.lm_weight)
        losses.append(clipped_step(loss, model, opt, sched))
        if step % args.eval_every == 0 or step == steps:
            evaluate(step, sum(losses[-args.eval_every:]) / len(losses[-args.eval_every:]))
            (out / "pointer.json").write_text(json.dumps({"args": vars(args), "log": log}, indent=1))
    save_model_folder(model, tokenizer, args.model, out / "model", {"pointer.json": {"args": vars(args), "log": log}})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Can a selector reach its own arithmetic? A response that rewrites the disputed line, then names the candidate.

    .venv/bin/python benchmarks/route_probe.py --model .cache/models/<pretrained> --dataset .cache/datasets/<pairs>
        [--ws-steps 300] [--ws-lr 3e-4] [--rl-steps 0] [--rl-lr 1e-4]

Session 18 found that a model pretrained on correct worked solutions prefers the correct candidate of 92% of
hedge-free pairs by its own likelihood, while a one-token judgment trained on the same pairs stays at chance:
the knowledge is in the weights, the route from it to the index token is missing. This probe gives the judgment
a short route. The selector's response is

    <the first line where the candidates disagree, rewritten>
    Judgment: k

and the judgment names the candidate whose line the rewrite matches (a copy, not a decision).

Format-only warm-start (`--ws-steps`): the target rewrites the disputed line of a candidate k drawn uniformly
at random and names k, so the targets say nothing about which candidate is right; and the tokens where the
candidates' lines differ are left out of the loss, so the warm-start never trains what to write there. Those
tokens come from the model's own next-token prediction: its pretrained arithmetic, or whatever else it learned.

RL (`--rl-steps`): G sampled responses per prompt at temperature 1, reward 1 when the judgment names a correct
candidate, advantage (r - mean) / std within the group (equal-reward groups skipped, as dynamic sampling does),
token-level policy-gradient loss over the whole response (DAPO's token-level mean, arXiv 2503.14476; on-policy,
so no ratio clipping).

Reported on the held-out pairs, greedy: judgment accuracy, how often the rewrite equals the correct candidate's
line (`rewrite_correct`), and how often the judgment names a candidate whose line the rewrite equals
(`consistent`). A plain-torch probe without Ray or vLLM, like benchmarks/learnability.py.
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from core.chat import SEPARATOR  # noqa: E402  (the tiny model's prompt/response separator)

JUDGMENT = re.compile(r"Judgment:\s*(\d+)")


def disputed_line(candidates: list):
    """(line number, the candidates' lines there, length of their common prefix) of the first line where the
    candidates disagree, or None when they agree everywhere."""
    rows = [c.split("\n") for c in candidates]
    for i in range(max(map(len, rows))):
        lines = [r[i] if i < len(r) else "" for r in rows]
        if len(set(lines)) > 1:
            common = 0
            while all(len(x) > common and x[common] == lines[0][common] for x in lines):
                common += 1
            return i, lines, common
    return None


OPEN_LINE = "Work it out: "


def open_prefix(lines: list, common: int) -> str:
    """The disputed line's shared beginning, cut back to its last space (whole tokens): `16 + 9 = ` of
    `16 + 9 = 15` / `16 + 9 = 25`; empty when the lines differ from the first word."""
    shared = lines[0][:common]
    return shared[: shared.rfind(" ") + 1] if " " in shared else ""


def route_prompt(task, open_line: bool) -> str:
    """The prompt text the model continues: the GenSelect prompt and the response separator; with `open_line`,
    also `OPEN_LINE` and the disputed line's shared beginning, so the response starts at its first disputed word."""
    if not open_line:
        return task.prompt + SEPARATOR
    _, lines, common = disputed_line(task.candidates)
    return task.prompt + SEPARATOR + OPEN_LINE + open_prefix(lines, common)


def response_example(tokenizer, task, k: int, open_line: bool = False):
    """(prompt ids, response ids, loss mask) of the response that rewrites candidate k's disputed line (with
    `open_line`: only what follows the prompt's open prefix) and names k; the mask is 0 on the tokens at or after
    the first character where the candidates' lines differ."""
    _, lines, common = disputed_line(task.candidates)
    prompt = tokenizer(route_prompt(task, open_line), add_special_tokens=False)["input_ids"]
    written = lines[k][len(open_prefix(lines, common)):] if open_line else lines[k]
    common -= len(lines[k]) - len(written)
    text = written + f"\nJudgment: {k}"
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    mask = [0 if (end > common and start < len(written)) else 1 for start, end in enc["offset_mapping"]]
    return prompt, enc["input_ids"] + [tokenizer.eos_token_id], mask + [1]


def batch_tensors(examples: list, pad: int):
    """Right-padded (ids, attention, loss weights) for [(prompt, response, mask)]: weights on response tokens."""
    import torch

    width = max(len(p) + len(r) for p, r, _ in examples)
    ids = torch.full((len(examples), width), pad)
    attn = torch.zeros_like(ids)
    weights = torch.zeros(len(examples), width)
    for j, (p, r, m) in enumerate(examples):
        ids[j, :len(p) + len(r)] = torch.tensor(p + r)
        attn[j, :len(p) + len(r)] = 1
        weights[j, len(p):len(p) + len(r)] = torch.tensor(m, dtype=torch.float)
    return ids, attn, weights


def token_logps(model, ids, attn):
    """(batch, width) log-prob of each token given the ones before it (column 0 is 0)."""
    import torch

    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    picked = torch.log_softmax(logits, -1).gather(2, ids[:, 1:, None])[..., 0]
    return torch.cat([torch.zeros_like(picked[:, :1]), picked], 1)


def generate(model, tokenizer, tasks: list, greedy: bool, samples: int = 1, max_new: int = 32,
             open_line: bool = False) -> list:
    """[[response text] * samples] per task, left-padded batch generation."""
    import torch

    prompts = [tokenizer(route_prompt(t, open_line), add_special_tokens=False)["input_ids"] for t in tasks]
    prompts = [p for p in prompts for _ in range(samples)]
    width = max(map(len, prompts))
    pad = tokenizer.pad_token_id
    ids = torch.full((len(prompts), width), pad)
    attn = torch.zeros_like(ids)
    for j, p in enumerate(prompts):
        ids[j, width - len(p):] = torch.tensor(p)
        attn[j, width - len(p):] = 1
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=max_new, do_sample=not greedy,
                             temperature=1.0 if not greedy else None, top_p=None, top_k=None,
                             pad_token_id=pad, eos_token_id=tokenizer.eos_token_id)
    texts = tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
    return [texts[i * samples:(i + 1) * samples] for i in range(len(tasks))]


def read_response(task, text: str, open_line: bool = False) -> dict:
    """{judgment, correct, rewrite_correct, consistent} of one response."""
    match = JUDGMENT.search(text)
    k = int(match.group(1)) if match else -1
    _, lines, common = disputed_line(task.candidates)
    rewrite = ((open_prefix(lines, common) if open_line else "") + text.split("\n")[0]).strip()
    right = [lines[i] for i in range(len(lines)) if task.correct[i]]
    return {"judgment": k, "correct": 0 <= k < task.num_candidates and bool(task.correct[k]),
            "rewrite_correct": rewrite in right,
            "consistent": 0 <= k < task.num_candidates and lines[k] == rewrite}


def evaluate(model, tokenizer, tasks: list, open_line: bool = False) -> dict:
    model.eval()
    reads = []
    for start in range(0, len(tasks), 32):
        chunk = tasks[start:start + 32]
        responses = generate(model, tokenizer, chunk, greedy=True, open_line=open_line)
        reads += [read_response(t, r[0], open_line) for t, r in zip(chunk, responses)]
    model.train()
    return {key: sum(r[key] for r in reads) / len(reads) for key in ("correct", "rewrite_correct", "consistent")}


def rl_examples(tokenizer, tasks: list, responses: list, open_line: bool = False):
    """[(prompt, response ids, mask)] and rewards of sampled responses, with each group's advantages."""
    examples, advantages, rewards = [], [], []
    for task, group in zip(tasks, responses):
        r = [float(read_response(task, text, open_line)["correct"]) for text in group]
        rewards += r
        mean = sum(r) / len(r)
        std = (sum((x - mean) ** 2 for x in r) / (len(r) - 1)) ** 0.5
        if std == 0:
            continue
        prompt = tokenizer(route_prompt(task, open_line), add_special_tokens=False)["input_ids"]
        for text, x in zip(group, r):
            ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            examples.append((prompt, ids, [1] * len(ids)))
            advantages.append((x - mean) / (std + 1e-6))
    return examples, advantages, sum(rewards) / max(1, len(rewards))


def main(argv=None) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from driver.data.dataset import load_dataset

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--ws-steps", type=int, default=300)
    ap.add_argument("--ws-lr", type=float, default=3e-4)
    ap.add_argument("--rl-steps", type=int, default=0)
    ap.add_argument("--rl-lr", type=float, default=1e-4)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--heldout", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--diff-view", action="store_true",
                    help="repeat the first disputed row just before the question (learnability.with_diff_view)")
    ap.add_argument("--open-line", action="store_true",
                    help="end the prompt with the disputed line's shared beginning: the response writes its result")
    ap.add_argument("--save", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    data = load_dataset(args.dataset)
    train = [t for t in data.train if disputed_line(t.candidates)]
    heldout = [t for t in data.heldout if disputed_line(t.candidates)][: args.heldout]
    if args.diff_view:
        from learnability import with_diff_view
        train, heldout = [with_diff_view(t) for t in train], [with_diff_view(t) for t in heldout]
    rng.shuffle(train)
    curve = [{"stage": "start", "step": 0, **evaluate(model, tokenizer, heldout, args.open_line)}]
    print(curve[-1], flush=True)
    started = time.time()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.ws_lr, weight_decay=0.0)
    cursor = 0
    for step in range(1, args.ws_steps + 1):
        chunk = [train[(cursor + i) % len(train)] for i in range(args.batch)]
        cursor += args.batch
        examples = [response_example(tokenizer, t, rng.randrange(t.num_candidates), args.open_line) for t in chunk]
        ids, attn, weights = batch_tensors(examples, tokenizer.pad_token_id)
        loss = -(token_logps(model, ids, attn) * weights).sum() / weights.sum()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % args.eval_every == 0 or step == args.ws_steps:
            curve.append({"stage": "warm-start", "step": step, "loss": float(loss.detach()),
                          "seconds": round(time.time() - started), **evaluate(model, tokenizer, heldout, args.open_line)})
            print(curve[-1], flush=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.rl_lr, weight_decay=0.0)
    rewards = []
    for step in range(1, args.rl_steps + 1):
        chunk = [train[(cursor + i) % len(train)] for i in range(args.batch)]
        cursor += args.batch
        model.eval()
        responses = generate(model, tokenizer, chunk, greedy=False, samples=args.group, open_line=args.open_line)
        model.train()
        examples, advantages, reward = rl_examples(tokenizer, chunk, responses, args.open_line)
        rewards.append(reward)
        if examples:
            ids, attn, weights = batch_tensors(examples, tokenizer.pad_token_id)
            adv = torch.tensor(advantages)[:, None]
            loss = -(token_logps(model, ids, attn) * weights * adv).sum() / weights.sum()
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        if step % args.eval_every == 0 or step == args.rl_steps:
            recent = rewards[-args.eval_every:]
            curve.append({"stage": "rl", "step": step, "sampled_reward": sum(recent) / len(recent),
                          "seconds": round(time.time() - started), **evaluate(model, tokenizer, heldout, args.open_line)})
            print(curve[-1], flush=True)
    result = {"model": args.model, "dataset": args.dataset, "args": vars(args), "train_prompts": len(train),
              "heldout_prompts": len(heldout), "curve": curve, "seconds": round(time.time() - started),
              "machine": f"{platform.machine()} {platform.processor()}"}
    if args.save:
        model.save_pretrained(args.save)
        tokenizer.save_pretrained(args.save)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

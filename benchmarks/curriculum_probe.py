"""The one-token RL probe of `learnability.py`, with the full system's curriculum over N: minutes, no Ray.

    .venv/bin/python benchmarks/curriculum_probe.py [CONFIG] [key=value ...] [--lr 3e-4] [--steps 250]
        [--margin 0.15] [--window 10] [--seed 0]

Prepares the config's dataset and model exactly as `driver.train` does (pretraining and warm-start included;
`model.pretrain.steps=0` compares without pretraining), then trains the index decision with the policy
gradient of a one-token response (group-normalised advantage, groups with equal rewards skipped, sampling
constrained to the valid indices 0..N-1 as `rollout.constrain_index` does), `prompts_per_step` prompts x G
samples a step. Prompts are drawn at the curriculum's current largest N (half of each batch) or below, and one
more candidate is admitted when the sampled reward at the largest N has beaten random@N by `--margin` over
`--window` steps' worth of prompts (the rule of `driver/curriculum.py`, simplified). Every 25 steps: held-out
greedy accuracy over all of 2-8 candidates and by N, and the sampled (temperature 1) accuracy.
Writes benchmarks/results/curriculum-probe.json.
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def evaluate(model, tokenizer, held, index_ids) -> dict:
    """Greedy and sampled accuracy over `held`, and greedy accuracy by N (valid indices only)."""
    import torch

    from learnability import last_logits

    model.eval()
    by_n = {}
    with torch.no_grad():
        for s in range(0, len(held), 32):
            chunk = held[s:s + 32]
            for t, row in zip(chunk, last_logits(model, tokenizer, chunk, [])):
                probs = torch.softmax(row[index_ids[:t.num_candidates]], -1)
                sampled = sum(float(probs[k]) for k in range(t.num_candidates) if t.correct[k])
                by_n.setdefault(t.num_candidates, []).append((t.correct[int(probs.argmax())], sampled))
    model.train()
    every = [x for v in by_n.values() for x in v]
    return {"greedy": sum(x[0] for x in every) / len(every), "sampled": sum(x[1] for x in every) / len(every),
            "by_n": {n: round(sum(x[0] for x in v) / len(v), 3) for n, v in sorted(by_n.items())}}


def rl_step(model, tokenizer, batch, index_ids, group_size: int, optimizer) -> list:
    """One policy-gradient step on `batch`; returns per-prompt (N, mean sampled reward, pass rate)."""
    import torch

    from learnability import last_logits

    terms, seen = [], []
    for t, logits in zip(batch, last_logits(model, tokenizer, batch, [])):
        log_probs = torch.log_softmax(logits[index_ids[:t.num_candidates]], -1)
        picks = torch.multinomial(log_probs.exp(), group_size, replacement=True)
        rewards = torch.tensor([float(t.correct[int(k)]) for k in picks])
        seen.append((t.num_candidates, float(rewards.mean()), sum(t.correct) / t.num_candidates))
        if rewards.std() > 0:
            terms.append(-((rewards - rewards.mean()) / (rewards.std() + 1e-6)) * log_probs[picks])
    if terms:
        optimizer.zero_grad()
        torch.cat(terms).mean().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return seen


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config", nargs="?", default="selector")
    ap.add_argument("overrides", nargs="*")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--steps", type=int, default=250)
    ap.add_argument("--margin", type=float, default=0.15)
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from core.chat import index_token_ids
    from core.config import load_config
    from driver.data.builder import summarize
    from driver.data.dataset import load_dataset
    from driver.prepare import prepare

    cfg = load_config(a.config, a.overrides)
    prepared = prepare(cfg.data, cfg.model, eval_prompts=cfg.eval_prompts)
    data = load_dataset(prepared.dataset_dir)
    held = data.heldout[:cfg.eval_prompts]
    by_n = {}
    for t in data.train:
        by_n.setdefault(t.num_candidates, []).append(t)
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    tokenizer = AutoTokenizer.from_pretrained(prepared.model_dir)
    model = AutoModelForCausalLM.from_pretrained(prepared.model_dir, dtype=torch.float32)
    index_ids = index_token_ids(tokenizer, cfg.data.max_candidates)
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    stats = summarize(held)
    print(f"majority@N {stats.majority_at_n:.3f}  random@N {stats.random_at_n:.3f}", flush=True)
    cap, gains, evals, admitted, t0 = cfg.curriculum.start_candidates, [], [], {}, time.time()
    need = a.window * cfg.prompts_per_step // 2
    for step in range(a.steps + 1):
        if step % 25 == 0:
            evals.append({"step": step, "max_candidates": cap, **evaluate(model, tokenizer, held, index_ids)})
            e = evals[-1]
            print(f"step {step} max N {cap} greedy {e['greedy']:.3f} sampled {e['sampled']:.3f} by N {e['by_n']} "
                  f"({time.time() - t0:.0f} s)", flush=True)
        if step == a.steps:
            break
        batch = [rng.choice(by_n[cap if rng.random() < 0.5 else rng.randint(cfg.data.min_candidates, cap)])
                 for _ in range(cfg.prompts_per_step)]
        seen = rl_step(model, tokenizer, batch, index_ids, cfg.rollout.samples_per_prompt, optimizer)
        gains += [reward - rate for n, reward, rate in seen if n == cap]
        if len(gains) >= need and sum(gains[-need:]) / need >= a.margin and cap < cfg.data.max_candidates:
            cap, gains = cap + 1, []
            admitted[cap] = step + 1
            print(f"  step {step + 1}: max N -> {cap}", flush=True)
    out = {"config": a.config, "overrides": a.overrides, "args": vars(a), "machine": platform.platform(),
           "majority_at_n": stats.majority_at_n, "random_at_n": stats.random_at_n, "admitted": admitted,
           "evals": evals, "seconds": round(time.time() - t0, 1)}
    path = ROOT / "benchmarks" / "results" / "curriculum-probe.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

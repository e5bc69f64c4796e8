"""Can this model learn this selection dataset at all? A minutes-long proxy of RL, without Ray or vLLM.

    .venv/bin/python benchmarks/learnability.py [CONFIG] [--mode rl|sft] [--lr 1e-3] [--steps 150]
        [--max-candidates N] [--constrain] [--entropy-coef C] [--line-labels] [key=value ...]

The selector's only decision is the index token after `Judgment: `. This probe prepares the config's
dataset and (warm-started) model exactly as `driver.train` does, then trains that one decision in plain
torch on CPU:

* `rl`: for each of `prompts_per_step` prompts, sample G indices from the model's next-token distribution,
  reward 1 when the index names a correct candidate, advantage (r - mean) / std within the group (groups
  with equal rewards skipped, as dynamic sampling does), loss -mean(A * log pi(index)): the DAPO/GRPO
  policy gradient of a one-token response (arXiv 2503.14476), on-policy, no clipping needed;
* `sft`: cross-entropy towards the set of correct indices (-log sum_{correct k} pi(k)): an upper bound
  on what RL could reach with the same number of prompts.

`--scale mean` divides the centred rewards by the group's mean instead of its std: the `loglik` estimator of
the full system (core/algo/bon.py, the gradient of log P(success)). `--both-orders` also reports the
2-candidate accuracy read as given and reversed (the position-debiased knockout judgment of driver.evaluate), and
that reading by the slip kind of each pair's wrong candidate (`both_orders_by_slip`, at every evaluation; the
final one also at the top level of the result).

`--ema D` reads (and `--save` writes) an exponential moving average of the weights with decay D instead of the
trained weights themselves, which oscillate in the no-cue pair runs; the training is the same.

`--constrain` restricts the policy to the valid indices 0..N-1 (renormalised), as `rollout.constrain_index`
does in the full system; `--entropy-coef` adds an entropy bonus on the index distribution.

Every `--eval-every` steps it reports held-out greedy accuracy (the same metric as GenSelect@N in
`driver.evaluate`) next to majority@N, random@N and the accuracy of always answering 0. If the `sft` mode
cannot beat majority@N, RL with the full system will not either; the reverse does not hold.
Writes `--out` (default benchmarks/results/learnability-<mode>.json) and, with `--save DIR`, the trained model as
a selector folder that `driver.evaluate` reads (e.g. its knockout accuracy on a no-cue held-out set).
"""
from __future__ import annotations

import argparse
import copy
import json
import platform
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def last_logits(model, tokenizer, tasks, suffix_ids, temperature: float = 1.0):
    """Logits (batch, vocab) of the token after `prompt + "Judgment: "` (left-padded batch)."""
    import torch

    from core.chat import prompt_token_ids

    seqs = [prompt_token_ids(tokenizer, t.prompt) + suffix_ids for t in tasks]
    width = max(map(len, seqs))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = torch.full((len(seqs), width), pad)
    mask = torch.zeros_like(ids)
    for j, s in enumerate(seqs):
        ids[j, width - len(s):] = torch.tensor(s)
        mask[j, width - len(s):] = 1
    return model(input_ids=ids, attention_mask=mask).logits[:, -1, :] / temperature


def greedy_accuracy(model, tokenizer, tasks, suffix_ids, index_ids, constrain: bool = False) -> float:
    import torch

    lookup = {tok: i for i, tok in enumerate(index_ids)}
    model.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, len(tasks), 32):
            chunk = tasks[start:start + 32]
            for task, row in zip(chunk, last_logits(model, tokenizer, chunk, suffix_ids)):
                if constrain:
                    row = row[index_ids[:task.num_candidates]]
                    k = int(row.argmax())
                else:
                    k = lookup.get(int(row.argmax()), -1)
                correct += 0 <= k < task.num_candidates and task.correct[k]
    model.train()
    return correct / max(1, len(tasks))


def both_orders_hits(model, tokenizer, tasks, suffix_ids, index_ids, style) -> list:
    """(pair, whether it was won) for every 2-candidate task read in both orders: candidate k scores
    log pi(k | A, B) + log pi(1 - k | B, A) (the knockout rule `core.algo.knockout.both_orders_pick`, as
    driver.evaluate and the service apply it). Tasks with other N skipped."""
    import torch

    from core.algo.genselect import mirrored_task
    from core.algo.knockout import both_orders_pick

    pairs, ids = [t for t in tasks if t.num_candidates == 2], index_ids[:2]
    hits = []
    model.eval()
    with torch.no_grad():
        for start in range(0, len(pairs), 32):
            chunk = pairs[start:start + 32]
            flipped = [mirrored_task(t, style) for t in chunk]
            a = torch.log_softmax(last_logits(model, tokenizer, chunk, suffix_ids)[:, ids], -1).tolist()
            b = torch.log_softmax(last_logits(model, tokenizer, flipped, suffix_ids)[:, ids], -1).tolist()
            hits += [(t, bool(t.correct[both_orders_pick(f, r)])) for t, f, r in zip(chunk, a, b)]
    model.train()
    return hits


def both_orders_readings(hits: list) -> dict:
    """From `both_orders_hits`: the accuracy in both orders and that accuracy by slip kind."""
    return {"both_orders": sum(won for _, won in hits) / max(1, len(hits)),
            "both_orders_by_slip": accuracy_by_slip(hits)}


def accuracy_by_slip(hits: list) -> dict:
    """{slip kind of the pair's wrong candidate: {pairs, accuracy}} (driver.data.slips; pairs whose two
    candidates are both wrong or both correct are skipped): which mistakes a pair check catches."""
    from driver.data.slips import slip_kind

    by_kind = {}
    for task, won in hits:
        if sum(task.correct) != 1:
            continue
        kind = slip_kind(task.candidates[task.correct.index(False)])
        by_kind.setdefault(kind, []).append(won)
    return {k: {"pairs": len(v), "accuracy": sum(v) / len(v)} for k, v in sorted(by_kind.items())}


def policy_loss(log_probs, tasks, index_ids, mode: str, group_size: int, entropy_coef: float = 0.0,
                constrain: bool = False, scale: str = "std"):
    """Loss of one step and the mean sampled reward. log_probs: (batch, vocab) log pi at the index token.
    `entropy_coef` > 0 subtracts that multiple of the mean entropy of the index distribution (a bonus)."""
    import torch

    lookup = {tok: i for i, tok in enumerate(index_ids)}
    terms, rewards = [], []
    for task, row in zip(tasks, log_probs):
        correct = [index_ids[k] for k in range(task.num_candidates) if task.correct[k]]
        if mode == "sft":
            terms.append(-torch.logsumexp(row[correct], 0).view(1))
            continue
        if constrain:  # the policy restricted to the valid indices 0..N-1 (renormalised), as constrained decoding
            valid = torch.full_like(row, float("-inf"))
            valid[index_ids[:task.num_candidates]] = 0.0
            row = torch.log_softmax(row + valid, -1)
        sampled = torch.multinomial(row.exp(), group_size, replacement=True)
        r = torch.tensor([float(lookup.get(int(s), -1) in range(task.num_candidates)
                                and task.correct[lookup[int(s)]]) for s in sampled])
        rewards.append(float(r.mean()))
        if r.std() > 0:
            terms.append(-((r - r.mean()) / ((r.std() if scale == "std" else r.mean()) + 1e-6)) * row[sampled])
    loss = torch.cat(terms).mean() if terms else None
    if loss is not None and entropy_coef:
        loss = loss - entropy_coef * -(log_probs.exp() * log_probs).sum(-1).mean()
    return loss, (sum(rewards) / len(rewards) if rewards else float("nan"))


DIFF_HEADER = "First line where the solutions differ:"


def with_diff_view(task):
    """`task` with its first disputed row repeated just before the question: the first line number at which the
    candidates do not all agree, each candidate's version labelled `i| `. A function of the candidates only (no
    labels): a diff view, where for two candidates the slip is."""
    import dataclasses

    from core.algo.genselect import PROMPT_FOOTER
    from route_probe import disputed_line

    disputed = disputed_line(task.candidates)
    shown = [f"{j}| {line}" for j, line in enumerate(disputed[1])] if disputed else []
    footer = PROMPT_FOOTER.split("{")[0]
    head, sep, tail = task.prompt.rpartition(footer)
    return dataclasses.replace(task, prompt=head + DIFF_HEADER + "\n" + "\n".join(shown) + "\n\n" + sep + tail)


def ema_update(average, model, decay: float) -> None:
    """average <- decay * average + (1 - decay) * model, parameter by parameter (Polyak averaging)."""
    import torch

    with torch.no_grad():
        for avg, new in zip(average.parameters(), model.parameters()):
            avg.lerp_(new, 1.0 - decay)


def save_selector(model, tokenizer, source: Path, folder: Path, style) -> None:
    """`model` as a selector folder: `source`'s metadata files (genselect_model.json, ...), the trained weights
    and tokenizer, and the prompt style the probe rendered its prompts with."""
    import shutil

    from core.algo.genselect import write_prompt_style

    folder.mkdir(parents=True, exist_ok=True)
    for meta in source.glob("*.json"):
        shutil.copy(meta, folder / meta.name)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    write_prompt_style(folder, style)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config", nargs="?", default="selector")
    ap.add_argument("overrides", nargs="*")
    ap.add_argument("--mode", choices=("rl", "sft"), default="rl")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--max-candidates", type=int, default=16, help="keep prompts with at most this many")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--constrain", action="store_true", help="sample only valid indices (rl)")
    ap.add_argument("--entropy-coef", type=float, default=0.0, help="entropy bonus on the index distribution (rl)")
    ap.add_argument("--scale", choices=("std", "mean"), default="std",
                    help="rl advantage (r - mean) / std (GRPO) or / mean (the gradient of log P(success))")
    ap.add_argument("--both-orders", action="store_true",
                    help="also report 2-candidate accuracy read in both candidate orders (position-debiased)")
    ap.add_argument("--mirror", action="store_true",
                    help="each step: prompts_per_step/2 prompts, each beside its copy with the candidates reversed")
    ap.add_argument("--model", default=None,
                    help="start from this model folder (e.g. a run's export/) instead of the config's warm-started "
                         "model; with --steps 0, only evaluate it on the config's held-out prompts")
    ap.add_argument("--out", default=None, help="result JSON (default: benchmarks/results/learnability-<mode>.json)")
    ap.add_argument("--ema", type=float, default=0.0,
                    help="read and save an exponential moving average of the weights with this decay (e.g. 0.995: "
                         "~200 steps), updated after every optimizer step; training itself is unchanged (0: off)")
    ap.add_argument("--save", default=None,
                    help="write the trained model here as a selector folder (weights, tokenizer, prompt style), "
                         "readable by driver.evaluate")
    ap.add_argument("--line-labels", action="store_true",
                    help="prefix every candidate line with its candidate's index: the override data.line_labels=true")
    ap.add_argument("--diff-view", action="store_true",
                    help="repeat the rows where the candidates disagree just before the question (with_diff_view)")
    args = ap.parse_args(argv)
    if args.line_labels:
        args.overrides.append("data.line_labels=true")  # after the given ones, as if written last

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from core.algo.genselect import PromptStyle, mirrored_task
    from core.config import load_config
    from driver.data.builder import summarize
    from driver.data.dataset import load_dataset
    from driver.prepare import prepare

    cfg = load_config(args.config, args.overrides)
    prepared = prepare(cfg.data, cfg.model, eval_prompts=cfg.eval_prompts or 200, with_model=args.model is None)
    model_dir = Path(args.model) if args.model else prepared.model_dir
    data = load_dataset(prepared.dataset_dir)
    keep = lambda tasks: [t for t in tasks if t.num_candidates <= args.max_candidates]  # noqa: E731
    train, heldout = keep(data.train), keep(data.heldout)[: cfg.eval_prompts or 200]
    if args.diff_view:
        train, heldout = [with_diff_view(t) for t in train], [with_diff_view(t) for t in heldout]
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    # the prompt ends where the index is written: after "Judgment: " (the tiny model's prompt holds it already)
    from core.chat import ANSWER_PREFIX, answer_prefix, index_token_ids
    suffix = [] if answer_prefix(tokenizer) else tokenizer(ANSWER_PREFIX, add_special_tokens=False)["input_ids"]
    index_ids = index_token_ids(tokenizer, max(t.num_candidates for t in train + heldout))
    if index_ids is None:
        sys.exit("the probe needs one token per candidate index; this tokenizer splits some (use --max-candidates 10)")
    stats = summarize(heldout)
    first_index = sum(t.correct[0] for t in heldout) / max(1, len(heldout))
    print(f"model {model_dir}\ndataset {prepared.dataset_dir}: {len(train)} train / {len(heldout)} "
          f"held-out prompts; majority@N {stats.majority_at_n:.3f} random@N {stats.random_at_n:.3f} "
          f"always-0 {first_index:.3f}", flush=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    rng = random.Random(cfg.seed)
    order = list(range(len(train)))
    rng.shuffle(order)
    style = PromptStyle.of(cfg.data)
    # what is read and saved: the trained weights, or with --ema their exponential moving average
    reader = copy.deepcopy(model) if args.ema else model

    def readings() -> dict:
        both = both_orders_readings(both_orders_hits(reader, tokenizer, heldout, suffix, index_ids, style)) \
            if args.both_orders else {}
        return {"accuracy": greedy_accuracy(reader, tokenizer, heldout, suffix, index_ids, args.constrain), **both}

    curve = [{"step": 0, **readings()}]
    print(f"step 0 held-out accuracy {curve[0]['accuracy']:.3f} {curve[0].get('both_orders', '')}", flush=True)
    started, rewards = time.time(), []
    for step in range(1, args.steps + 1):
        if args.mirror:
            half = cfg.prompts_per_step // 2
            picked = [train[order[(step * half + i) % len(train)]] for i in range(half)]
            batch = [t for task in picked for t in (task, mirrored_task(task, style))]
        else:
            batch = [train[order[(step * cfg.prompts_per_step + i) % len(train)]]
                     for i in range(cfg.prompts_per_step)]
        log_probs = torch.log_softmax(last_logits(model, tokenizer, batch, suffix, cfg.rollout.temperature), -1)
        loss, reward = policy_loss(log_probs, batch, index_ids, args.mode, cfg.rollout.samples_per_prompt,
                                   args.entropy_coef, args.constrain, args.scale)
        rewards.append(reward)
        if loss is not None:
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.learner.grad_clip)
            optimizer.step()
            if args.ema:
                ema_update(reader, model, args.ema)
        if step % args.eval_every == 0 or step == args.steps:
            recent = [r for r in rewards[-args.eval_every:] if r == r]
            curve.append({"step": step, "sampled_reward": sum(recent) / len(recent) if recent else None,
                          **readings()})
            reward = "" if args.mode == "sft" else f" sampled reward {curve[-1]['sampled_reward']:.3f}"
            orders = f" both orders {curve[-1]['both_orders']:.3f}" if args.both_orders else ""
            print(f"step {step} held-out accuracy {curve[-1]['accuracy']:.3f}{orders}{reward} "
                  f"({time.time() - started:.0f} s)", flush=True)
    result = {"config": args.config, "overrides": args.overrides, "model": str(model_dir), "mode": args.mode,
              "lr": args.lr, "ema": args.ema, "steps": args.steps, "mirror": args.mirror, "entropy_coef": args.entropy_coef, "scale": args.scale, "constrain": args.constrain, "diff_view": args.diff_view, "max_candidates": args.max_candidates, "train_prompts": len(train),
              "heldout_prompts": len(heldout), "majority_at_n": stats.majority_at_n,
              "random_at_n": stats.random_at_n, "always_first": first_index, "curve": curve,
              "seconds": round(time.time() - started, 1), "machine": f"{platform.machine()} {platform.processor()}"}
    if args.both_orders:  # the final reading by what is wrong with each pair's wrong candidate
        result["both_orders_by_slip"] = curve[-1]["both_orders_by_slip"]
        print("both orders, by slip kind: " + ", ".join(
            f"{k} {v['accuracy']:.2f} ({v['pairs']})" for k, v in result["both_orders_by_slip"].items()), flush=True)
    if args.save:
        save_selector(reader, tokenizer, model_dir, Path(args.save), style)
        print(f"saved the trained selector to {args.save}")
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"learnability-{args.mode}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

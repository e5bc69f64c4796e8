"""Learner step without Ray: where the time goes, and how it scales. On the plain selector's built batch
(configs/selector.yaml, the small index selector) or on the batches a real run trained on (`--batches`).

Without `--batches`, builds the plain selector's tiny Qwen3 (3.4M parameters, fp32; `driver.prepare` on
configs/selector.yaml, cached under .cache/) and a GenSelect-shaped batch from its dataset: `--prompts` prompts (16,
its prompts_per_step) x `--samples` responses (8), each response one constrained index token, as its rollout samples
them. The batch is packed by `core.packing.pack_sequences` (the learner's
`micro_batch_tokens`, 8192) and one learner step is run as the learner runs it: per micro-batch the forward of
`actors.learner.policy_forward._PolicyLogprobs`, `actors.learner.policy_forward.micro_batch_loss`, backward; then
global-norm clipping and AdamW (torch; DeepSpeed left out). Modes (`--attention`, comma-separated, run interleaved step
by step on copies of the same weights, and their log-probs compared): `dense` is the dense-mask-rows layout (rows as
wide as the longest unit, a dense (rows, 1, W, W) boolean mask into SDPA, the whole last layer); `blocks` the
packed-blocks layout (one padding-free row, attention by blocks, actors/learner/packed_attention.py, the last layer at
the targets); `blocks_full` and `dense_pruned` isolate the last-layer change; `merged` is `blocks` on the batch after
`core.packing.merge_identical` (identical samples computed once, weighted by their copies: what the learner
runs). `--batches FILE` replaces the built batch by the batches a real run trained on
(`benchmarks/record_batches.py`; the step cycles through them, and the model is that run's start). `--deepspeed`
runs the real `Learner.train_step` (DeepSpeed ZeRO-2, one rank, in process) instead, and `--code DIR` takes
actors/, core/ and driver/ from another checkout (the commit before a change) for a before/after of the real thing.

    # dense-mask rows against packed blocks on the default batch: median and spread
    # (1 thread: the default learner actor's OMP_NUM_THREADS)
    python benchmarks/learner_step.py --attention dense,blocks --repeats 15
    # where the time goes (torch.profiler, top ops by self CPU time)
    python benchmarks/learner_step.py --attention dense --profile
    # memory and time of one step on one packed row of W tokens (one GenSelect group: a prompt + G responses)
    python benchmarks/learner_step.py --attention blocks --row-tokens 4096 --repeats 3
    # the embedded default's learner (pick-then-point) on the batches of a real run: dense-mask rows, packed blocks,
    # packed blocks with identical samples merged
    python benchmarks/record_batches.py --out runs/batches/default.pkl -- default run_dir=runs/batches/default
    python benchmarks/learner_step.py --batches runs/batches/default.pkl --attention dense,blocks,merged
    # the real learner step, this checkout and another
    python benchmarks/learner_step.py --deepspeed
    PYTHONPATH=../before python benchmarks/learner_step.py --deepspeed --code ../before

Each run prints a JSON line (and appends it to --out when given): medians, min/max, the machine's load.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import resource
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# --code DIR: import actors/, core/ and driver/ from another checkout (e.g. the commit before a change)
_code = sys.argv[sys.argv.index("--code") + 1] if "--code" in sys.argv else str(REPO)
sys.path.insert(0, str(REPO))
sys.path.insert(0, _code)


def default_model_and_tasks(config: str = "configs/selector.yaml"):
    """(model folder, train tasks, tokenizer) of the default run, built or reused by driver.prepare."""
    from transformers import AutoTokenizer

    from core.config import load_config
    from driver.data.dataset import load_dataset
    from driver.prepare import prepare

    cfg = load_config(str(REPO / config))
    prepared = prepare(cfg.data, cfg.model, with_model=True, progress=False, tiny_cfg=cfg.tiny)
    return prepared.model_dir, load_dataset(prepared.dataset_dir).train, AutoTokenizer.from_pretrained(
        prepared.model_dir), cfg


def genselect_batch(tasks, tokenizer, prompts: int, samples: int, seed: int = 0) -> list:
    """`prompts` x `samples` TrainSequences shaped as the default's: the prompt as the rollout encodes it,
    one constrained index token as the response (uniform behaviour log-probs), group-normalised
    advantages of the correct/incorrect choice (a group with no signal gets +-1 so every token counts)."""
    from core.records import TrainSequence
    from core.chat import index_token_ids, prompt_token_ids

    rng = random.Random(seed)
    out = []
    for task in tasks[:prompts]:
        ids = prompt_token_ids(tokenizer, task.prompt)
        allowed = index_token_ids(tokenizer, task.num_candidates)
        picks = [rng.randrange(task.num_candidates) for _ in range(samples)]
        rewards = [float(task.labels[k]) for k in picks]
        mean = sum(rewards) / samples
        std = statistics.stdev(rewards) if samples > 1 else 0.0
        adv = [(r - mean) / (std + 1e-6) if std > 0 else rng.choice([-1.0, 1.0]) for r in rewards]
        lp = -math.log(task.num_candidates)
        out += [TrainSequence(ids, [allowed[k]], [lp], a, 0, allowed_token_ids=allowed) for k, a in zip(picks, adv)]
    return out


def long_group(width: int, prompt_len: int, samples: int, vocab: int, seed: int = 0) -> list:
    """One GenSelect group whose packed unit is exactly `width` input tokens: a `prompt_len` prompt and
    `samples` unconstrained responses of near-equal length (the paper-scale shape: long responses)."""
    from core.records import TrainSequence

    rng = random.Random(seed)
    prompt = [rng.randrange(2, vocab) for _ in range(prompt_len)]
    total = width - prompt_len + samples  # sum of response lengths (each response adds R_j - 1 inputs)
    lengths = [total // samples + (1 if j < total % samples else 0) for j in range(samples)]
    return [TrainSequence(prompt, [rng.randrange(2, vocab) for _ in range(r)], [-2.0] * r,
                          1.0 if j % 2 == 0 else -1.0, 0) for j, r in enumerate(lengths)]


def load_model(model_dir, mode: str, dtype: str = "float32", device: str = "cpu", checkpointing: bool = False):
    """The learner's module (weights in `dtype`, on `device`; `checkpointing`: the learner's
    `gradient_checkpointing`); "dense" is the dense-mask-rows layout: the whole last layer at every position."""
    import torch
    from transformers import AutoModelForCausalLM

    from actors.learner.policy_forward import _PolicyLogprobs, enable_gradient_checkpointing
    from tiny_recipe.induction import freeze_if_wired

    hf = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=getattr(torch, dtype), attn_implementation="sdpa")
    freeze_if_wired(hf, model_dir)  # as the learner does: a wired induction circuit's entries get no gradient
    if checkpointing:
        enable_gradient_checkpointing(hf)
    return _PolicyLogprobs(hf.to(device), last_layer_at_targets=mode in ("blocks", "merged", "dense_pruned")).train()


def inputs(mb, attention: str, device=None) -> dict:
    """The learner's forward kwargs for `mb`, with the dense mask or the block layout; tensors moved to `device`
    when given (the dense mask is built on the CPU, then moved)."""
    out = {"input_ids": mb.input_ids, "position_ids": mb.position_ids, "target_index": mb.target_index,
           "target_ids": mb.target_ids, "allowed_ids": mb.allowed_ids, "free_targets": mb.free_targets}
    out["attention_mask"] = mb.dense_attention_mask() if attention.startswith("dense") else mb.attention_mask
    if device is None:
        return out
    return {k: v if v is None else v.to(device) for k, v in out.items()}


class Step:
    """One learner step: forward/backward of each micro-batch, clip, AdamW (torch; DeepSpeed left out)."""

    def __init__(self, module, algo, lr: float = 3e-4, grad_clip: float = 1.0):
        import torch

        self.module, self.algo, self.grad_clip = module, algo, grad_clip
        self.device = next(module.parameters()).device
        self.optimizer = torch.optim.AdamW(module.parameters(), lr=lr)

    def logprobs(self, packed: list, attention: str, num_sequences: int) -> list:
        """Per-sequence target log-probs under the current weights (no grad)."""
        import torch

        from core.packing import unpack_per_sequence

        out = [[] for _ in range(num_sequences)]
        with torch.no_grad():
            for mb in packed:
                unpack_per_sequence(self.module(**inputs(mb, attention, self.device))[0], mb, out)
        return out

    def loss(self, mb, attention: str, num_tokens: int, num_anchor_tokens: int = 0):
        """Forward of one micro-batch and the loss `Learner.train_step` backpropagates with one mini-batch: the
        decoupled ratio's proximal policy is the forward's own values (`ratio_reference: proximal`), and the solution
        anchor is added when the batch has anchor tokens."""
        from actors.learner.policy_forward import anchor_loss, micro_batch_loss

        prox = None if self.algo.ratio_reference == "proximal" else False
        logprobs, _ = self.module(**inputs(mb, attention, self.device))
        loss = micro_batch_loss(logprobs, mb, self.algo, num_tokens, 1, prox)[0]
        if num_anchor_tokens and mb.anchor_weights is not None:
            loss = loss + anchor_loss(logprobs, mb, self.algo.solution_anchor, num_anchor_tokens, 1)[0]
        return loss

    def loss_and_grad(self, packed: list, attention: str, num_tokens: int, num_anchor_tokens: int) -> tuple:
        """(loss, flat gradient) of one step's batch on the current weights, without an update."""
        import torch

        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for mb in packed:
            loss = self.loss(mb, attention, num_tokens, num_anchor_tokens)
            loss.backward()
            total += float(loss.detach())
        grad = torch.cat([q.grad.flatten() for q in self.module.parameters() if q.grad is not None])
        self.optimizer.zero_grad(set_to_none=True)
        return total, grad

    def __call__(self, packed: list, attention: str, num_tokens: int, num_anchor_tokens: int = 0) -> dict:
        """One step (`loss` per micro-batch, backward; then clip and AdamW); its timing."""
        import torch

        timing = {"forward_s": 0.0, "backward_s": 0.0, "optimizer_s": 0.0}
        cpu0 = time.process_time()
        self.optimizer.zero_grad(set_to_none=True)
        for mb in packed:
            t0 = time.perf_counter()
            loss = self.loss(mb, attention, num_tokens, num_anchor_tokens)
            t1 = time.perf_counter()
            loss.backward()
            timing["forward_s"] += t1 - t0
            timing["backward_s"] += time.perf_counter() - t1
        t0 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.grad_clip)
        self.optimizer.step()
        timing["optimizer_s"] = time.perf_counter() - t0
        timing["step_s"] = sum(timing.values())
        timing["cpu_s"] = time.process_time() - cpu0  # CPU seconds of this process: less sensitive to load
        return timing


def deepspeed_steps(model_dir, cfg, batches: list, repeats: int, warmup: int) -> list:
    """The real thing: `actors.learner.learner.Learner` (DeepSpeed ZeRO-2, one rank, in process) on the default's
    learner config, `train_step` on `batches` (lists of TrainSequence) in turn; returns its timing metrics per step."""
    from actors.learner.learner import Learner
    from core.packing import count_loss_tokens
    from core.net import free_port
    from tiny_recipe.model import frozen_entries

    learner = Learner(cfg.learner, cfg.algorithm, str(model_dir), master_port=free_port(),
                      total_train_steps=cfg.steps, frozen=frozen_entries(model_dir))  # as a run hands it
    out = []
    try:
        for k in range(warmup + repeats):
            seqs = batches[k % len(batches)]
            cpu0 = time.process_time()
            m = learner.train_step(seqs, count_loss_tokens(seqs), k)
            m["cpu_s"] = time.process_time() - cpu0
            if k >= warmup:
                out.append({"step_s": m["seconds"], "cpu_s": m["cpu_s"], "forward_s": m["forward_s"],
                            "backward_s": m["backward_s"], "optimizer_s": m["optimizer_s"]})
    finally:
        learner.shutdown()
    return out


def summary(values: list) -> dict:
    values = sorted(values)
    return {"median": statistics.median(values), "min": values[0], "max": values[-1],
            "p90": values[min(len(values) - 1, int(0.9 * len(values)))], "n": len(values)}


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def recorded_batches(path: str, limit: int = 0) -> tuple:
    """(model folder, config, batches) of a pickle written by benchmarks/record_batches.py; `limit` > 0 keeps that
    many batches spread evenly over the run."""
    import pickle

    from core.config import load_config

    with open(path, "rb") as f:
        data = pickle.load(f)
    batches = data["batches"]
    if limit and limit < len(batches):
        batches = [batches[round(i * (len(batches) - 1) / (limit - 1))] if limit > 1 else batches[0]
                   for i in range(limit)]
    return data["model_dir"], load_config(data["config"], data["overrides"]), batches


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--attention", default="dense,blocks",
                   help="comma-separated modes, run interleaved step by step: dense (dense-mask rows: padded rows, "
                        "dense mask, whole last layer), blocks (packed blocks: flat rows, block attention, last "
                        "layer's MLP at the targets), merged (blocks on the batch with identical samples merged: "
                        "what the learner runs), blocks_full (blocks, whole last layer), dense_pruned")
    p.add_argument("--threads", type=int, default=1, help="torch threads (the default learner actor: 1)")
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--micro-batch-tokens", type=int, default=8192)
    p.add_argument("--row-tokens", type=int, default=0,
                   help="instead of the default batch: one packed row of this many tokens (one long group)")
    p.add_argument("--prompt-tokens", type=int, default=1024, help="prompt length of the --row-tokens group")
    p.add_argument("--batches", default="", help="instead of the built batch: the batches a real run trained on "
                                                 "(a pickle of benchmarks/record_batches.py), in turn, one a step")
    p.add_argument("--batch-limit", type=int, default=0, help="with --batches: keep this many, spread over the run")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--profile", action="store_true", help="torch.profiler over --repeats steps: top ops")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--out", default="", help="append the JSON result to this file")
    p.add_argument("--deepspeed", action="store_true",
                   help="run the real Learner.train_step (DeepSpeed, one rank, in process) instead of the modes")
    p.add_argument("--merge", action="store_true", help="with --deepspeed: merge identical samples first, as "
                                                        "driver.step.shard does")
    p.add_argument("--code", default=str(REPO), help="checkout whose actors/ is benchmarked (default: this one)")
    args = p.parse_args(argv)

    import torch

    from core.packing import (count_anchor_tokens, count_loss_tokens, merge_identical, pack_sequences,
                              padding_fraction)

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    budget = args.micro_batch_tokens
    if args.batches:
        model_dir, cfg, batches = recorded_batches(args.batches, args.batch_limit)
        shape = f"{len(batches)} batches of a real run ({args.batches}), one a step in turn"
    else:
        model_dir, tasks, tokenizer, cfg = default_model_and_tasks()
        if args.row_tokens:
            batches = [long_group(args.row_tokens, args.prompt_tokens, args.samples, len(tokenizer))]
            budget = args.row_tokens
            shape = f"one row of {args.row_tokens} tokens (prompt {args.prompt_tokens}, {args.samples} responses)"
        else:
            batches = [genselect_batch(tasks, tokenizer, args.prompts, args.samples)]
            shape = f"{args.prompts} prompts x {args.samples} responses (default)"
    steps = args.warmup + args.repeats
    if args.deepspeed:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        seqs = [merge_identical(b) if args.merge else b for b in batches]
        times = deepspeed_steps(model_dir, cfg, seqs, args.repeats, args.warmup)
        result = {"deepspeed": True, "merged": args.merge, "code": args.code, "threads": args.threads,
                  "loadavg": os.getloadavg(), "shape": shape,
                  **{k: summary([t[k] for t in times]) for k in ("step_s", "cpu_s", "forward_s", "backward_s",
                                                                 "optimizer_s")}}
        print(json.dumps(result))
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(result) + "\n")
        return result
    modes = args.attention.split(",")
    counts = [(count_loss_tokens(b), count_anchor_tokens(b) if cfg.algorithm.solution_anchor else 0) for b in batches]
    runs = {}
    for mode in modes:  # each mode: its own packing, model copy (same weights) and optimizer
        layout = "rows" if mode.startswith("dense") else "flat"
        packed = [pack_sequences(merge_identical(b) if mode == "merged" else b, budget, layout=layout)
                  for b in batches]
        runs[mode] = {"packed": packed, "step": Step(load_model(model_dir, mode), cfg.algorithm), "times": []}
    rss0 = peak_rss_mib()
    # the same weights, the first batch: the loss and gradient each mode computes (results must not change)
    checks = {mode: run["step"].loss_and_grad(run["packed"][0], mode, *counts[0]) for mode, run in runs.items()}
    logprobs = {mode: run["step"].logprobs(run["packed"][0], mode, len(batches[0]))
                for mode, run in runs.items() if mode != "merged"}

    def one_step(k: int, mode: str, run: dict) -> dict:
        i = k % len(batches)
        return run["step"](run["packed"][i], mode, *counts[i])

    for k in range(args.warmup):
        for mode, run in runs.items():
            one_step(k, mode, run)
    top_ops = None
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
            for k in range(args.warmup, steps):
                for mode, run in runs.items():
                    run["times"].append(one_step(k, mode, run))
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top))
        events = prof.key_averages()
        total = sum(e.self_cpu_time_total for e in events)
        top_ops = [{"op": e.key, "self_s_per_step": e.self_cpu_time_total / 1e6 / args.repeats,
                    "share": round(e.self_cpu_time_total / total, 4), "calls_per_step": e.count / args.repeats}
                   for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:args.top]]
    else:
        for k in range(args.warmup, steps):  # interleaved: background load falls on every mode alike
            for mode, run in runs.items():
                run["times"].append(one_step(k, mode, run))
    measured = [batches[k % len(batches)] for k in range(args.warmup, steps)]
    result = {
        "threads": args.threads, "profiled": args.profile, "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(), "torch": torch.__version__, "shape": shape,
        "sequences_per_step": statistics.median(len(b) for b in measured),
        "sequence_tokens_per_step": statistics.median(sum(s.input_length for s in b) for b in measured),
        "loss_tokens_per_step": statistics.median(count_loss_tokens(b) for b in measured),
        "peak_rss_mib": round(peak_rss_mib(), 1), "rss_before_steps_mib": round(rss0, 1),
        "loadavg": os.getloadavg(), "modes": {},
    }
    first = modes[0]
    for mode, run in runs.items():
        packed = [run["packed"][k % len(batches)] for k in range(args.warmup, steps)]
        times = run["times"]
        result["modes"][mode] = {
            "micro_batches_per_step": statistics.median(len(p) for p in packed),
            "rows_x_width_first": [tuple(m.input_ids.shape) for m in run["packed"][0]],
            "input_tokens_per_step": statistics.median(sum(m.num_real_tokens for m in p) for p in packed),
            "padding_fraction": round(statistics.mean(padding_fraction(p) for p in packed), 4),
            "attention_pairs_per_step": statistics.median(
                sum(m.attention_mask.scored_pairs() if mode in ("blocks", "merged", "blocks_full") else
                    m.padded_tokens * m.input_ids.shape[1] for m in p) for p in packed),
            "first_batch_loss": checks[mode][0],
            "first_batch_loss_diff_vs_" + first: abs(checks[mode][0] - checks[first][0]),
            "first_batch_grad_max_abs_diff_vs_" + first: float((checks[mode][1] - checks[first][1]).abs().max()),
            **{k: summary([t[k] for t in times]) for k in ("step_s", "cpu_s", "forward_s", "backward_s",
                                                             "optimizer_s")}}
    unmerged = [m for m in modes if m != "merged"]
    if len(unmerged) > 1:  # the same weights, the same sequences: the log-probs each mode computes
        a, b = (torch.tensor(sum(logprobs[m], [])) for m in unmerged[:2])
        result["logprob_max_abs_diff"] = float((a - b).abs().max())
    if top_ops:
        result["top_ops"] = top_ops
    line = json.dumps(result)
    print(line)
    if args.out:
        with open(args.out, "a") as f:
            f.write(line + "\n")
    return result


if __name__ == "__main__":
    main()

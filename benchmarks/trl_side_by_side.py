"""TRL's GRPOTrainer beside genselect-rl on the same model, prompts and response budget: completions per second.

    .venv/bin/pip install --target .cache/trl trl==1.16.0 datasets==4.8.4 pandas xxhash multiprocess --no-deps
    PYTHONPATH=.cache/trl .venv/bin/python benchmarks/trl_side_by_side.py --rounds 2 \\
        [--out benchmarks/results/smollm2_trl_side_by_side.json]

Each round runs, one after the other on this machine (never at once: two CPU-heavy jobs on 2 cores slow each other
many times over), `--steps` steps of each:

* genselect-rl: `python -m driver.train smollm2_procedural` (SmolLM2-135M-Instruct, the default's training pairs in
  its chat template, G = 8 responses to each of 16 prompts a step, at most `--budget` tokens each: reasoning up to
  budget - 8, then the forced judgment), its step time read from metrics.jsonl;
* TRL: `GRPOTrainer` (transformers generation, no vLLM: TRL's vLLM path needs a GPU server or colocated CUDA
  engine) on the same model folder, the same prompts (the same dataset's training prompts, chat template applied by
  TRL), `num_generations` 8, 128 completions a step, `max_completion_length` = `--budget`, temperature 1, the same
  binary reward (the parsed judgment's label), fp32, one optimizer step over the 128 in 8 micro-batches of 16,
  its step time read from a callback.

The first step of each is left out (engine start, first compilation); completions/s = 128 / seconds a step. The
ratio is genselect-rl's completions/s over TRL's, per round and over rounds. The response forms differ where they
must: TRL samples free text up to the budget (SmolLM2 writes no judgment itself, so its rewards are 0 and its loss
has no signal; the timing is what is compared), genselect-rl reasons up to budget - 8 and forces the judgment.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPTS_PER_STEP, G = 16, 8


def ours(steps: int, budget: int, run_dir: Path) -> list:
    """Seconds per step of genselect-rl's run (first step left out)."""
    args = [sys.executable, "-m", "driver.train", "smollm2_procedural", f"run_dir={run_dir}", f"steps={steps}",
            "resume=never", "eval_every=0", "eval_prompts=2", "eval_test_prompts=0", "eval_without_cue=false",
            "eval_knockout_window=0", "checkpoint_every=0", "progress=false", "algorithm.dynamic_sampling=false",
            f"rollout.response_form.reasoning_budget={budget - 8}", f"rollout.max_response_tokens={budget}",
            f"prompts_per_step={PROMPTS_PER_STEP}", f"rollout.samples_per_prompt={G}", "max_staleness=1",
            "weight_sync.check_every=0"]
    subprocess.run(args, cwd=ROOT, check=True)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r["time/step_s"] for r in rows if r.get("kind") == "train"][1:]


def trl(steps: int, budget: int, out_dir: Path) -> list:
    """Seconds per step of TRL's GRPOTrainer on the same model and prompts (first step left out)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from core.algo.genselect import parse_judgment
    from core.config import load_config
    from driver.data.dataset import load_dataset
    from driver.models.registry import resolve_model
    from driver.prepare import prepare

    cfg = load_config("smollm2_procedural")
    model_dir = resolve_model(cfg.model)
    tasks = load_dataset(prepare(cfg.data, cfg.model, with_model=False, tiny_cfg=cfg.tiny).dataset_dir).train
    by_prompt = {t.prompt: t for t in tasks}
    rows = [{"prompt": [{"role": "user", "content": t.prompt}]} for t in tasks[:PROMPTS_PER_STEP * (steps + 1)]]

    def reward(prompts, completions, **_) -> list:
        out = []
        for prompt, completion in zip(prompts, completions):
            task = by_prompt[prompt[-1]["content"]]
            index = parse_judgment(completion[-1]["content"], task.num_candidates).index
            out.append(float(index is not None and task.labels[index] > 0))
        return out

    times = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *args, **kwargs):
            self.started = time.perf_counter()

        def on_step_end(self, *args, **kwargs):
            times.append(time.perf_counter() - self.started)

    torch.set_num_threads(os.cpu_count() or 2)
    # one generation batch of 128 completions a step, trained in 8 micro-batches of 16 (one optimizer step, as ours:
    # 128 sequences in one backward pass do not fit this machine's memory in fp32)
    args = GRPOConfig(output_dir=str(out_dir), max_steps=steps, per_device_train_batch_size=PROMPTS_PER_STEP,
                      gradient_accumulation_steps=G, num_generations=G, max_completion_length=budget, temperature=1.0, top_p=1.0,
                      learning_rate=1e-5, beta=0.0, loss_type="dapo", epsilon_high=0.28, use_cpu=True,
                      logging_steps=1, save_strategy="no", report_to=[], bf16=False, seed=0)
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                          processing_class=AutoTokenizer.from_pretrained(model_dir), reward_funcs=reward,
                          args=args, train_dataset=Dataset.from_list(rows), callbacks=[StepTimer()])
    trainer.train()
    return times[1:]


def summary(seconds: list) -> dict:
    rates = [PROMPTS_PER_STEP * G / s for s in seconds]
    return {"step_s": seconds, "completions_per_s_median": statistics.median(rates),
            "completions_per_s_min": min(rates), "completions_per_s_max": max(rates)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/trl_side_by_side.py", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4, help="steps of each system a round (the first left out)")
    parser.add_argument("--budget", type=int, default=40, help="response budget in tokens")
    parser.add_argument("--work", default="runs/trl_side_by_side")
    parser.add_argument("--out", default="benchmarks/results/smollm2_trl_side_by_side.json")
    args = parser.parse_args(argv)
    work, rounds = ROOT / args.work, []
    for r in range(args.rounds):
        mine = summary(ours(args.steps, args.budget, work / f"ours{r}"))
        theirs = summary(trl(args.steps, args.budget, work / f"trl{r}"))
        ratio = mine["completions_per_s_median"] / theirs["completions_per_s_median"]
        rounds.append({"genselect_rl": mine, "trl": theirs, "ratio": ratio})
        print(f"round {r}: genselect-rl {mine['completions_per_s_median']:.2f} completions/s, TRL "
              f"{theirs['completions_per_s_median']:.2f}, ratio {ratio:.2f}", flush=True)
    result = {"command": " ".join(sys.argv), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "load_average": os.getloadavg(), "budget_tokens": args.budget, "prompts_per_step": PROMPTS_PER_STEP,
              "samples_per_prompt": G, "rounds": rounds,
              "ratio_over_rounds": [r["ratio"] for r in rounds]}
    out = ROOT / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

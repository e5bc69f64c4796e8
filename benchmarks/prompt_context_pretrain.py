"""Worked solutions after a selection prompt: can the model learn to solve where a selector writes?

    .venv/bin/python benchmarks/prompt_context_pretrain.py --model runs/s21/pt-packed/stage3 \
        --prompts-dataset .cache/datasets/<no-cue 2-8 set> --out runs/s21/ctx [--steps 300] [--batch-size 4]

`solve_then_match.py --context prompt` showed that a model pretrained on worked solutions solves 55% of the no-cue
problems from the start of a text but 17-18% after a selection prompt, its own or another problem's: the long prompt
before the problem is what it was never trained on. This continues such a model on texts that put one there: the
selection prompt of a *training* task of `--prompts-dataset` (another problem, drawn at random; the prompt is text
only, no label is read), a blank line, then a correct worked solution of a fresh procedural problem in the
pretraining format (`driver.models.pretrain.solution_texts`, seed 901, the dataset's held-out problems left out).
The loss is on the worked solution only (the prompt is context). AdamW with a linear warm-up over the first 5%, one
prompt-and-solution text a row, `--batch-size` rows a step, two torch threads; the model is saved to `--out` with
`context_pretrain.json` (steps, losses, seconds).
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

CORPUS_SEED = 901


def context_row(tokenizer, before: str, text: str) -> tuple:
    """(context ids, target ids, target weights): `driver.models.selection_rows.context_row` in the triple form
    `route_probe.batch_tensors` pads."""
    from driver.models.selection_rows import context_row as split_row

    context, target = split_row(tokenizer, before, text)
    return context, target, [1] * len(target)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the start (a model pretrained on worked solutions)")
    parser.add_argument("--prompts-dataset", required=True,
                        help="a selection dataset: its training prompts are the context, its held-out problems stay "
                             "out of the corpus")
    parser.add_argument("--out", required=True, help="the trained model folder")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import torch
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from core.config import PretrainConfig
    from driver.data.dataset import load_dataset
    from driver.models.pretrain import lm_loss, solution_texts
    from driver.models.warmstart import clipped_step, save_model_folder, torch_threads
    from route_probe import batch_tensors

    data = load_dataset(args.prompts_dataset)
    texts = solution_texts(PretrainConfig(steps=args.steps, batch_size=args.batch_size, seed=CORPUS_SEED),
                           frozenset(t.problem for t in data.heldout))
    rng = random.Random(args.seed)
    prompts = [rng.choice(data.train).prompt for _ in texts]
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    rows = [context_row(tokenizer, p, t) for p, t in zip(prompts, texts)]
    steps = min(args.steps, len(rows) // args.batch_size)
    with torch_threads(2):
        torch.manual_seed(args.seed)
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
        warmup = max(1, steps // 20)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
        model.train()
        losses, start = [], time.time()
        bar = tqdm(range(steps), desc="worked solutions after a prompt")
        for step in bar:
            ids, attention, loss_mask = batch_tensors(rows[step * args.batch_size:(step + 1) * args.batch_size], pad)
            logits = model(input_ids=ids, attention_mask=attention).logits.float()
            losses.append(clipped_step(lm_loss(logits, ids, loss_mask), model, opt, sched))
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
        record = {"steps": steps, "batch_size": args.batch_size, "lr": args.lr, "start": args.model,
                  "prompts_dataset": args.prompts_dataset, "corpus_seed": CORPUS_SEED, "losses": losses,
                  "seconds": time.time() - start}
        save_model_folder(model, tokenizer, args.model, args.out, {"context_pretrain.json": record})
    tail = losses[-20:]
    print(f"{steps} steps in {record['seconds']:.0f} s; solution loss over the last {len(tail)}: "
          f"{sum(tail) / len(tail):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

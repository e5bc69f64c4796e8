"""How many steps does the tiny model need to form an induction head (copy what followed the same context before)?

    .venv/bin/python benchmarks/induction_probe.py --model .cache/models/<tiny>[-pt-...] --out runs/<name>.json \
        [--steps 600] [--length 64] [--batch 16] [--lr 1e-3] [--vary] [--alphabet K] [--save DIR]

Every pointer this project's selector would need (find the candidate that states X; copy a candidate's line; name
the candidate that wrote what the response wrote) is, at bottom, an induction head: attend to the earlier place
whose context matches the current one and copy the token that followed it. Session 20's pointer pretraining
(`pointer_pretrain.py`) taught such pointers densely and did not form one. This is the cleanest form of the task:
each row is `length` random tokens of the model's vocabulary (special tokens left out) followed by the same tokens
again; the loss is on the repeat only, where every token is predictable by copying and by nothing else. Reported
every `--eval-every` steps: the share of a fixed held-out batch's repeat tokens (after the first) predicted exactly.
A model without induction reads ~1/vocabulary; a formed induction head reads close to 1.
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


def repeated_rows(generator, rows: int, length: int, low: int, high: int):
    """(rows, 2 * length) token ids: `length` uniform tokens in [low, high), then the same again."""
    import torch

    first = torch.randint(low, high, (rows, length), generator=generator)
    return torch.cat([first, first], dim=1)


def repeat_loss_and_accuracy(model, ids, length: int):
    """Cross-entropy and exact-prediction share over the repeat's tokens after its first (positions length+1..);
    the first repeated token follows nothing that occurred before, so it is left out."""
    import torch

    logits = model(input_ids=ids).logits[:, length:-1]
    targets = ids[:, length + 1:]
    loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets)
    return loss, (logits.argmax(-1) == targets).float().mean().item()


def main(argv=None) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from driver.models.warmstart import clipped_step

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True, help="result JSON")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--length", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--vary", action="store_true",
                    help="draw each step's length from [length/4, length] and read held-out rows of four lengths: "
                         "with one fixed length, a head that copies from a fixed distance back solves the task "
                         "without matching any content")
    ap.add_argument("--alphabet", type=int, default=0,
                    help="draw the random tokens from only this many tokens (0: the whole vocabulary): with a "
                         "small alphabet one token no longer says where the copy is, only a context of several does")
    ap.add_argument("--save", default=None, help="write the trained model folder here")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(2)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    low, high = len(tokenizer.all_special_ids) + 1, model.config.vocab_size
    if args.alphabet:
        high = min(high, low + args.alphabet)
    held_gen, train_gen = torch.Generator().manual_seed(1), torch.Generator().manual_seed(0)
    lengths = [args.length // 4, args.length // 2, 3 * args.length // 4, args.length] if args.vary else [args.length]
    held = [(repeated_rows(held_gen, 64 // len(lengths), n, low, high), n) for n in lengths]
    draw = random.Random(0)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, args.steps // 20)))
    log, t0 = [], time.time()
    for step in range(args.steps + 1):
        if step % args.eval_every == 0:
            model.eval()
            with torch.no_grad():
                accuracy = sum(repeat_loss_and_accuracy(model, rows, n)[1] for rows, n in held) / len(held)
            model.train()
            log.append({"step": step, "copy_accuracy": round(accuracy, 4), "seconds": round(time.time() - t0, 1)})
            print(json.dumps(log[-1]), flush=True)
        if step < args.steps:
            n = draw.randint(args.length // 4, args.length) if args.vary else args.length
            ids = repeated_rows(train_gen, args.batch, n, low, high)
            clipped_step(repeat_loss_and_accuracy(model, ids, n)[0], model, opt, sched)
    if args.save:
        from driver.models.warmstart import save_model_folder

        save_model_folder(model, tokenizer, args.model, args.save, {"induction.json": {"args": vars(args), "log": log}})
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "vocabulary": high - low, "log": log}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`model.pretrain` with its worked solutions packed into long rows: arithmetic at the positions a selection reads.

Session 19's first packed model (probe K); the pretraining stage now does this itself with
`model.pretrain.pack_tokens` (texts separated by EOS there, by a blank line here).

    .venv/bin/python benchmarks/packed_pretrain.py --base .cache/models/<tiny base> \
        --dataset .cache/datasets/<pairs> --out-model runs/<name> [--steps 600] [--pack-tokens 1024]

`context_likelihood.py` found that the pretrained model's preference for the correct result of a disputed line
(74% right after `Problem: ... Solution:` at the start of a text) is at chance (49%) when the same worked solution
follows other problems' solutions as long as a selection prompt: `model.pretrain` trains on one short text per
row (~60 tokens), so its arithmetic was learned at positions 0-80 only, and a selection prompt puts the
candidates at positions 50-500. This is the same corpus (`pretrain.solution_texts`: correct worked solutions,
the held-out problems of `--dataset` excluded, same seed, same number of texts and steps), each text followed by
a blank line, packed into rows of up to `--pack-tokens` tokens (a new row starts when the next text would not
fit), the loss on every token, as language-model pretraining usually packs documents.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main(argv=None) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from core.config import PretrainConfig
    from driver.data.dataset import load_dataset
    from driver.models.pretrain import lm_batch, lm_loss, pack, solution_texts
    from driver.models.warmstart import clipped_step

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the tiny model before any training (a cached base model)")
    ap.add_argument("--dataset", required=True, help="its held-out problems are excluded")
    ap.add_argument("--out-model", required=True)
    ap.add_argument("--steps", type=int, default=600, help="model.pretrain.steps (the corpus is steps x 32 texts)")
    ap.add_argument("--pack-tokens", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=3e-3)
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(2)
    cfg = PretrainConfig(steps=args.steps, batch_size=32, lr=args.lr)
    heldout = frozenset(t.problem for t in load_dataset(args.dataset).heldout)
    texts = solution_texts(cfg, heldout)
    random.Random("pretrain-0").shuffle(texts)
    tokenizer = AutoTokenizer.from_pretrained(args.base)
    tokens = [tokenizer(t + "\n", add_special_tokens=False)["input_ids"] for t in texts]
    rows = pack(tokens, args.pack_tokens)
    per_step = max(1, round(len(rows) / args.steps))
    model = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    warmup = max(1, args.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    started, losses = time.time(), []
    for step in range(len(rows) // per_step):
        chunk = rows[step * per_step:(step + 1) * per_step]
        ids, mask = lm_batch(tokenizer, chunk)
        loss = lm_loss(model(input_ids=ids, attention_mask=mask).logits.float(), ids, mask)
        losses.append(clipped_step(loss, model, opt, sched))
        if (step + 1) % 50 == 0:
            print(f"step {step + 1} loss {sum(losses[-50:]) / 50:.3f} ({time.time() - started:.0f} s)", flush=True)
    model.save_pretrained(args.out_model)
    tokenizer.save_pretrained(args.out_model)
    stats = {"base": args.base, **dataclasses.asdict(cfg), "pack_tokens": args.pack_tokens, "texts": len(texts),
             "rows": len(rows), "rows_per_step": per_step, "steps_run": len(losses), "loss_first": losses[0],
             "loss_last50": sum(losses[-50:]) / len(losses[-50:]), "seconds": round(time.time() - started, 1)}
    (Path(args.out_model) / "packed_pretrain.json").write_text(json.dumps(stats, indent=1))
    print(stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())

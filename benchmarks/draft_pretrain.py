"""Language modelling on correct worked solutions with a draft in view: arithmetic that a visible slip cannot sway.

    .venv/bin/python benchmarks/draft_pretrain.py --model .cache/models/<pretrained> \
        --dataset .cache/datasets/<pairs> --out-model runs/<name> [--steps 400] [--lr 1e-3]

`context_likelihood.py` found that the pretrained model's preference for the correct result of a disputed line
(74% on its own) falls to chance as soon as the slipped version is in view (a selection prompt): in view, it copies.
This continues the pretraining on texts

    Problem:\\n{problem}\\n\\nDraft:\\n{another solution of the same problem}\\n\\nSolution:\\n{a correct solution}\\n

with the loss on the solution only (the draft is context, never a target). Two solutions are drawn per problem at
error rate 0.5 (`procedural.make_candidates`); problems with no correct one are skipped, the target is a correct
one and the draft the other, so the draft is slipped in 2/3 of texts and correct in 1/3: copying it is right a
third of the time, computing always. Like `model.pretrain`, it never sees an index or a verdict, and the targets are
correct worked solutions; it does see slipped text beside correct text, which is what the selector will see. The
held-out problems of `--dataset` are excluded (by expression, `procedural.problem_key`).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

DRAFT_HEAD = "Draft:\n"


def draft_texts(num: int, seed: int, exclude: frozenset) -> list:
    """[(context, target)]: `num` problems (fewer after exclusion or without a correct candidate), each with a
    draft (correct or slipped) in the context and a correct solution as the target."""
    from driver.data import procedural
    from driver.models.pretrain import worked_solution_head

    spec = procedural.ProceduralSpec(error_rate=0.5)
    rows, out = procedural.generate(num, 2, seed, spec), []
    excluded = {procedural.problem_key(p) for p in exclude}
    for row in rows:
        if procedural.problem_key(row["problem"]) in excluded:
            continue
        correct = [c for c in row["candidates"] if c.endswith(f"Answer: {row['answer']}")]
        if not correct:
            continue
        target = correct[0]
        draft = row["candidates"][1] if row["candidates"][0] is target else row["candidates"][0]
        head = worked_solution_head(row["problem"]).replace("Solution:\n", "")
        out.append((f"{head}{DRAFT_HEAD}{draft}\n\nSolution:\n", target + "\n"))
    return out


def batch(tokenizer, pairs: list):
    """Right-padded (ids, attention mask, loss weights) of [(context, target)] + EOS; the weights cover the target
    and EOS (`route_probe.batch_tensors`). Shapes: (len(pairs), longest)."""
    from route_probe import batch_tensors

    examples = []
    for context, target in pairs:
        head = tokenizer(context, add_special_tokens=False)["input_ids"]
        tail = tokenizer(target, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        examples.append((head, tail, [1] * len(tail)))
    return batch_tensors(examples, tokenizer.pad_token_id)


def main(argv=None) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from driver.data.dataset import load_dataset
    from driver.models.pretrain import lm_loss
    from driver.models.warmstart import clipped_step

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--dataset", required=True, help="its held-out problems are excluded")
    ap.add_argument("--out-model", required=True)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=778, help="corpus seed (model.pretrain's default is 777)")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(2)
    heldout = frozenset(t.problem for t in load_dataset(args.dataset).heldout)
    texts = draft_texts(int(args.steps * args.batch * 1.3), args.seed, heldout)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    constant = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    started, losses = time.time(), []
    for step in range(min(args.steps, len(texts) // args.batch)):
        ids, attn, loss_mask = batch(tokenizer, texts[step * args.batch:(step + 1) * args.batch])
        loss = lm_loss(model(input_ids=ids, attention_mask=attn).logits.float(), ids, loss_mask)
        losses.append(clipped_step(loss, model, opt, constant))
        if (step + 1) % 50 == 0:
            print(f"step {step + 1} loss {sum(losses[-50:]) / 50:.3f} ({time.time() - started:.0f} s)", flush=True)
    model.save_pretrained(args.out_model)
    tokenizer.save_pretrained(args.out_model)
    stats = {"model": args.model, "steps": len(losses), "lr": args.lr, "batch": args.batch, "seed": args.seed,
             "texts": len(texts), "loss_first": losses[0], "loss_last50": sum(losses[-50:]) / len(losses[-50:]),
             "seconds": round(time.time() - started, 1)}
    (Path(args.out_model) / "draft_pretrain.json").write_text(json.dumps(stats, indent=1))
    print(stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Worked-solution pretraining in stages, a model folder saved after each: how many steps does solving take?

    .venv/bin/python benchmarks/staged_pretrain.py --base .cache/models/<tiny base> \
        --exclude-dataset .cache/datasets/<no-cue 2-8 set> --out runs/s21/pt [--stages 3] [--stage-steps 600]

`model.pretrain` trains once and saves once; to read a learning curve of the model's own solving
(`benchmarks/solve_then_match.py`) this continues the same model through `--stages` stages of `--stage-steps`
AdamW steps each (`driver.models.pretrain.train_lm`: `--batch-size` correct worked solutions a step, lr with a
linear warm-up over each stage's first 5%; `--pack-tokens` packs them into long rows), every stage on a fresh corpus (pretraining seed 777 + stage), and saves
`{out}/stage{k}` after stage k with `stage.json` (cumulative steps run: packed, a stage runs as many steps as
its rows fill, up to `--stage-steps`; the last 50 steps' mean loss, seconds so far,
the corpus seeds). Problems of `--exclude-dataset`'s held-out split are left out of every corpus (by expression,
`procedural.problem_key`), so that split stays unseen. Two torch threads.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

FIRST_SEED = 777


def stage_config(stage: int, steps: int, batch_size: int, lr: float, pack_tokens: int = 0):
    """The PretrainConfig of stage `stage` (0-based): its own corpus seed, correct solutions only, one text a
    row or packed into rows of `pack_tokens`."""
    from core.config import PretrainConfig

    return PretrainConfig(steps=steps, batch_size=batch_size, lr=lr, seed=FIRST_SEED + stage,
                          pack_tokens=pack_tokens)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the model folder to start from")
    parser.add_argument("--exclude-dataset", required=True, help="a dataset folder whose held-out problems stay unseen")
    parser.add_argument("--out", required=True, help="stage folders are written under it")
    parser.add_argument("--stages", type=int, default=3)
    parser.add_argument("--stage-steps", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--pack-tokens", type=int, default=0,
                        help="pack the texts into rows of this many tokens (model.pretrain.pack_tokens): a selector "
                             "solves after its prompt, at positions one-text rows never train")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from driver.data.dataset import load_dataset
    from driver.models.pretrain import solution_texts, train_lm
    from driver.models.warmstart import save_model_folder, torch_threads

    exclude = frozenset(t.problem for t in load_dataset(args.exclude_dataset).heldout)
    tokenizer = AutoTokenizer.from_pretrained(args.base)
    with torch_threads(2):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32)
        start, steps_run = time.time(), 0
        for stage in range(args.stages):
            cfg = stage_config(stage, args.stage_steps, args.batch_size, args.lr, args.pack_tokens)
            losses = train_lm(model, tokenizer, solution_texts(cfg, exclude), cfg, seed=stage)["solutions"]["solution"]
            tail, steps_run = losses[-50:], steps_run + len(losses)
            record = {"steps": steps_run, "loss_last50": sum(tail) / len(tail),
                      "seconds": time.time() - start, "seeds": [FIRST_SEED + s for s in range(stage + 1)],
                      "base": args.base, "lr": args.lr, "batch_size": args.batch_size,
                      "pack_tokens": args.pack_tokens}
            save_model_folder(model, tokenizer, args.base, Path(args.out) / f"stage{stage + 1}",
                              {"stage.json": record})
            print(f"stage {stage + 1}: {record['steps']} steps, loss {record['loss_last50']:.3f}, "
                  f"{record['seconds']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

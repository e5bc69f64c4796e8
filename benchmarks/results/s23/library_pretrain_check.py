"""Session 23: the library's two-stage pretraining (driver/models/pretrain.py, as `prepare` runs it) from the wired
base, read with solve_point_probe's evaluation on the no-cue set (the probe's chain, through the library's code path).

    .venv/bin/python benchmarks/results/s23/library_pretrain_check.py --base runs/s22/wired2 \
        --dataset .cache/datasets/procedural_math-3583d4193f4a --out runs/s23/lib [--seed 0]
"""
import argparse
import dataclasses
import json
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="a wired base (benchmarks/induction_wiring.py)")
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=750)
    ap.add_argument("--context-steps", type=int, default=450)
    ap.add_argument("--problems", type=int, default=100)
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from core.config import PretrainConfig
    from driver.data.dataset import load_dataset
    from driver.models.pretrain import pretrain
    from solve_point_probe import beside, evaluate, reading_summary

    out = Path(args.out)
    base = out / "base"
    if not base.exists():  # the wired base, with the record that makes every torch stage freeze its circuit
        shutil.copytree(args.base, base)
        info = json.loads((base / "genselect_model.json").read_text())
        (base / "genselect_model.json").write_text(json.dumps({**info, "induction_circuit": {"context": 3}}))
    data = load_dataset(args.dataset)
    train = [dataclasses.replace(t, prompt=beside(t.prompt)) for t in data.train]
    cfg = PretrainConfig(steps=args.steps, batch_size=32, lr=3e-3, pointer_share=0.15,
                         context_steps=args.context_steps, context_batch=4, context_lr=1e-3)
    t0 = time.time()
    folder, stats = pretrain(base, cfg, frozenset(t.problem for t in data.heldout), out / "pretrained",
                             seed=args.seed, train_tasks=train)
    seconds = time.time() - t0
    torch.set_num_threads(2)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    reading = evaluate(model, AutoTokenizer.from_pretrained(folder), data, args.problems, 0)
    record = {"args": vars(args), "pretrain_seconds": round(seconds, 1), "stats": stats, "reading": reading}
    (out / "check.json").write_text(json.dumps(record, indent=1))
    print(f"pretrain {seconds:.0f} s; {reading_summary(reading)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

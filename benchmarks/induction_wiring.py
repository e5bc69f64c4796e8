"""Build the tiny Qwen3 with an induction circuit written into its initial weights, instead of waiting for one to form.

    .venv/bin/python benchmarks/induction_wiring.py --model .cache/models/<tiny> --save runs/<name> [--seed 0]

Session 20 measured that a content-keyed induction head forms in the default's 3.4M-parameter model only after
~2,300 steps of synthetic repeats (~8.5 min of this machine), and that every no-cue pointer needs one; this script
writes one by hand instead (no data read) and reads how well the untrained result copies repeated random tokens.
The circuit itself lives in `core/induction.py` (`model.tiny.induction_circuit` builds it into the default's
model); this script rewires an existing tiny model folder and reads its copy accuracy.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from core.induction import (  # noqa: E402,F401  (re-exported for the probes)
    circuit_masks, freeze_circuit, offset_query_key, rotary_angles, wire_induction)


def main(argv=None) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from benchmarks.induction_probe import repeated_rows, repeat_loss_and_accuracy
    from driver.models.warmstart import save_model_folder

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the tiny base model folder to rewire")
    ap.add_argument("--save", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--context", type=int, default=3, help="tokens of context the induction head matches (1-3)")
    ap.add_argument("--fast-gain", type=float, default=4.0)
    ap.add_argument("--slow-gain", type=float, default=2.0)
    ap.add_argument("--copy-gain", type=float, default=6.0)
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    wire_induction(model, args.seed, args.context, args.fast_gain, args.slow_gain, args.copy_gain).eval()
    low, high = len(tokenizer.all_special_ids) + 1, model.config.vocab_size
    gen = torch.Generator().manual_seed(1)
    reading = {}
    with torch.no_grad():
        for n in (16, 32, 64, 128):
            reading[n] = round(repeat_loss_and_accuracy(model, repeated_rows(gen, 16, n, low, high), n)[1], 4)
        for alphabet in (8, 30):   # one token no longer says where the copy is: only a context of several does
            rows = repeated_rows(gen, 16, 64, low, low + alphabet)
            reading[f"64, alphabet {alphabet}"] = round(repeat_loss_and_accuracy(model, rows, 64)[1], 4)
    print(json.dumps({"copy_accuracy_by_length": reading}))
    save_model_folder(model, tokenizer, args.model, args.save, {"induction_wiring.json": {"args": vars(args),
                                                                                          "copy_accuracy": reading}})
    return 0


if __name__ == "__main__":
    sys.exit(main())

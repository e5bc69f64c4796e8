"""Record the learner batches of a real training run, for `benchmarks/learner_step.py --batches`.

Runs the main job (`driver.train`, any config and overrides) unchanged, and keeps what stage 3b hands to stage 4 each
step: the step's TrainSequences before `merge_identical` (driver/step.py `shard`), i.e. exactly what the learner
would train on without the merge. Writes one pickle: {"config", "overrides", "model_dir" (the warm-started model the
run began from), "batches": [[TrainSequence, ...] per step]}.

    python benchmarks/record_batches.py --out runs/batches/default.pkl -- default run_dir=runs/batches/default
"""
from __future__ import annotations

import argparse
import json
import pickle
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    train_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="pickle to write")
    args = p.parse_args(own)

    import driver.step
    from driver.train import main as train_main

    recorded = []
    real_shard = driver.step.shard

    def recording_shard(sequences, num_ranks):
        recorded.append(list(sequences.sequences))
        return real_shard(sequences, num_ranks)

    driver.step.shard = recording_shard  # train_loop imports it from driver.step at each call
    try:
        rc = train_main(train_args)
    finally:
        driver.step.shard = real_shard
    if rc != 0:
        print(f"the run failed (exit {rc}); nothing written", file=sys.stderr)
        return rc
    config = train_args[0] if train_args and "=" not in train_args[0] else "default"
    overrides = [a for a in train_args if "=" in a]
    from core.config import load_config

    run_dir = Path(load_config(config, overrides).run_dir)
    start_model = json.loads((run_dir / "summary.json").read_text())["start_model"]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    with open(tmp, "wb") as f:
        pickle.dump({"config": config, "overrides": overrides, "model_dir": start_model, "batches": recorded}, f)
    tmp.replace(out)
    print(f"recorded {len(recorded)} batches ({sum(map(len, recorded))} sequences) -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

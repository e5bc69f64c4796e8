"""python -m driver.synth [CONFIG] [key=value ...] [--with-model]: build (or reuse) the selection dataset.

Reads the config like `driver.train` (`driver.config.load_config`; only `data` and `model` are used),
prepares the versioned dataset (`driver.prepare.prepare`) and prints its statistics from the manifest. With
`--with-model` it also resolves the model and runs the warm-start, and prints its held-out results.
"""
from __future__ import annotations

import argparse
import os
import sys


def _row(label: str, train, heldout="") -> str:
    return f"  {label:<34} {str(train):>14} {str(heldout):>14}"


def _pct(x) -> str:
    return f"{100 * x:.1f}%"


def format_manifest(manifest: dict) -> str:
    """The dataset statistics as a readable table."""
    c, tr, he = manifest["counts"], manifest["train"], manifest["heldout"]
    lines = [f"dataset {manifest['name']}-{manifest['hash']}  (source={manifest['config']['source']}, "
             f"seed={manifest['seed']}, schema v{manifest['schema_version']}, created {manifest['created']})",
             "", "  filter stage                               count"]
    for key in ("problems_read", "bad_rows", "candidates_labeled", "candidates_too_long", "problems_no_correct",
                "problems_too_many_correct", "problems_too_few_candidates", "problems_kept", "prompts_built",
                "prompts_too_long_chars", "prompts_over_token_budget", "prompts_kept"):
        lines.append(f"  {key:<34} {c.get(key, 0):>10}")
    lab = manifest.get("labeling", {})
    if lab.get("errors"):
        lines.append(f"  {'verifier errors (timeouts)':<34} {lab['errors']:>7} ({lab.get('timeouts', 0)})")
    lines += ["", _row("split", "train", "held-out"),
              _row("problems", tr["problems"], he["problems"]),
              _row("prompts", tr["prompts"], he["prompts"]),
              _row("mean candidates / prompt", f"{tr['mean_candidates']:.2f}", f"{he['mean_candidates']:.2f}"),
              _row("fraction correct (= random@N)", _pct(tr["fraction_correct"]), _pct(he["fraction_correct"])),
              _row("majority@N", _pct(tr["majority_at_n"]), _pct(he["majority_at_n"])),
              _row("random@N (per prompt)", _pct(tr["random_at_n"]), _pct(he["random_at_n"]))]
    hist = sorted(set(tr["candidates_histogram"]) | set(he["candidates_histogram"]), key=int)
    lines += ["", "  candidates per prompt: " + "  ".join(
        f"{k}:{tr['candidates_histogram'].get(k, 0)}/{he['candidates_histogram'].get(k, 0)}" for k in hist)
        + "  (train/held-out)"]
    tok = manifest["prompt_tokens"]
    lines.append(f"  prompt tokens: mean {tok['mean']:.0f}, max {tok['max']} "
                 f"(budget {manifest['config']['max_prompt_tokens']}, tokenizer {manifest['tokenizer']['key']})")
    if manifest.get("bad_rows", {}).get("examples"):
        lines += ["", "  bad rows (first ones):"] + [f"    {e}" for e in manifest["bad_rows"]["examples"][:10]]
    return "\n".join(lines)


def format_warm_start(stats: dict) -> str:
    h = stats["heldout"]
    return (f"warm-start ({stats['target']}, {stats['steps']} steps, {stats['dtype']}, {stats['train_seconds']}s "
            f"training): held-out parse rate {_pct(h['parse_rate'])}, accuracy {_pct(h['accuracy'])} "
            f"(majority@N {_pct(h['majority_at_n'])}, random@N {_pct(h['random_at_n'])}, {h['prompts']} prompts)")


def main(argv=None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = argparse.ArgumentParser(prog="python -m driver.synth", description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default="default", help="config name in configs/ or a YAML path")
    parser.add_argument("overrides", nargs="*", help="key=value overrides (e.g. data.num_problems=200)")
    parser.add_argument("--with-model", action="store_true", help="also resolve the model and warm-start it")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    args = parser.parse_args(argv)
    if args.config and "=" in args.config:  # only overrides were given
        args.overrides.insert(0, args.config)
        args.config = "default"
    from driver.config import ConfigError, load_config
    from driver.prepare import prepare

    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    prepared = prepare(cfg.data, cfg.model, with_model=args.with_model, progress=not args.quiet)
    print(format_manifest(prepared.manifest))
    print(f"\ndataset folder: {prepared.dataset_dir}\nmodel folder:   {prepared.model_dir}")
    if prepared.warm_start_stats:
        print(format_warm_start(prepared.warm_start_stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())

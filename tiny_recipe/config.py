"""The embedded tiny recipe's section of the config (`tiny:`): the tiny model built locally, its seed, its label-free
pretraining and warm-start, the prompt layout and data choices its response forms read, and the reward and training
terms only the recipe uses (docs/models.md). The system's schema (core/config_schema.py, core/config_model.py) names
this section only by dotted path (core/recipe_sections.py), which the config loader resolves: typed validation, the
rules of config_rules.py and `--help` then cover these keys as they cover the system's.

`MOVED_KEYS` maps where each of these keys was before it moved here to where it is now: a config that still sets an
old path is refused with a one-line error naming the new one, and a run's config written before is read with them
moved (core/recipe_sections.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from core.config_model import _f


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
                                        "followed the last three tokens' earlier occurrence; "
                                        "tiny_recipe/induction.py) and keep it frozen in every training stage "
                                        "(pretraining, warm-start, learner). Needs the default shape (hidden 256, 4 "
                                        "heads, 2 KV heads).")
    response: str = _f("index", "'index': the response is the index alone, after the prompt's `Judgment: ` "
                                "(core/chat.py); 'solve_point': the problem is restated after the prompt and the "
                                "model writes a worked solution ending in `Answer: X #k`, k a candidate stating X "
                                "(needs tiny.answer_labels; tiny_recipe.chat.SOLVE_POINT_TEMPLATE); 'pick_point': "
                                "the model writes `Pick: #g` after the prompt, its own worked solution with that "
                                "line in its context, then ` #k` (tiny_recipe.chat.PICK_POINT_TEMPLATE); both "
                                "indices are sampled, the solution between them written greedily "
                                "(tiny_recipe/pick_point.py; needs tiny.answer_labels and "
                                "tiny.warm_start.target=pick_point).")


@dataclass
class WarmStartConfig:
    """Short supervised warm-start so RL starts from a model that knows the output format."""
    enabled: bool = _f(True, "Run the warm-start when the model is built (cached afterwards).")
    steps: int = _f(300, "Optimizer steps of supervised training.")
    batch_size: int = _f(16, "Sequences per step.")
    lr: float = _f(1e-3, "AdamW learning rate.")
    target: str = _f("format", "'format': the response names a uniformly random candidate (teaches the "
                               "format only); 'oracle': names a correct candidate (a stronger start); 'pointer' "
                               "(tiny.model.response=solve_point): after the model's own greedy solution, ` #k` with "
                               "the index towards uniform (the format only); 'pick_point' "
                               "(tiny.model.response=pick_point): the pick towards uniform and, after the model's "
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
                                   "selection prompt in the beside layout (needs tiny.answer_labels), then "
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
class TinyRecipeConfig:
    """The embedded tiny recipe (tiny_recipe/; docs/models.md): every key here is read by the recipe alone, through
    the small hooks the driver gives it (driver/models/registry.py); `--help` lists them after the system's keys."""
    model: TinyModelConfig = _f(TinyModelConfig(), "Tiny model shape (model.name=tiny).")
    seed: int = _f(0, "Seed for the tiny model's initialisation, its pretraining and its warm-start.")
    pretrain: PretrainConfig = _f(PretrainConfig(), "Pretraining on worked solutions (tiny model only).")
    warm_start: WarmStartConfig = _f(WarmStartConfig(), "Warm-start settings (tiny model only).")
    train_no_cue_share: float = _f(0.0, "Share of the training problems whose candidates lose their hedging "
                                        "sentences (the held-out set keeps them): prompts only a reading of the "
                                        "solutions decides, so the selector cannot lean on the cue alone.")
    solution_end_line: bool = _f(False, "End each candidate's block with `End of solution {i}.`: the index "
                                        "again beside the block's final answer (the embedded default: a tiny "
                                        "model finds a block's label there; data.md). Recorded in the export.")
    line_labels: bool = _f(False, "Prefix every line of candidate i with `i| `: each line's check sits beside its "
                                  "candidate's label (data.md). Recorded in the export for serving.")
    answer_labels: bool = _f(False, "Write each candidate's index beside its final answer: `Answer: 24 #3` in "
                                    "candidate 3 (the `beside` layout): a model that writes `Answer: 24 #` finds "
                                    "the index of a candidate stating 24 by copying (data.md). Recorded in the export.")
    sample_index_only: bool = _f(False, "For a model that writes a worked solution ending `Answer: X #k` "
                                        "(tiny.model.response=solve_point): the solution is written greedily, up "
                                        "to its `#`, and only the index after it is sampled (G times, among "
                                        "0..N-1, at the call's temperature); the learner trains that one token, "
                                        "the solution being part of its prompt. RL on the pointer with the "
                                        "solution held fixed (docs/models.md).")
    pick_reward: float = _f(0.0, "Pick-then-point responses (tiny.model.response=pick_point): weight w of the pick's "
                                 "own correctness in the reward, (1 - w) * [named candidate correct] + w * [picked "
                                 "candidate correct]; parse failures still score 0. 0: the selection reward alone.")
    anchor_corpus_rows: int = _f(0, "Per step, that many worked solutions of fresh procedural problems (correct: "
                                    "the pretraining's text, never a held-out problem) added after the step's "
                                    "prompts as anchor-only sequences, which algorithm.solution_anchor trains by "
                                    "likelihood: the solver taught on during RL, as PPO-ptx mixes pretraining "
                                    "data (tiny_recipe/anchor_rows.py). Needs tiny.model.response=pick_point. 0 = off.")


#: old dotted path -> new one, for every key that moved into `tiny:` (a prefix moves the keys under it)
MOVED_KEYS = {
    "model.tiny": "tiny.model",
    "model.seed": "tiny.seed",
    "model.pretrain": "tiny.pretrain",
    "model.warm_start": "tiny.warm_start",
    "data.train_no_cue_share": "tiny.train_no_cue_share",
    "data.answer_labels": "tiny.answer_labels",
    "data.line_labels": "tiny.line_labels",
    "data.solution_end_line": "tiny.solution_end_line",
    "rollout.sample_index_only": "tiny.sample_index_only",
    "verifier.pick_reward": "tiny.pick_reward",
    "algorithm.anchor_corpus_rows": "tiny.anchor_corpus_rows",
}


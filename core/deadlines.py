"""Deadlines of generation and weight sync, derived from the generation limits (pure, stdlib only).

A fixed deadline (the old 600 s per generate call, 300 s per sync) is either far too long for the CPU default or
too short at paper scale: a 16,384-token response at a few tokens per second outlasts it, and a sync must first
*drain* (wait for every admitted request to finish) before it can load weights. So both are computed from the
limits the config already states, and a slowest acceptable decode rate:

    wave_s       = prompt_tokens / (PREFILL_SPEEDUP * rate) + response_tokens / rate
    waves        = ceil(sequences / max_num_seqs)              # the engine batches at most max_num_seqs at once
    generate_s   = SLACK_S + waves * wave_s                    # one generate call of `sequences` sequences
    sync_s       = drain_s + weight_sync.transfer_timeout_s    # one whole weight sync
    drain_s      = generate_s for the sequences in flight on one engine at a sync:
                   ceil(max(1, max_staleness) * prompts_per_step / rollout.num_workers) * samples_per_prompt
                   (`rollout.sync_mode: keep`: SLACK_S, since the requests in flight are frozen, not waited for)

`rate` is `rollout.min_decode_tokens_per_s`: the slowest per-sequence decode rate still considered healthy with
the engine's batch full (conservative default 4 tokens/s; a GPU engine decoding Qwen3-1.7B with 256 sequences
does several times that). Prefill handles a whole prompt in one forward pass; its tokens are counted at
PREFILL_SPEEDUP times the decode rate. `prompt_tokens` is the prompt budget (`data.max_prompt_tokens`) where only
the budget is known (the driver), the longest actual prompt where the prompts are known (the rollout actor).

An explicit deadline still wins: `rollout.request_timeout_s > 0` and `weight_sync.timeout_s > 0` are used as
they are; 0 (the default) means derived.
"""
from __future__ import annotations

import math

PREFILL_SPEEDUP = 10.0   # a prompt token costs a tenth of a decoded token (one forward pass for the whole prompt)
SLACK_S = 30.0           # engine warm-up, scheduling, detokenisation, Ray round trips


def generation_seconds(prompt_tokens: int, response_tokens: int, sequences: int, max_num_seqs: int,
                       min_decode_tokens_per_s: float) -> float:
    """Worst acceptable time for `sequences` sequences (prompt + response) on one engine, without slack."""
    if min_decode_tokens_per_s <= 0:
        raise ValueError(f"min_decode_tokens_per_s must be > 0, got {min_decode_tokens_per_s}")
    rate = float(min_decode_tokens_per_s)
    wave_s = max(0, prompt_tokens) / (PREFILL_SPEEDUP * rate) + max(0, response_tokens) / rate
    waves = max(1, math.ceil(max(1, sequences) / max(1, max_num_seqs)))
    return waves * wave_s


def generate_deadline_s(rollout_cfg, prompt_tokens: int, sequences: int, response_tokens: int = 0) -> float:
    """Deadline of one generate call of `sequences` sequences (prompts x n): `rollout.request_timeout_s` when set
    (> 0), else SLACK_S + generation_seconds(...). `response_tokens` defaults to rollout.max_response_tokens."""
    if rollout_cfg.request_timeout_s > 0:
        return float(rollout_cfg.request_timeout_s)
    return SLACK_S + generation_seconds(prompt_tokens, response_tokens or rollout_cfg.max_response_tokens,
                                        sequences, rollout_cfg.max_num_seqs, rollout_cfg.min_decode_tokens_per_s)


def drain_sequences(cfg) -> int:
    """Sequences in flight on one engine when a sync starts: the batches kept in flight (max_staleness of them,
    at least one) split over the rollout workers, G samples each."""
    per_worker = math.ceil(max(1, cfg.max_staleness) * cfg.prompts_per_step / max(1, cfg.rollout.num_workers))
    return per_worker * cfg.rollout.samples_per_prompt


def drain_deadline_s(cfg) -> float:
    """Longest a sync may wait for in-flight generation to finish (cfg: TrainConfig); with
    `rollout.sync_mode: keep` only for the engine to freeze it (one engine step): SLACK_S."""
    if cfg.rollout.sync_mode == "keep":
        return SLACK_S
    return generate_deadline_s(cfg.rollout, cfg.data.max_prompt_tokens, drain_sequences(cfg))


def sync_deadline_s(cfg) -> float:
    """Deadline of one whole weight sync (cfg: TrainConfig): `weight_sync.timeout_s` when set (> 0), else the
    drain deadline plus `weight_sync.transfer_timeout_s` (moving the weights and loading them)."""
    if cfg.weight_sync.timeout_s > 0:
        return float(cfg.weight_sync.timeout_s)
    return drain_deadline_s(cfg) + float(cfg.weight_sync.transfer_timeout_s)


def collect_deadline_s(cfg, prompts: int) -> float:
    """The driver's deadline for one generate-and-score call of `prompts` prompts (cfg: TrainConfig): the
    generate deadline at the prompt budget, plus every sample verified one after another per verifier process
    at `verifier.timeout_s`. Always later than the rollout actor's own deadline for the call, which therefore
    fires first and aborts the call's requests itself."""
    sequences = prompts * cfg.rollout.samples_per_prompt
    verify_s = math.ceil(sequences / max(1, cfg.verifier.processes_per_worker)) * cfg.verifier.timeout_s
    return generate_deadline_s(cfg.rollout, cfg.data.max_prompt_tokens, sequences) + verify_s

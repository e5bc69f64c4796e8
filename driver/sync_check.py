"""After a weight sync, do the engines serve the weights the learner trained? (`weight_sync.check_every`)

One response the step trained is scored twice at temperature 1: by every rollout engine (vLLM's prompt log-probs of
prompt + response, `RolloutWorker.compute_logprobs`) and by the learner (`Learner.compute_logprobs`, the same forward
pass the loss uses). Equal weights give equal log-probs up to the two implementations' numerics (fp32 on CPU: ~1e-6 on
the tiny model in tests/actors/test_weight_sync.py, 5e-5 on SmolLM2-135M in tests/test_e2e_smollm2.py); an engine
that missed the sync, loaded a tensor under another name or kept a stale prefix cache differs by the step's change or
more. The largest difference is recorded as `sync/logprob_max_abs_diff` each time it is checked; above
`weight_sync.check_tolerance` the run stops with a RunFailed naming the engine.
"""
from __future__ import annotations

from typing import Optional, Sequence


def checked_sequence(sequences: Sequence) -> Optional[object]:
    """The first sequence with response tokens scored over the whole vocabulary (a constrained index's log-probs
    are normalised over its allowed tokens, which an engine's prompt log-probs are not): a whole unconstrained
    sequence, else the unconstrained start of one constrained only later (a forced judgment's reasoning and prefix,
    `allowed_ids_by_token`); None if there is none."""
    for seq in sequences:
        if seq.response_token_ids and seq.allowed_token_ids is None and seq.allowed_ids_by_token is None:
            return seq
    for seq in sequences:
        free = next((i for i, a in enumerate(seq.allowed_ids_by_token or ()) if a is not None), 0)
        if seq.allowed_token_ids is None and free > 0:
            return _start_of(seq, free)
    return None


def _start_of(seq, length: int):
    """`seq` (a TrainSequence) cut to its first `length` response tokens, unconstrained."""
    import dataclasses

    def cut(values):
        return None if values is None else list(values[:length])

    return dataclasses.replace(seq, response_token_ids=cut(seq.response_token_ids),
                               behaviour_logprobs=cut(seq.behaviour_logprobs), loss_mask=cut(seq.loss_mask),
                               anchor_mask=cut(seq.anchor_mask), allowed_ids_by_token=None)


def max_abs_diff(a: Sequence[float], b: Sequence[float]) -> float:
    if len(a) != len(b):
        raise ValueError(f"log-prob lists of different lengths ({len(a)} and {len(b)})")
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)


def agreement(learner_lps: Sequence[float], engine_lps: Sequence[Sequence[float]], tolerance: float) -> tuple:
    """(metrics, error): the largest difference between the learner's log-probs and each engine's, and, when one
    exceeds `tolerance`, a message naming the engine (None otherwise)."""
    diffs = [max_abs_diff(learner_lps, lps) for lps in engine_lps]
    worst = max(range(len(diffs)), key=diffs.__getitem__) if diffs else None
    metrics = {"sync/logprob_max_abs_diff": diffs[worst] if diffs else 0.0, "sync/logprob_tokens": len(learner_lps)}
    if worst is not None and diffs[worst] > tolerance:
        return metrics, (f"rollout engine {worst} does not serve the learner's weights after the sync: its log-probs "
                         f"of a trained response differ by up to {diffs[worst]:.3g} (weight_sync.check_tolerance="
                         f"{tolerance:g}, over {len(learner_lps)} tokens)")
    return metrics, None

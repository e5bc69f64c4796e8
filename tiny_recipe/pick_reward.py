"""The pick reward of a pick-then-point response (`tiny.pick_reward`; pick_point.py): its pick `Pick: #g`, read from
the response's start, is credited apart from the final index, by the same verifier (the form's `credit`,
actors/rollout/response_forms.py). Stdlib only: the verifier pool reads it."""
from __future__ import annotations

import re
from typing import Optional

# the pick of a pick-then-point response: its first line `Pick: #g` (core.chat.PICK_MARK + the index)
PICK_RE = re.compile(r"\APick: #(\d+)")


def parse_pick(response: str, num_candidates: int) -> Optional[int]:
    """The pick g of a pick-then-point response (`Pick: #g` at its very start), or None when it has none or g is
    not in 0..num_candidates-1."""
    match = PICK_RE.match(response)
    if match is None or match.group(1) != str(int(match.group(1))):
        return None
    index = int(match.group(1))
    return index if index < num_candidates else None


def blend_pick_reward(final_reward: float, pick_score: Optional[float], weight: float) -> float:
    """The reward of a pick-then-point response with its pick credited apart: (1 - w) * final + w * pick, where
    `final_reward` is the selection reward of the index named last and `pick_score` the verifier's score of the
    picked candidate (None: no pick, scored 0). The pick is an action whose outcome the same verifier checks, so
    crediting it is a per-decision reward, no new label (the final index alone pays the pick only where the model's
    own answer is unstated; with w = 0.5 and every training problem cued, the default's pick learns the cue: sampled
    on the training pairs 0.50 -> 0.69). w = 0 is the selection reward itself."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"pick reward weight must be in [0, 1], got {weight}")
    return (1.0 - weight) * final_reward + weight * (pick_score or 0.0)

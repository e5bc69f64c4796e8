"""The order in which training prompts are consumed, as a pure, resumable function of (seed, position).

Epoch e visits every training prompt once, in the permutation drawn from `seed + e`. The stream's whole
state is one integer, `position` (prompts drawn so far, across epochs), plus the ids that were drawn but
not yet finished (in flight or buffered) when a checkpoint was taken: a resumed run re-issues those first,
then continues at `position`, so no prompt is replayed or skipped.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class PromptStream:
    """Deterministic infinite stream over `prompt_ids`.

    Attributes:
        prompt_ids: the training prompt ids (order as in the dataset file).
        seed: permutation seed; epoch e uses `random.Random(seed + e)`.
        position: number of prompts drawn from the permutation sequence so far.
        reissue: ids drawn before a checkpoint but never finished; served before new draws.
    """
    prompt_ids: list
    seed: int = 0
    position: int = 0
    reissue: list = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.prompt_ids:
            raise ValueError("the prompt stream needs at least one training prompt")
        self._epoch_cache: dict = {}

    def _order(self, epoch: int) -> list:
        if epoch not in self._epoch_cache:
            order = list(self.prompt_ids)
            random.Random(self.seed + epoch).shuffle(order)
            self._epoch_cache = {epoch: order}
        return self._epoch_cache[epoch]

    def at(self, index: int) -> str:
        """The id at global draw index `index` (epoch = index // len(prompt_ids))."""
        epoch, offset = divmod(index, len(self.prompt_ids))
        return self._order(epoch)[offset]

    def take(self, count: int) -> list:
        """Draw `count` ids: first any re-issued ones, then new ones from the permutation sequence."""
        drawn = self.reissue[:count]
        self.reissue = self.reissue[count:]
        while len(drawn) < count:
            drawn.append(self.at(self.position))
            self.position += 1
        return drawn

    @property
    def epoch(self) -> int:
        return self.position // len(self.prompt_ids)

    def state(self, unfinished: list) -> dict:
        """What a checkpoint stores: the position and the drawn-but-unfinished ids (re-issued on resume)."""
        return {"seed": self.seed, "position": self.position, "reissue": list(self.reissue) + list(unfinished)}

    @classmethod
    def restore(cls, prompt_ids: list, state: dict) -> "PromptStream":
        return cls(prompt_ids, seed=state["seed"], position=state["position"], reissue=list(state["reissue"]))

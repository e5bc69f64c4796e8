"""A curriculum over the number of candidates, driven by the training reward, as a resumable prompt stream.

Why. A tiny selector trained from scratch does not learn to pick among 8 candidates by RL: its sampled
choices never beat random@N often enough for a gradient to form (measured: BENCHMARKS.md, "What did not
work"). Among 2 candidates it does (one correct, one wrong: every group has a reward spread), and what it
learns there carries to 3, then 4, ... when the larger sizes are added one at a time.

How. Stage s admits the training prompts with at most `caps[s]` candidates (caps = start..max, one apart).
After each step the driver reports the *gain* of that step: over the scored groups whose prompt has exactly
`caps[s]` candidates (before dynamic sampling), the mean of (sampled reward - random@N), i.e. how much
better than a uniform choice the policy samples at the newest size. When the mean gain over the last
`window` steps reaches `advance_gain`, the next size is admitted. The last stage admits every prompt, so a
finished curriculum trains on exactly the distribution the held-out set has.

Resumable. Each stage draws from its own `PromptStream` (seeded by `seed + 1000 * stage`, so stage s always
visits its prompts in the same order); the state is the stage, every stage stream's position, the recent
gains, and the drawn-but-unfinished ids, which are re-issued first after a resume (no prompt replayed or
skipped). With one stage this is exactly `PromptStream(prompt_ids, seed)`.

Mirrored (`curriculum.mirror`). Every new draw is followed by its twin, the prompt with its candidates in
reverse order (`core.algo.genselect.mirrored_task`): the stream's positions count the originals, the twins ride
along, and a checkpoint re-issues unfinished twins like any other drawn id.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from core.algo.genselect import MIRROR_SUFFIX
from driver.stream import PromptStream


def stage_caps(start: int, largest: int) -> list:
    """Candidate caps of the stages: start, start+1, ..., largest (one stage when start >= largest)."""
    return list(range(min(start, largest), largest + 1))


def curriculum_caps(cur, largest: int) -> list:
    """The stages' caps for `cur` (core.config.CurriculumConfig) on data whose largest prompt has `largest`
    candidates: one stage of every prompt when the curriculum is off; else start..last, the last being
    `cur.max_candidates` when set (training never admits more; the evaluation is unaffected)."""
    if not cur.enabled:
        return [largest]
    return stage_caps(cur.start_candidates, min(largest, cur.max_candidates or largest))


def mean_gain(groups: list, num_candidates: int) -> float | None:
    """Mean over `groups` whose task has `num_candidates` candidates of (mean reward - random@N);
    None when there is no such group (a generator's tasks have no candidates). random@N is the fraction of
    correct candidates."""
    gains = [sum(r.reward for r in g.rollouts) / len(g.rollouts) - sum(g.task.correct) / len(g.task.correct)
             for g in groups if g.task.num_candidates == num_candidates and g.task.num_candidates and g.rollouts]
    return sum(gains) / len(gains) if gains else None


@dataclass
class CurriculumStream:
    """Prompt ids by stage (see the module docstring). `sizes[id]` is the prompt's number of candidates."""
    prompt_ids: list
    sizes: dict
    caps: list
    advance_gain: float = 0.15
    window: int = 5
    seed: int = 0
    stage: int = 0
    gains: list = field(default_factory=list)
    streams: dict = field(default_factory=dict)
    mirror: bool = False

    def __post_init__(self) -> None:
        if not self.caps:
            raise ValueError("a curriculum needs at least one stage")
        for cap in self.caps:
            if not any(self.sizes[i] <= cap for i in self.prompt_ids):
                raise ValueError(f"no training prompt has at most {cap} candidates: the curriculum's stage "
                                 f"{cap} would be empty (curriculum.start_candidates too small for this data?)")

    @property
    def cap(self) -> int:
        """Most candidates a prompt of the current stage has."""
        return self.caps[self.stage]

    def _stream(self, stage: int) -> PromptStream:
        if stage not in self.streams:
            ids = [i for i in self.prompt_ids if self.sizes[i] <= self.caps[stage]]
            self.streams[stage] = PromptStream(ids, seed=self.seed + 1000 * stage)
        return self.streams[stage]

    def take(self, count: int) -> list:
        """`count` ids of the current stage (re-issued ones first). With `mirror`, each new draw comes with its
        twin right after it (`{id}/mirror`), so `count` rounds up to even: twins stay in one batch."""
        stream = self._stream(self.stage)
        if not self.mirror:
            return stream.take(count)
        drawn = stream.take(min(count, len(stream.reissue)))  # ids already drawn, twins among them
        fresh = stream.take((count - len(drawn) + 1) // 2)
        return drawn + [i for base in fresh for i in (base, base + MIRROR_SUFFIX)]

    def observe(self, gain: float | None) -> bool:
        """Record one step's gain at the current cap; advance (and return True) when the recent mean is high
        enough. Steps without a group at the current cap (gain None) are not counted."""
        if gain is None or self.stage == len(self.caps) - 1:
            return False
        self.gains = (self.gains + [gain])[-self.window:]
        if len(self.gains) == self.window and sum(self.gains) / self.window >= self.advance_gain - 1e-9:
            self.stage += 1
            self.gains = []
            return True
        return False

    def state(self, unfinished: list) -> dict:
        """Checkpoint state; `unfinished` ids go back to the current stage's stream (every later stage
        admits them too)."""
        self._stream(self.stage)
        return {"stage": self.stage, "gains": list(self.gains),
                "streams": {str(s): st.state(unfinished if s == self.stage else [])
                            for s, st in self.streams.items()}}

    @classmethod
    def restore(cls, prompt_ids: list, sizes: dict, caps: list, state: dict, **kwargs) -> "CurriculumStream":
        if "stage" not in state:
            raise ValueError("the checkpoint's prompt stream has no curriculum state (written by an older "
                             "version?); start over with resume=never")
        if state["stage"] >= len(caps):
            raise ValueError(f"the checkpoint is at curriculum stage {state['stage']} but this config has "
                             f"{len(caps)} stages (curriculum settings changed since it was written)")
        out = cls(prompt_ids, sizes, caps, stage=state["stage"], gains=list(state["gains"]), **kwargs)
        for s, st in state["streams"].items():
            out.streams[int(s)] = PromptStream.restore(out._stream(int(s)).prompt_ids, st)
        return out

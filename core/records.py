"""The records that travel between actors: a selection task (`SelectionTask`) or a problem for a generator
(`SolveTask`, `task=generator`), a sampled response
(`Rollout`) and its group of G (`RolloutGroup`), and what the learner trains on (`TrainSequence`).

Small dataclasses instead of dicts with ad-hoc keys, so every field a sample carries between processes is named
in one place. Pure: stdlib only, so every process (driver, actors, tests) can import it cheaply.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional


#: `Rollout.verifier_status` values of a verification that failed (not a verdict about the answer).
VERIFIER_FAILURES = ("timeout", "error")


@dataclass(frozen=True)
class SelectionTask:
    """One GenSelect prompt: a problem and N shuffled candidates, with what is known about each.

    Attributes:
        prompt_id: unique id of this prompt (`{problem_id}/p{k}`); the unit of data-order bookkeeping.
        problem_id: id of the source problem; train/held-out splits are made by problem, never by prompt.
        domain: "math" or "code".
        problem: the problem statement.
        candidates: N candidate solutions as shown in the prompt (index i is `Solution i`).
        candidate_answers: N final answers (math: the answer string; code: the program) used by verifiers
            and by majority voting.
        labels: N scores from synthesis: 1.0/0.0 correctness, or a unit-test pass fraction for code.
        reference: the reference answer (math) or the test program (code).
        entry_point: function under test (code, HumanEval style); "" for math.
        prompt: the rendered GenSelect prompt text (user message, before any chat template).
    """
    prompt_id: str
    problem_id: str
    domain: str
    problem: str
    candidates: tuple
    candidate_answers: tuple
    labels: tuple
    reference: str
    prompt: str
    entry_point: str = ""

    @property
    def num_candidates(self) -> int:
        return len(self.candidates)

    @property
    def correct(self) -> tuple:
        """Per-candidate correctness (label == 1.0)."""
        return tuple(label >= 1.0 for label in self.labels)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, row: dict) -> "SelectionTask":
        """Inverse of to_dict; raises ValueError naming the missing or malformed field."""
        names = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
        missing = sorted(required - set(row))
        if missing:
            raise ValueError(f"selection task row lacks fields {missing}")
        values = {k: (tuple(v) if isinstance(v, list) else v) for k, v in row.items() if k in names}
        n = len(values["candidates"])
        for key in ("candidate_answers", "labels"):
            if len(values[key]) != n:
                raise ValueError(f"field {key!r} has {len(values[key])} entries for {n} candidates")
        return cls(**values)


@dataclass(frozen=True)
class SolveTask:
    """One problem for a *generator* to solve (`task=generator`, driver/generator_run.py): the policy writes a
    solution, the verifier pool checks its final answer (math) or runs its program against the tests (code).

    Attributes:
        prompt_id: unique id of the task (the problem id; the unit of data-order bookkeeping).
        problem_id: id of the source problem (train/held-out splits are made by problem).
        domain: "math" or "code".
        problem: the problem statement (code: the prompt a completion continues, HumanEval style).
        reference: the reference answer (math) or the test program (code).
        entry_point: function under test (code); "" for math.
    """
    prompt_id: str
    problem_id: str
    domain: str
    problem: str
    reference: str
    entry_point: str = ""

    @property
    def num_candidates(self) -> int:
        """A generator's task shows no candidates (the selector's curriculum and metrics skip it)."""
        return 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class Rollout:
    """One sampled selector response to one SelectionTask, and what became of it.

    Token-level fields are lists of length `len(response_token_ids)`; `prompt_token_ids` is shared by the
    G rollouts of one group: the SAME list object (the rollout worker makes one per request), so pickling a
    group, as Ray does between actors, sends the prompt once per group, not G times. Keep it shared.

    `loss_mask`: per response token, 1 = sampled by the policy (trained) or 0 = written otherwise (e.g. a
    greedily written solution between two sampled index tokens: context the learner reads but does not
    train; its behaviour log-prob is given as 0.0). None: every token was sampled and is trained.
    `anchor_mask`: per response token, 1 = written greedily by the model itself (mask 0), which
    `algorithm.solution_anchor` trains towards itself by likelihood (no label read). None: no such token.
    `allowed_ids_by_token`: per response token, the token ids it was sampled among (a list) or None (the whole
    vocabulary): a response whose positions were sampled differently, such as free reasoning followed by a forced
    judgment's constrained index (actors/rollout/forced_judgment.py). None: `allowed_token_ids` holds for every
    position.
    `forced`: the response wrote no judgment of its own and the system appended `Judgment: ` before sampling the
    index (`rollout.response_form.name=forced_judgment`); False for a judgment the model wrote.
    """
    prompt_id: str
    prompt_token_ids: list
    response_token_ids: list
    behaviour_logprobs: list
    response_text: str
    policy_version: int
    finish_reason: str  # "stop" or "length" (truncated at max_response_tokens)
    judgment: Optional[int] = None
    parse_status: str = "unscored"  # see core.algo.genselect.ParseStatus
    reward: float = 0.0
    verifier_status: str = "unscored"  # "ok", "timeout", "error", "parse_failure"
    timings: dict = field(default_factory=dict)
    allowed_token_ids: Optional[list] = None  # constrained decoding: what every position was sampled among
    loss_mask: Optional[list] = None  # per response token: 1 sampled (trained), 0 written otherwise; None: all 1
    anchor_mask: Optional[list] = None  # per response token: 1 = the model's own greedy text (see above)
    allowed_ids_by_token: Optional[list] = None  # per response token: the ids it was sampled among, None = any
    forced: bool = False  # the system appended the judgment prefix (a forced judgment): not the model's own

    @property
    def verifier_failed(self) -> bool:
        """The verification itself failed (timed out or crashed): the reward 0 says nothing about the answer."""
        return self.verifier_status in VERIFIER_FAILURES

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"

    @property
    def response_length(self) -> int:
        return len(self.response_token_ids)


@dataclass
class RolloutGroup:
    """The G rollouts of one prompt, the unit of group advantages and dynamic sampling."""
    task: SelectionTask
    rollouts: list
    policy_version: int
    generate_seconds: float = 0.0
    extras: dict = field(default_factory=dict)

    @property
    def rewards(self) -> list:
        return [r.reward for r in self.rollouts]

    @property
    def verifier_failures(self) -> int:
        """Rollouts whose verification timed out or crashed (see `Rollout.verifier_failed`)."""
        return sum(r.verifier_failed for r in self.rollouts)


@dataclass
class TrainSequence:
    """One sampled response to train on (built by the driver from a scored `Rollout`).

    Attributes:
        prompt_token_ids: prompt tokens (chat template applied), at least one. Sequences whose prompts are
            equal are packed with the prompt computed once.
        response_token_ids: the sampled response tokens, R >= 0 (R == 0 contributes nothing).
        behaviour_logprobs: R log-probs of the response tokens under the policy that sampled them.
        advantage: the sequence's advantage, broadcast to its tokens (DAPO eq. 4 or another estimator).
        policy_version: the learner weight version that generated the response.
        loss_weight: multiplies every token loss of the sequence; 0 masks it out (overlong filtering) and
            its tokens then do not count in `global_num_tokens`.
        allowed_token_ids: the tokens the sampler could choose from at every response position (constrained
            decoding, `rollout.constrain_index`); the learner normalises its log-probs over the same set, so
            they are the behaviour policy's. None: the whole vocabulary. Checked on trained tokens only.
        loss_mask: R values, 1 = a token the policy sampled (trained), 0 = a token written otherwise (read by
            the learner as context, not trained: weight 0, outside `num_loss_tokens`, may lie outside
            `allowed_token_ids`). None: every response token is trained.
        anchor_mask: R values, 1 = a mask-0 token that the learner's label-free anchor (`algorithm.solution_anchor`)
            trains by likelihood over the whole vocabulary: the model's own greedy solution, or a worked solution of
            `tiny.anchor_corpus_rows` (tiny_recipe/anchor_rows.py); `num_anchor_tokens` counts them. None: none.
        allowed_ids_by_token: R entries, per response token the ids it was sampled among (a list) or None (the
            whole vocabulary); for responses whose positions were sampled differently (free reasoning, then a
            forced judgment's constrained index). Set only when `allowed_token_ids` is None.
        copies: how many identical sampled sequences this one stands for (`core.packing.merge_identical`): the
            learner computes it once and counts each of its token terms, `num_loss_tokens` and `num_anchor_tokens`
            `copies` times, which is exactly the sum over the copies.
    """
    prompt_token_ids: list
    response_token_ids: list
    behaviour_logprobs: list
    advantage: float
    policy_version: int
    loss_weight: float = 1.0
    allowed_token_ids: Optional[list] = None
    loss_mask: Optional[list] = None
    anchor_mask: Optional[list] = None
    allowed_ids_by_token: Optional[list] = None
    copies: int = 1

    def __post_init__(self) -> None:
        if len(self.prompt_token_ids) < 1:
            raise ValueError("TrainSequence needs at least one prompt token")
        if not isinstance(self.copies, int) or self.copies < 1:
            raise ValueError(f"copies must be a whole number >= 1, got {self.copies!r}")
        if self.loss_mask is not None:
            if len(self.loss_mask) != len(self.response_token_ids):
                raise ValueError(f"loss_mask has {len(self.loss_mask)} values for {len(self.response_token_ids)} "
                                 f"response tokens")
            if any(m not in (0, 1) for m in self.loss_mask):
                raise ValueError(f"loss_mask values must be 0 or 1, got {self.loss_mask}")
        if self.anchor_mask is not None:
            if len(self.anchor_mask) != len(self.response_token_ids) or any(a not in (0, 1) for a in self.anchor_mask):
                raise ValueError(f"anchor_mask needs one 0 or 1 per response token ({len(self.response_token_ids)}), "
                                 f"got {self.anchor_mask}")
            if any(a and m for a, m in zip(self.anchor_mask, self.token_mask)):
                raise ValueError("anchor_mask marks a token the policy sampled (loss_mask 1): an anchor token is "
                                 "context the RL loss does not train")
        trained = [t for t, m in zip(self.response_token_ids, self.token_mask) if m]
        if self.allowed_ids_by_token is not None:
            self._check_allowed_by_token()
        elif self.allowed_token_ids is not None and not set(trained) <= set(self.allowed_token_ids):
            raise ValueError(f"trained response tokens {trained} outside the allowed set {self.allowed_token_ids}")
        if len(self.behaviour_logprobs) != len(self.response_token_ids):
            raise ValueError(f"{len(self.behaviour_logprobs)} behaviour log-probs for "
                             f"{len(self.response_token_ids)} response tokens")

    def _check_allowed_by_token(self) -> None:
        by_token = self.allowed_ids_by_token
        if self.allowed_token_ids is not None:
            raise ValueError("allowed_ids_by_token and allowed_token_ids are both set: give one")
        if len(by_token) != len(self.response_token_ids):
            raise ValueError(f"allowed_ids_by_token has {len(by_token)} entries for {len(self.response_token_ids)} "
                             f"response tokens")
        for position, (token, mask, allowed) in enumerate(zip(self.response_token_ids, self.token_mask, by_token)):
            if mask and allowed is not None and token not in allowed:
                raise ValueError(f"trained response token {token} at position {position} outside its allowed set "
                                 f"{allowed}")

    def allowed_at(self) -> list:
        """R entries: the ids each response token was sampled among (None: the whole vocabulary)."""
        if self.allowed_ids_by_token is not None:
            return list(self.allowed_ids_by_token)
        return [self.allowed_token_ids] * len(self.response_token_ids)

    @property
    def input_length(self) -> int:
        """Tokens fed to the model unshared: prompt + response minus the last token (it predicts nothing)."""
        return len(self.prompt_token_ids) + len(self.response_token_ids) - 1

    @property
    def token_mask(self) -> list:
        """R values: `loss_mask`, or all 1 when there is none."""
        return [1] * len(self.response_token_ids) if self.loss_mask is None else list(self.loss_mask)

    @property
    def num_anchor_tokens(self) -> int:
        """Response tokens the label-free anchor trains (`anchor_mask` 1), each copy counted."""
        return 0 if self.anchor_mask is None else int(sum(self.anchor_mask)) * self.copies

    @property
    def num_loss_tokens(self) -> int:
        """Response tokens that count in the token-level mean: the mask-1 ones, each copy counted (0 when the
        sequence is masked)."""
        return int(sum(self.token_mask)) * self.copies if self.loss_weight != 0 else 0


def asdict_shallow(obj: Any) -> dict:
    """dataclasses.asdict without deep-copying token lists (cheap for logging)."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}

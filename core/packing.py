"""Padding-free, prefix-sharing packing of training sequences into micro-batches (pure: stdlib + torch).

The learner trains on `TrainSequence`s (core/records.py): a prompt, a sampled response, the behaviour
log-probs the rollout engine reported for it, and the advantage the driver computed.

Packing, in three ideas:

* **Shared prefixes** ("Prefix Grouper", arXiv 2506.05433). The G responses of one GenSelect prompt share
  the prompt, which is ~90% of every sequence (the tiny model on 4 candidates: prompt ~250 tokens, response ~32).
  Sequences with an identical prompt form one *unit* laid out as `[prompt | r_1[:-1] | r_2[:-1] | ... ]`: the
  prompt is computed once and every response segment attends to the prompt and to itself only. Position ids of
  each segment continue from the prompt length, so every token sees exactly the context (and RoPE positions) of
  its own unshared sequence: the log-probs, and therefore the gradients (summed through the shared prompt), are
  those of the separate sequences. The first response token is predicted from the last prompt position, shared
  by the group.
* **One row, no padding.** Units are placed first-fit-decreasing into micro-batches of at most `max_tokens`
  input tokens, back to back in one row (`layout="flat"`, what the learner runs): a `(1, width)` tensor.
* **Attention blocks, not a mask.** Each micro-batch carries a `BlockLayout` (below; computed by
  actors/learner/packed_attention.py): per prompt a causal block, per response segment a block that sees its prompt and
  itself causally. The learner runs one SDPA call per block, so attention costs the sum over blocks of queries x keys
  and no mask grows as width^2. `MicroBatch.dense_attention_mask()` gives the same visibility as a
  `(rows, 1, width, width)` boolean mask (the reference the tests and benchmarks compare with). `layout="rows"` keeps
  the earlier layout for that dense mask: rows as wide as the longest unit, padded tails (id 0, never a target),
  `rows * width <= max_tokens`, so the dense mask costs `rows * width**2` rather than `max_tokens**2`.

* **Identical samples once** (`merge_identical`). Sampled responses of one prompt often coincide token for token (the
  default's pick-then-point response: two indices sampled around a greedy solution, so a group of 8 holds at most
  4 different sequences of a pair): such a set becomes one `TrainSequence` with `copies`, computed once and its
  token terms weighted by `copies` in the loss, the anchor and the counts, which is exactly their sum.

A unit longer than `max_tokens` is split into several units, each repeating the prompt; a single sequence
longer than `max_tokens` gets a micro-batch of its own (over budget, never truncated).
Targets are gathered flat: `target_index` points into the flattened `(rows * width)` hidden states at the
positions whose next-token prediction is a response token; loss tensors are flat `(N,)`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

import torch

PAD_ID = 0


@dataclass
class BlockLayout:
    """The attention blocks of one packed micro-batch of `rows` rows of `width` positions.

    blocks[r]: the blocks of row r in position order, covering [0, width): tuples
    (kind, start, end, prompt_start, prompt_end) with kind "prompt" (causal over [start, end)), "response"
    (keys: the prompt [prompt_start, prompt_end), then [start, end) causally) or "pad" (output 0).
    """
    rows: int
    width: int
    blocks: list = field(default_factory=list)

    def to(self, *args, **kwargs) -> "BlockLayout":  # the layout is plain data: device moves are no-ops
        return self

    def dense(self) -> torch.Tensor:
        """The (rows, 1, width, width) boolean mask with the same visibility (True = attend): the reference."""
        mask = torch.zeros(self.rows, 1, self.width, self.width, dtype=torch.bool)
        for r, blocks in enumerate(self.blocks):
            for kind, s, e, a, b in blocks:
                # padding sees the earlier padding (never read; an all-False row would make SDPA return NaN)
                mask[r, 0, s:e, s:e] = torch.ones(e - s, e - s, dtype=torch.bool).tril()
                if kind == "response":
                    mask[r, 0, s:e, a:b] = True
        return mask

    def scored_pairs(self) -> int:
        """Query-key pairs the blocks compute (upper bound: full rectangles), against rows * width^2 dense."""
        total = 0
        for blocks in self.blocks:
            for kind, s, e, a, b in blocks:
                if kind != "pad":
                    total += (e - s) * ((e - s) + (b - a if kind == "response" else 0))
        return total


def count_loss_tokens(sequences: list) -> int:
    """Sum of `num_loss_tokens`: a rank's share of `global_num_tokens` (sum this over all ranks)."""
    return sum(s.num_loss_tokens for s in sequences)


def count_anchor_tokens(sequences: list) -> int:
    """Sum of `num_anchor_tokens`: a rank's share of the tokens the label-free anchor averages over."""
    return sum(s.num_anchor_tokens for s in sequences)


def merge_identical(sequences: list) -> list:
    """`sequences` with every set of identical ones (same prompt, response, behaviour log-probs, advantage, version,
    weight, allowed ids and masks) replaced by its first member with `copies` summed; order of first appearance.
    Exact: each token term of the learner (DAPO loss, anchor, counts) is weighted by `copies` (module docstring)."""
    merged: dict = {}
    for s in sequences:
        key = (tuple(s.prompt_token_ids), tuple(s.response_token_ids), tuple(s.behaviour_logprobs), s.advantage,
               s.policy_version, s.loss_weight, None if s.allowed_token_ids is None else tuple(s.allowed_token_ids),
               None if s.loss_mask is None else tuple(s.loss_mask),
               None if s.anchor_mask is None else tuple(s.anchor_mask),
               None if s.allowed_ids_by_token is None else
               tuple(None if a is None else tuple(a) for a in s.allowed_ids_by_token))
        first = merged.get(key)
        merged[key] = s if first is None else replace(first, copies=first.copies + s.copies)
    return list(merged.values())


def count_sequences(sequences: list) -> int:
    """Sampled sequences `sequences` stand for (each merged one counts its copies)."""
    return sum(s.copies for s in sequences)


def group_by_prompt(sequences: list) -> list:
    """Indices of sequences grouped by identical prompt, in order of first appearance."""
    groups: dict = {}
    for i, s in enumerate(sequences):
        groups.setdefault(tuple(s.prompt_token_ids), []).append(i)
    return list(groups.values())


def _unit_length(sequences: list, members: list) -> int:
    """Input tokens of a shared-prefix unit: the prompt once plus R_j - 1 tokens per response."""
    return len(sequences[members[0]].prompt_token_ids) + sum(len(sequences[i].response_token_ids) - 1
                                                             for i in members)


def shard_sequences(sequences: list, num_shards: int) -> list:
    """Split sequences over data-parallel ranks, keeping prompt groups together (so their prompt is shared)
    and balancing shared-prefix input tokens (greedy, largest group first). Deterministic.

    Returns `num_shards` lists; order inside a shard follows the input order.
    """
    loads = [0] * num_shards
    owner = {}
    groups = group_by_prompt(sequences)
    for members in sorted(groups, key=lambda m: -_unit_length(sequences, m)):
        k = min(range(num_shards), key=lambda j: (loads[j], j))
        loads[k] += _unit_length(sequences, members)
        owner.update({i: k for i in members})
    return [[s for i, s in enumerate(sequences) if owner[i] == k] for k in range(num_shards)]


@dataclass
class TrainBatch:
    """The sequences of one training step and how they go to the learner ranks.

    `global_num_tokens` (loss tokens of the whole step) is what every rank's `train_step` receives with its
    shard: `[learner.train_step(shard, batch.global_num_tokens, step) for learner, shard in zip(ranks,
    batch.shards(len(ranks)))]`.
    """
    sequences: list

    @property
    def global_num_tokens(self) -> int:
        return count_loss_tokens(self.sequences)

    def shards(self, num_ranks: int) -> list:
        return shard_sequences(self.sequences, num_ranks)


@dataclass
class MicroBatch:
    """One packed forward pass. N = response tokens in the micro-batch.

    input_ids, position_ids: (rows, width) long. attention_mask: the `BlockLayout` of the micro-batch (which
    positions each position attends to, as attention blocks; `dense_attention_mask()` is the same as a
    (rows, 1, width, width) boolean mask, True = attend).
    target_index: (N,) long, index into the flattened (rows * width) positions predicting each target.
    target_ids: (N,) long response tokens. behaviour_logprobs, advantages, loss_weights: (N,) float32;
    a target's loss weight is its sequence's `loss_weight` times its `loss_mask` value (0: not trained).
    spans: per packed sequence, (index into the packed list, start, end) of its slice of the N targets.
    num_real_tokens: input tokens that are not padding.
    allowed_ids: (N, K) long, the token ids each target was sampled among, -1 padded (constrained
        decoding); None when every target was sampled from the whole vocabulary.
    anchor_weights: (N,) float32, 1 at the targets of the label-free anchor (`TrainSequence.anchor_mask`: text RL
        does not train, scored over the whole vocabulary even where `allowed_ids` constrains), else 0.
    copies: (N,) float32, the `copies` of each target's sequence (loss_weights and anchor_weights already carry them:
        a merged sequence's weights are `copies` times its one copy's); None: all 1.
    unconstrained: (N,) bool, in a micro-batch with `allowed_ids`, the targets sampled from the whole vocabulary
        (a sequence without a constraint, or the free reasoning of a forced judgment); their `allowed_ids` row
        holds only the target itself. None: every target is constrained, or nothing is.
    """
    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: BlockLayout
    target_index: torch.Tensor
    target_ids: torch.Tensor
    behaviour_logprobs: torch.Tensor
    advantages: torch.Tensor
    loss_weights: torch.Tensor
    spans: list = field(default_factory=list)
    num_real_tokens: int = 0
    allowed_ids: Optional[torch.Tensor] = None
    anchor_weights: Optional[torch.Tensor] = None
    copies: Optional[torch.Tensor] = None
    unconstrained: Optional[torch.Tensor] = None

    @property
    def free_targets(self) -> Optional[torch.Tensor]:
        """(N,) bool: the constrained micro-batch's targets to score over the whole vocabulary (the anchor's, and the
        `unconstrained` ones); None when nothing is constrained or every target is."""
        if self.allowed_ids is None:
            return None
        free = self.unconstrained
        if self.anchor_weights is not None and bool((self.anchor_weights > 0).any()):
            free = self.anchor_weights > 0 if free is None else free | (self.anchor_weights > 0)
        return free

    @property
    def padded_tokens(self) -> int:
        """Input slots including padding: rows * width."""
        return self.input_ids.numel()

    @property
    def num_loss_tokens(self) -> int:
        """Trained targets, each copy of a merged sequence counted."""
        counted = self.loss_weights != 0
        return int(counted.sum()) if self.copies is None else int(round(float(self.copies[counted].sum())))

    def dense_attention_mask(self) -> torch.Tensor:
        """(rows, 1, width, width) bool, True = attend: the layout as one dense mask (reference; W^2 per row)."""
        return self.attention_mask.dense()


def _units(sequences: list, max_tokens: int, share_prefix: bool) -> list:
    """Lists of sequence indices forming one unit each; a group over budget is split (prompt repeated)."""
    with_response = [i for i, s in enumerate(sequences) if s.response_token_ids]
    groups = group_by_prompt([sequences[i] for i in with_response]) if share_prefix else \
        [[k] for k in range(len(with_response))]
    units = []
    for g in groups:
        members = [with_response[k] for k in g]
        unit = [members[0]]
        for i in members[1:]:
            if _unit_length(sequences, unit + [i]) > max_tokens:
                units.append(unit)
                unit = []
            unit.append(i)
        units.append(unit)
    return units


def _place(lengths: list, max_tokens: int) -> list:
    """First-fit-decreasing of items with `lengths`: micro-batches as lists of rows of item indices."""
    batches = []  # each: {"width": int, "rows": [[idx...]], "free": [int]}
    for i in sorted(range(len(lengths)), key=lambda j: -lengths[j]):
        n, placed = lengths[i], False
        for b in batches:
            for r, free in enumerate(b["free"]):
                if free >= n:
                    b["rows"][r].append(i)
                    b["free"][r] -= n
                    placed = True
                    break
            if not placed and n <= b["width"] and (len(b["rows"]) + 1) * b["width"] <= max_tokens:
                b["rows"].append([i])
                b["free"].append(b["width"] - n)
                placed = True
            if placed:
                break
        if not placed:
            batches.append({"width": n, "rows": [[i]], "free": [0]})
    return [b["rows"] for b in batches]


def _place_flat(lengths: list, max_tokens: int) -> list:
    """First-fit-decreasing of items with `lengths` into micro-batches of one row of at most `max_tokens`."""
    bins, free = [], []
    for i in sorted(range(len(lengths)), key=lambda j: -lengths[j]):
        k = next((b for b, f in enumerate(free) if f >= lengths[i]), None)
        if k is None:
            bins.append([])
            free.append(max_tokens)
            k = len(bins) - 1
        bins[k].append(i)
        free[k] -= lengths[i]
    return [[row] for row in bins]


LAYOUTS = ("flat", "rows")


def pack_sequences(sequences: list, max_tokens: int, share_prefix: bool = True, layout: str = "flat") -> list:
    """Pack `sequences` (TrainSequence) into micro-batches of at most `max_tokens` input tokens each.

    layout "flat" (what the learner runs): each micro-batch is one row, units back to back, no padding; its
    attention cost is the sum over blocks, whatever the row's length. "rows": rows as wide as the longest unit
    (padded tails), the layout for a dense (rows, 1, W, W) mask, whose cost is rows * W^2 (kept as the
    reference the benchmarks compare with).
    Sequences with no response tokens are left out. Deterministic for the same input.
    Returns a list of `MicroBatch`; `spans` index into `sequences`.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    units = _units(sequences, max_tokens, share_prefix)
    lengths = [_unit_length(sequences, u) for u in units]
    place = _place_flat if layout == "flat" else _place
    return [_build(sequences, [[units[k] for k in row] for row in rows]) for rows in place(lengths, max_tokens)]


class _Row:
    """Accumulates one row: token ids, positions, unit ids and segment ids (0 = prompt, j = response j)."""

    def __init__(self):
        self.ids, self.pos, self.blocks = [], [], []

    def add(self, tokens: list, start_pos: int, kind: str, prompt: tuple = (0, 0)) -> None:
        if tokens:
            start = len(self.ids)
            self.ids.extend(tokens)
            self.pos.extend(range(start_pos, start_pos + len(tokens)))
            self.blocks.append((kind, start, len(self.ids)) + tuple(prompt))


def _stack(built: list, key: str) -> torch.Tensor:
    """(rows, width) long tensor of one _Row field."""
    return torch.tensor([getattr(row, key) for row, _ in built], dtype=torch.long)


def _build(sequences: list, rows: list) -> MicroBatch:
    """rows: list of rows, each a list of units (lists of sequence indices)."""
    width = max(sum(_unit_length(sequences, u) for u in row) for row in rows)
    t_index, t_ids, behav, adv, weight, spans, allowed, anchor, copies = [], [], [], [], [], [], [], [], []
    built = []
    for r, row in enumerate(rows):
        acc = _Row()
        for unit in row:
            prompt = list(sequences[unit[0]].prompt_token_ids)
            p, offset = len(prompt), len(acc.ids)
            acc.add(prompt, 0, "prompt")
            for i in unit:
                s = sequences[i]
                seg_start = len(acc.ids)
                acc.add(list(s.response_token_ids[:-1]), p, "response", (offset, offset + p))
                start = len(t_ids)
                t_index.extend(r * width + x for x in [offset + p - 1] + list(range(seg_start, len(acc.ids))))
                t_ids.extend(s.response_token_ids)
                behav.extend(s.behaviour_logprobs)
                adv.extend([float(s.advantage)] * len(s.response_token_ids))
                weight.extend(float(s.loss_weight) * s.copies * m for m in s.token_mask)  # mask 0: read, not trained
                allowed.extend(s.allowed_at())
                anchor.extend(s.copies * a for a in (s.anchor_mask or [0] * len(s.response_token_ids)))
                copies.extend([s.copies] * len(s.response_token_ids))
                spans.append((i, start, len(t_ids)))
        real = len(acc.ids)
        acc.add([PAD_ID] * (width - real), 0, "pad")  # padding tail: seen by nothing
        built.append((acc, real))
    layout = BlockLayout(len(built), width, [row.blocks for row, _ in built])
    f32 = torch.float32
    allowed_ids, unconstrained = _allowed_tensor(allowed, t_ids)
    return MicroBatch(_stack(built, "ids"), _stack(built, "pos"), layout,
                      torch.tensor(t_index, dtype=torch.long), torch.tensor(t_ids, dtype=torch.long),
                      torch.tensor(behav, dtype=f32), torch.tensor(adv, dtype=f32), torch.tensor(weight, dtype=f32),
                      spans, sum(real for _, real in built), allowed_ids,
                      torch.tensor(anchor, dtype=f32), torch.tensor(copies, dtype=f32), unconstrained)


def _allowed_tensor(allowed: list, target_ids: list) -> tuple:
    """((N, K) -1-padded allowed ids per target, (N,) bool unconstrained targets or None); (None, None) when no
    target is constrained. An unconstrained target's row holds only the target itself (finite, and never read:
    `MicroBatch.free_targets` scores it over the whole vocabulary)."""
    constrained = [a is not None for a in allowed]
    if not any(constrained):
        return None, None
    rows = [list(a) if a is not None else [t] for a, t in zip(allowed, target_ids)]
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [-1] * (width - len(r)) for r in rows], dtype=torch.long)
    free = None if all(constrained) else torch.tensor([not c for c in constrained], dtype=torch.bool)
    return ids, free


def dummy_micro_batch() -> MicroBatch:
    """A 2-token micro-batch with zero loss weight.

    Ranks must run the same number of forward/backward passes (ZeRO-3 gathers parameters in the forward,
    ZeRO-2 reduces gradients in the backward); a rank with fewer micro-batches runs these.
    """
    zero = torch.zeros(1, dtype=torch.float32)
    layout = BlockLayout(1, 2, [[("prompt", 0, 2, 0, 0)]])
    return MicroBatch(torch.zeros((1, 2), dtype=torch.long), torch.arange(2).unsqueeze(0), layout,
                      torch.tensor([1]), torch.tensor([0]), zero, zero.clone(), zero.clone(), [])


def split_mini_batches(sequences: list, num: int) -> list:
    """Split a rank's shard into `num` contiguous mini-batches of near-equal sampled sequences (some may be empty).
    Without merged sequences: the first `len % num` get one more. A merged sequence is not cut: its copies go where
    its first copy would."""
    total = count_sequences(sequences)
    size, extra = divmod(total, num)
    bounds = [k * size + min(k, extra) for k in range(1, num)] + [total]  # counted sequences before each cut
    out, current, seen = [[] for _ in range(num)], 0, 0
    for s in sequences:
        while seen >= bounds[current]:
            current += 1
        out[current].append(s)
        seen += s.copies
    return out


def unpack_per_sequence(values: torch.Tensor, micro_batch: MicroBatch, out: list) -> None:
    """Scatter a flat (N,) per-target tensor of `micro_batch` into `out[sequence index]` as float lists."""
    flat = values.detach().float().tolist()
    for i, start, end in micro_batch.spans:
        out[i] = flat[start:end]


def padding_fraction(micro_batches: list) -> float:
    """Share of input slots that are padding (0 = perfect packing)."""
    total = sum(m.padded_tokens for m in micro_batches)
    return 1.0 - sum(m.num_real_tokens for m in micro_batches) / total if total else 0.0

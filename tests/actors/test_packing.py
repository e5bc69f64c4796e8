"""Packing: invariants of the micro-batch layout (hypothesis) and packed == one-by-one forwards (fp32)."""
from __future__ import annotations

import dataclasses
import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from core.packing import (TrainBatch, count_anchor_tokens, count_loss_tokens, count_sequences, dummy_micro_batch,
                          merge_identical, pack_sequences, padding_fraction, shard_sequences, split_mini_batches,
                          unpack_per_sequence)
from core.records import TrainSequence


def make_seq(prompt_len: int, response_len: int, rng: random.Random, weight: float = 1.0,
             vocab: int = 1000) -> TrainSequence:
    return TrainSequence(
        prompt_token_ids=[rng.randrange(2, vocab) for _ in range(prompt_len)],
        response_token_ids=[rng.randrange(2, vocab) for _ in range(response_len)],
        behaviour_logprobs=[-rng.random() * 3 for _ in range(response_len)],
        advantage=rng.uniform(-1, 1), policy_version=0, loss_weight=weight)


def make_groups(spec: list, rng: random.Random, vocab: int = 1000) -> list:
    """spec: (prompt_len, [response lengths]) per group; the group's sequences share the prompt list."""
    out = []
    for prompt_len, responses in spec:
        prompt = [rng.randrange(2, vocab) for _ in range(prompt_len)]
        for r in responses:
            out.append(dataclasses.replace(make_seq(1, r, rng, vocab=vocab), prompt_token_ids=prompt))
    rng.shuffle(out)
    return out


groups = st.lists(st.tuples(st.integers(1, 40), st.lists(st.integers(0, 12), min_size=1, max_size=5)),
                  min_size=1, max_size=10)


@settings(max_examples=60, deadline=None)
@given(spec=groups, budget=st.integers(8, 200), seed=st.integers(0, 10), share=st.booleans(),
       layout=st.sampled_from(["flat", "rows"]))
def test_packing_layout_invariants(spec, budget, seed, share, layout):
    rng = random.Random(seed)
    seqs = make_groups(spec, rng)
    mbs = pack_sequences(seqs, budget, share_prefix=share, layout=layout)
    seen = set()
    for mb in mbs:
        rows, width = mb.input_ids.shape
        assert rows * width <= budget or rows == 1  # over budget only for one over-long unit
        if layout == "flat":
            assert rows == 1 and mb.num_real_tokens == width  # one row, no padding
        dense = mb.dense_attention_mask()  # the block layout as a dense mask: what each position sees
        assert dense.shape == (rows, 1, width, width)
        mask = dense[:, 0].reshape(rows * width, width)
        flat_ids, flat_pos = mb.input_ids.reshape(-1), mb.position_ids.reshape(-1)
        for i, start, end in mb.spans:
            assert i not in seen
            seen.add(i)
            s = seqs[i]
            idx = mb.target_index[start:end]
            assert mb.target_ids[start:end].tolist() == s.response_token_ids
            assert torch.allclose(mb.behaviour_logprobs[start:end], torch.tensor(s.behaviour_logprobs))
            # the input at each target position is the token before the target, at its unshared position
            prev = (s.prompt_token_ids + s.response_token_ids)[len(s.prompt_token_ids) - 1:-1]
            assert flat_ids[idx].tolist() == prev
            assert flat_pos[idx].tolist() == list(range(len(s.prompt_token_ids) - 1, s.input_length))
            # the last target position sees exactly the sequence's own context: prompt + earlier response
            row, col = divmod(int(idx[-1]), width)
            visible = mb.input_ids[row][mask[int(idx[-1])]].tolist()
            assert visible == (s.prompt_token_ids + s.response_token_ids)[:s.input_length]
    assert seen == {i for i, s in enumerate(seqs) if s.response_token_ids}
    assert sum(mb.num_loss_tokens for mb in mbs) == count_loss_tokens(seqs)
    assert 0.0 <= padding_fraction(mbs) < 1.0
    assert layout == "rows" or padding_fraction(mbs) == 0.0


@settings(max_examples=25, deadline=None)
@given(spec=groups, budget=st.integers(8, 120), seed=st.integers(0, 10), share=st.booleans(),
       layout=st.sampled_from(["flat", "rows"]))
def test_block_attention_equals_dense_mask_attention(spec, budget, seed, share, layout):
    """Block attention gives every non-padding position the output (and the q/k/v gradients) of SDPA with the
    dense mask, grouped-query heads included."""
    from actors.learner.packed_attention import block_attention

    rng = random.Random(seed)
    seqs = make_groups(spec, rng)
    gen = torch.Generator().manual_seed(seed)
    for mb in pack_sequences(seqs, budget, share_prefix=share, layout=layout):
        rows, width = mb.input_ids.shape
        q = torch.randn(rows, 4, width, 8, generator=gen, dtype=torch.float64, requires_grad=True)
        k, v = (torch.randn(rows, 2, width, 8, generator=gen, dtype=torch.float64, requires_grad=True)
                for _ in range(2))
        real = torch.tensor([[kind != "pad" for kind, s, e, _, _ in blocks for _ in range(s, e)]
                             for blocks in mb.attention_mask.blocks])  # (rows, width)
        weight = torch.randn(rows, 4, width, 8, generator=gen, dtype=torch.float64) * real[:, None, :, None]
        got = block_attention(q, k, v, mb.attention_mask)
        want = torch.nn.functional.scaled_dot_product_attention(
            q, k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1), attn_mask=mb.dense_attention_mask())
        mask = real[:, None, :, None].expand_as(got)
        assert torch.allclose(got[mask], want[mask], atol=1e-12, rtol=0)
        grads = [torch.autograd.grad((out * weight).sum(), (q, k, v)) for out in (got, want)]
        for a, b in zip(*grads):
            assert torch.allclose(a, b, atol=1e-12, rtol=0)


def test_shared_prefix_packing_is_dense_and_deterministic():
    rng = random.Random(0)
    spec = [(rng.randrange(150, 260), [rng.randrange(10, 40) for _ in range(8)]) for _ in range(8)]
    seqs = make_groups(spec, rng)
    a, b = pack_sequences(seqs, 2048), pack_sequences(seqs, 2048)
    assert [m.spans for m in a] == [m.spans for m in b]
    assert padding_fraction(a) < 0.15
    shared = sum(m.num_real_tokens for m in a)
    unshared = sum(m.num_real_tokens for m in pack_sequences(seqs, 2048, share_prefix=False))
    assert unshared == sum(s.input_length for s in seqs)
    assert shared == sum(p + sum(r - 1 for r in rs) for p, rs in spec)  # each prompt computed once
    assert unshared / shared > 3.5
    assert len(a) <= -(-shared // 2048) + 2  # close to the lower bound on the number of micro-batches


@pytest.mark.parametrize("weights,expected", [([1.0, 1.0, 1.0], 12), ([1.0, 0.0, 0.5], 8), ([0.0] * 3, 0)])
def test_count_loss_tokens_excludes_masked(weights, expected):
    rng = random.Random(1)
    seqs = [make_seq(5, 4, rng, weight=w) for w in weights]
    assert count_loss_tokens(seqs) == expected


def test_split_and_shard_keeps_groups_together():
    rng = random.Random(2)
    seqs = [make_seq(rng.randrange(1, 50), 3, rng) for _ in range(11)]
    minis = split_mini_batches(seqs, 3)
    assert [len(m) for m in minis] == [4, 4, 3] and sum(minis, []) == seqs
    seqs = make_groups([(rng.randrange(5, 50), [3] * rng.randrange(1, 5)) for _ in range(9)], rng)
    shards = shard_sequences(seqs, 2)
    assert sorted(map(id, sum(shards, []))) == sorted(map(id, seqs))
    prompts = [{tuple(s.prompt_token_ids) for s in sh} for sh in shards]
    assert not prompts[0] & prompts[1]
    loads = [sum(m.num_real_tokens for m in pack_sequences(sh, 10**6)) for sh in shards]
    assert abs(loads[0] - loads[1]) <= max(loads) / 2
    batch = TrainBatch(seqs)
    assert batch.shards(2) == shards and batch.global_num_tokens == count_loss_tokens(seqs)


def test_train_sequence_validates():
    with pytest.raises(ValueError):
        TrainSequence([1, 2], [3, 4], [-0.1], 1.0, 0)
    with pytest.raises(ValueError):
        TrainSequence([], [3], [-0.1], 1.0, 0)
    assert dummy_micro_batch().num_loss_tokens == 0


def test_allowed_ids_travel_per_target_and_unconstrained_targets_are_marked_free():
    """Constrained sequences (allowed_token_ids) give the micro-batch an (N, K) -1-padded allowed_ids row per
    target; a response token outside its set is refused; an unconstrained sequence beside constrained ones gets rows
    holding its own targets, marked free (scored over the whole vocabulary)."""
    a = TrainSequence([5, 6, 7], [3, 9], [-0.5, -0.1], 1.0, 0, allowed_token_ids=[3, 4, 9])
    b = TrainSequence([5, 6, 8], [4], [-0.7], -1.0, 0, allowed_token_ids=[3, 4])
    (mb,) = pack_sequences([a, b], 64)
    rows = {tuple(r) for r in mb.allowed_ids.tolist()}
    assert mb.allowed_ids.shape == (3, 3) and rows == {(3, 4, 9), (3, 4, -1)}
    for _, start, end in mb.spans:
        assert all(mb.target_ids[t] in mb.allowed_ids[t] for t in range(start, end))
    assert pack_sequences([dataclasses.replace(a, allowed_token_ids=None)], 64)[0].allowed_ids is None
    with pytest.raises(ValueError, match="outside the allowed set"):
        TrainSequence([5], [8], [-0.1], 1.0, 0, allowed_token_ids=[3, 4])
    (mixed,) = pack_sequences([a, dataclasses.replace(b, allowed_token_ids=None)], 64)
    assert mixed.allowed_ids.tolist()[2] == [4, -1, -1] and mixed.free_targets.tolist() == [False, False, True]
    assert mb.free_targets is None


def test_allowed_ids_by_token_constrain_some_positions_only():
    """A forced judgment's response (free reasoning, a written prefix, a constrained index) packs one allowed row a
    target: its own target where unconstrained (marked free), the recorded set where constrained; a trained token
    outside its position's set, a wrong length, or both allowed fields set are refused."""
    seq = TrainSequence([5, 6], [20, 21, 30, 4], [-1.0, -2.0, 0.0, -0.5], 1.0, 0, loss_mask=[1, 1, 0, 1],
                        allowed_ids_by_token=[None, None, None, [3, 4, 9]])
    (mb,) = pack_sequences([seq], 64)
    assert mb.allowed_ids.tolist() == [[20, -1, -1], [21, -1, -1], [30, -1, -1], [3, 4, 9]]
    assert mb.free_targets.tolist() == [True, True, True, False] and mb.loss_weights.tolist() == [1, 1, 0, 1]
    assert len(merge_identical([seq, dataclasses.replace(seq)])) == 1
    with pytest.raises(ValueError, match="outside its allowed set"):
        dataclasses.replace(seq, allowed_ids_by_token=[None, None, None, [3, 9]])
    with pytest.raises(ValueError, match="entries for 4"):
        dataclasses.replace(seq, allowed_ids_by_token=[None, [3, 4, 9]])
    with pytest.raises(ValueError, match="both set"):
        dataclasses.replace(seq, allowed_token_ids=[3, 4, 9])


def pick_point(prompt: list, pick: int, solution: list, point: int, advantage: float, **kw) -> TrainSequence:
    """A response of two sampled index tokens around a written solution: loss mask [1, 0, ..., 0, 1], the
    written tokens outside the allowed set, their behaviour log-probs 0.0 (as the rollout gives them)."""
    n = len(solution)
    return TrainSequence(prompt, [pick] + solution + [point], [-1.2] + [0.0] * n + [-0.7], advantage, 0,
                         allowed_token_ids=[3, 4, 9, 11], loss_mask=[1] + [0] * n + [1], **kw)


def test_masked_tokens_get_weight_zero_and_leave_the_token_count():
    """A loss-mask-0 token is a target (the learner reads it) with weight 0; it counts nowhere."""
    a = pick_point([5, 6, 7], 3, [20, 21, 22], 9, 1.0)
    b = pick_point([5, 6, 7], 4, [30], 11, -1.0, loss_weight=0.5)
    c = TrainSequence([5, 6, 8], [3, 4], [-0.5, -0.1], 1.0, 0, allowed_token_ids=[3, 4, 9, 11])
    mbs = pack_sequences([a, b, c], 64)
    assert len(mbs) == 1
    (mb,) = mbs
    weights = {i: mb.loss_weights[start:end].tolist() for i, start, end in mb.spans}
    assert weights == {0: [1.0, 0.0, 0.0, 0.0, 1.0], 1: [0.5, 0.0, 0.5], 2: [1.0, 1.0]}
    assert mb.target_ids.tolist() == [3, 20, 21, 22, 9, 4, 30, 11, 3, 4]  # written tokens are still targets
    assert mb.num_loss_tokens == count_loss_tokens([a, b, c]) == TrainBatch([a, b, c]).global_num_tokens == 6


@pytest.mark.slow
def test_masked_tokens_outside_the_allowed_set_do_not_touch_the_loss(hf_model):
    """The learner's forward on a written (mask 0) token outside the allowed set gives a finite but meaningless
    log-prob; `micro_batch_loss` ignores it whatever its behaviour log-prob, advantage or proximal log-prob (behaviour
    and decoupled ratio), and nothing non-finite reaches the loss, its statistics or the gradients."""
    from actors.learner.policy_forward import _PolicyLogprobs, micro_batch_loss
    from core.config import AlgorithmConfig

    algo = AlgorithmConfig(ratio_reference="behaviour")
    seqs = [pick_point([5, 6, 7, 8], 3, [20, 21, 22], 9, 1.0), pick_point([5, 6, 7, 8], 4, [30], 11, -1.0)]
    (mb,) = pack_sequences(seqs, 64)
    written = mb.loss_weights == 0
    assert int(written.sum()) == 4 and count_loss_tokens(seqs) == 4
    assert not any(int(t) in (3, 4, 9, 11) for t in mb.target_ids[written])
    logprobs, entropy = _PolicyLogprobs(hf_model)(mb.input_ids, mb.position_ids, mb.attention_mask, mb.target_index,
                                                  mb.target_ids, mb.allowed_ids)
    assert torch.isfinite(logprobs).all() and torch.isfinite(entropy).all()

    def scramble(t: torch.Tensor, value: float) -> torch.Tensor:
        return t.masked_fill(written, value)

    other = dataclasses.replace(mb, behaviour_logprobs=scramble(mb.behaviour_logprobs, -40.0),
                                advantages=scramble(mb.advantages, 100.0))
    prox_given = logprobs.detach() - 0.3
    for prox, prox_other in ((False, False), (None, None), (prox_given, scramble(prox_given, 5.0))):
        loss, loss_sum, stats, is_w = micro_batch_loss(logprobs, mb, algo, 4, 1, prox)
        loss2, loss_sum2, stats2, is_w2 = micro_batch_loss(logprobs, other, algo, 4, 1, prox_other)
        assert torch.isfinite(loss) and loss.item() != 0.0
        assert loss.item() == loss2.item() and loss_sum.item() == loss_sum2.item() and stats == stats2
        assert all(math.isfinite(v) for v in stats.values()) and stats["num_tokens"] == 4
        if is_w is not None:
            assert torch.isfinite(is_w).all() and torch.equal(is_w[~written], is_w2[~written])
        (grad,) = torch.autograd.grad(loss, logprobs, retain_graph=True)
        assert torch.isfinite(grad).all() and (grad[written] == 0).all() and grad[~written].abs().sum() > 0
    hf_model.zero_grad()
    micro_batch_loss(logprobs, mb, algo, 4, 1)[0].backward()
    assert all(torch.isfinite(p.grad).all() for p in hf_model.parameters() if p.grad is not None)
    hf_model.zero_grad()


@pytest.mark.slow
def test_constrained_logprobs_are_the_softmax_over_the_allowed_ids(hf_model):
    from actors.learner.policy_forward import _PolicyLogprobs

    seq = TrainSequence([5, 6, 7, 8], [3, 9, 4], [0.0] * 3, 1.0, 0, allowed_token_ids=[3, 4, 9, 11])
    (mb,) = pack_sequences([seq], 64)
    with torch.no_grad():
        got, entropy = _PolicyLogprobs(hf_model)(mb.input_ids, mb.position_ids, mb.attention_mask, mb.target_index,
                                                  mb.target_ids, mb.allowed_ids)
        logits = hf_model(input_ids=torch.tensor([[5, 6, 7, 8, 3, 9]])).logits[0, 3:][:, [3, 4, 9, 11]]
    want = torch.log_softmax(logits, -1)
    assert torch.allclose(got, want[torch.arange(3), torch.tensor([0, 2, 1])], atol=1e-5)
    assert torch.allclose(entropy, -(want.exp() * want).sum(-1), atol=1e-5)


def test_anchor_mask_is_checked_and_travels_per_target():
    """`anchor_mask` marks written tokens only (a sampled one is refused), gives the micro-batch its (N,) anchor
    weights, and makes those targets the free (whole-vocabulary) ones of a constrained micro-batch."""
    a = pick_point([5, 6, 7], 3, [20, 21, 22], 9, 1.0, anchor_mask=[0, 1, 1, 1, 0])
    b = pick_point([5, 6, 7], 4, [30], 11, -1.0)
    (mb,) = pack_sequences([a, b], 64)
    assert mb.anchor_weights.tolist() == [0, 1, 1, 1, 0, 0, 0, 0]
    assert mb.free_targets.tolist() == [False, True, True, True, False, False, False, False]
    assert (a.num_anchor_tokens, b.num_anchor_tokens, count_anchor_tokens([a, b])) == (3, 0, 3)
    assert pack_sequences([b], 64)[0].free_targets is None
    with pytest.raises(ValueError, match="policy sampled"):
        pick_point([5], 3, [20], 9, 1.0, anchor_mask=[1, 1, 0])
    with pytest.raises(ValueError, match="one 0 or 1 per response token"):
        pick_point([5], 3, [20], 9, 1.0, anchor_mask=[0, 1])


def test_anchor_loss_is_the_mean_nll_of_the_anchor_tokens_under_any_split():
    """anchor_loss: coef x the mean NLL over the mini-batch's anchor tokens; summed over micro-batches (and ranks,
    with grad_divisor) it is the same whatever the split, and only the anchor targets get a gradient."""
    from actors.learner.policy_forward import anchor_loss

    a = pick_point([5, 6, 7], 3, [20, 21, 22], 9, 1.0, anchor_mask=[0, 1, 1, 1, 0])
    b = pick_point([5, 6, 8], 4, [30, 31], 11, -1.0, anchor_mask=[0, 1, 1, 0])
    (whole,) = pack_sequences([a, b], 64)
    logprobs = torch.linspace(-3.0, -0.1, whole.target_ids.numel(), requires_grad=True)
    loss, nll_sum = anchor_loss(logprobs, whole, 0.5, 5, 1)
    anchored = whole.anchor_weights > 0
    assert loss.item() == pytest.approx(0.5 * -logprobs[anchored].mean().item())
    assert nll_sum.item() == pytest.approx(-logprobs[anchored].sum().item()) and not nll_sum.requires_grad
    (grad,) = torch.autograd.grad(loss, logprobs)
    assert (grad[~anchored] == 0).all() and torch.allclose(grad[anchored], torch.full((5,), -0.1))
    parts = [pack_sequences([s], 64)[0] for s in (a, b)]
    split = sum(anchor_loss(logprobs[:5] if i == 0 else logprobs[5:], mb, 0.5, 5, 2)[0] for i, mb in enumerate(parts))
    assert split.item() == pytest.approx(2 * loss.item())  # two "ranks": the engine averages, grad_divisor undoes it


@pytest.mark.slow
def test_free_targets_are_scored_over_the_whole_vocabulary(hf_model):
    """In a constrained micro-batch the anchor's targets get the log-softmax over the whole vocabulary, the sampled
    ones over the allowed ids, from one forward pass."""
    from actors.learner.policy_forward import _PolicyLogprobs

    seq = pick_point([5, 6, 7, 8], 3, [20, 21], 9, 1.0, anchor_mask=[0, 1, 1, 0])
    (mb,) = pack_sequences([seq], 64)
    with torch.no_grad():
        got, _ = _PolicyLogprobs(hf_model)(mb.input_ids, mb.position_ids, mb.attention_mask, mb.target_index,
                                           mb.target_ids, mb.allowed_ids, mb.free_targets)
        logits = hf_model(input_ids=torch.tensor([[5, 6, 7, 8, 3, 20, 21]])).logits[0, 3:]
    full = torch.log_softmax(logits, -1)
    allowed = torch.log_softmax(logits[:, [3, 4, 9, 11]], -1)
    want = [allowed[0, 0], full[1, 20], full[2, 21], allowed[3, 2]]
    assert torch.allclose(got, torch.stack(want), atol=1e-5)


@pytest.fixture(scope="module")
def hf_model(tiny_model_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_path), dtype=torch.float32,
                                                 attn_implementation="sdpa")
    return model.eval()


@pytest.mark.slow
@pytest.mark.parametrize("share_prefix,layout,mask,last_layer_at_targets", [
    (True, "flat", "blocks", True), (False, "flat", "blocks", True), (True, "rows", "blocks", True),
    (True, "rows", "dense", True), (True, "rows", "dense", False)])
def test_packed_forward_equals_one_by_one(hf_model, share_prefix, layout, mask, last_layer_at_targets):
    """The learner's packed log-probs (block attention or the dense mask; the last layer at the targets only or
    everywhere) equal one plain transformers forward per sequence."""
    check_packed_equals_one_by_one(hf_model, share_prefix, layout, mask, last_layer_at_targets)


@pytest.mark.slow
def test_packed_forward_equals_one_by_one_llama():
    """The same for a Llama-architecture model (SmolLM2's: no q/k norms, its own decoder layer class)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                                         attn_implementation="sdpa")).eval()
    check_packed_equals_one_by_one(model, True, "flat", "blocks", True)


def check_packed_equals_one_by_one(hf_model, share_prefix, layout, mask, last_layer_at_targets):
    from actors.learner.policy_forward import _PolicyLogprobs

    rng = random.Random(3)
    vocab = hf_model.config.vocab_size
    spec = [(rng.randrange(3, 30), [rng.randrange(1, 10) for _ in range(rng.randrange(1, 5))]) for _ in range(6)]
    spec += [(2, [3])] * 4  # short sequences that fill the rows' free tails
    if share_prefix:
        spec.append((60, [1, 8, 30]))  # over the budget together: the group is split, the prompt repeated
    seqs = make_groups(spec, rng, vocab=vocab)
    wrapper = _PolicyLogprobs(hf_model, last_layer_at_targets=last_layer_at_targets)
    assert wrapper.last_layer_at_targets == last_layer_at_targets
    packed = pack_sequences(seqs, 96, share_prefix=share_prefix, layout=layout)
    assert any(len(m.spans) > m.input_ids.shape[0] for m in packed)  # some rows really hold several sequences
    got = [[] for _ in seqs]
    with torch.no_grad():
        for mb in packed:
            attention = mb.attention_mask if mask == "blocks" else mb.dense_attention_mask()
            logprobs, _ = wrapper(mb.input_ids, mb.position_ids, attention, mb.target_index, mb.target_ids)
            unpack_per_sequence(logprobs, mb, got)
        for i, s in enumerate(seqs):
            ids = torch.tensor([s.prompt_token_ids + s.response_token_ids])
            logits = hf_model(input_ids=ids).logits[0, len(s.prompt_token_ids) - 1:-1]
            want = torch.log_softmax(logits, -1).gather(1, torch.tensor(s.response_token_ids)[:, None])[:, 0]
            assert torch.allclose(torch.tensor(got[i]), want, atol=1e-5, rtol=0), i


@pytest.mark.slow
def test_shared_prefix_gradient_equals_separate_sequences(hf_model):
    """Gradients flow back through a shared prompt as the sum of the separate sequences' gradients."""
    from actors.learner.policy_forward import _PolicyLogprobs

    rng = random.Random(4)
    seqs = make_groups([(25, [4, 7, 1]), (12, [9, 3])], rng, vocab=hf_model.config.vocab_size)
    weights = torch.tensor([rng.uniform(-1, 1) for _ in seqs])
    params = [p for p in hf_model.parameters() if p.requires_grad]

    def grads(share_prefix: bool) -> list:
        hf_model.zero_grad()
        total = 0.0
        for mb in pack_sequences(seqs, 10**4, share_prefix=share_prefix):
            logprobs, _ = _PolicyLogprobs(hf_model)(mb.input_ids, mb.position_ids, mb.attention_mask,
                                                    mb.target_index, mb.target_ids)
            for i, start, end in mb.spans:
                total = total + weights[i] * logprobs[start:end].sum()
        total.backward()
        return [p.grad.clone() for p in params]

    shared, separate = grads(True), grads(False)
    hf_model.zero_grad()
    scale = max(float(g.abs().max()) for g in separate)
    assert scale > 0
    assert max(float((a - b).abs().max()) for a, b in zip(shared, separate)) <= 1e-5 * scale


def test_identical_samples_merge_into_one_sequence_with_copies():
    """merge_identical: sequences equal in every field the learner reads become one with `copies`; any difference
    (response, behaviour log-prob, advantage, version) keeps them apart; the counts are unchanged."""
    a = pick_point([5, 6, 7], 3, [20, 21], 9, 1.0, anchor_mask=[0, 1, 1, 0])
    seqs = [a, dataclasses.replace(a), pick_point([5, 6, 7], 3, [20, 21], 11, 1.0, anchor_mask=[0, 1, 1, 0]),
            dataclasses.replace(a, behaviour_logprobs=[-1.3, 0.0, 0.0, -0.7]), dataclasses.replace(a, advantage=0.5),
            dataclasses.replace(a, policy_version=1), dataclasses.replace(a)]
    merged = merge_identical(seqs)
    assert [s.copies for s in merged] == [3, 1, 1, 1, 1]
    assert merged[0].response_token_ids == a.response_token_ids and merged[1].response_token_ids[-1] == 11
    assert count_sequences(merged) == len(seqs) and count_loss_tokens(merged) == count_loss_tokens(seqs)
    assert count_anchor_tokens(merged) == count_anchor_tokens(seqs) == 14
    assert merge_identical(merged) == merged  # already merged: nothing changes
    with pytest.raises(ValueError, match="copies"):
        dataclasses.replace(a, copies=0)


def test_mini_batches_split_by_sampled_sequences_and_keep_a_merged_one_whole():
    rng = random.Random(0)
    seqs = [make_seq(3, 2, rng) for _ in range(5)]
    assert [len(m) for m in split_mini_batches(seqs, 2)] == [3, 2]  # as before: the first gets the extra one
    merged = [dataclasses.replace(seqs[0], copies=4)] + seqs[1:]
    parts = split_mini_batches(merged, 2)
    assert [count_sequences(m) for m in parts] == [4, 4] and parts[0] == merged[:1]
    assert split_mini_batches([], 3) == [[], [], []]


@pytest.mark.slow
def test_a_merged_batch_trains_exactly_as_its_copies(hf_model):
    """The learner's DAPO loss, anchor loss, their gradients and the token counts of a batch with repeated samples
    are those of the same batch with each set of identical samples merged into one sequence with `copies`."""
    from actors.learner.policy_forward import _PolicyLogprobs, anchor_loss, micro_batch_loss
    from core.config import AlgorithmConfig

    algo = AlgorithmConfig(ratio_reference="behaviour")
    anchor = {"anchor_mask": [0, 1, 1, 1, 0]}
    up, down = pick_point([5, 6, 7, 8], 3, [20, 21, 22], 9, 1.0, **anchor), pick_point([5, 6, 7, 8], 4, [30, 31, 32],
                                                                                        11, -0.5, **anchor)
    other = pick_point([5, 6, 2], 3, [23, 24, 25], 4, 0.7, **anchor)
    seqs = [up, down, up, up, other, down, up]
    merged = merge_identical(seqs)
    assert len(merged) == 3 and count_sequences(merged) == 7
    params = [p for p in hf_model.parameters() if p.requires_grad]

    def train(batch: list) -> tuple:
        hf_model.zero_grad()
        tokens, anchors = count_loss_tokens(batch), count_anchor_tokens(batch)
        total, stats_sum = 0.0, {}
        for mb in pack_sequences(batch, 10**4):
            logprobs, _ = _PolicyLogprobs(hf_model)(mb.input_ids, mb.position_ids, mb.attention_mask, mb.target_index,
                                                    mb.target_ids, mb.allowed_ids, mb.free_targets)
            loss, _, stats, _ = micro_batch_loss(logprobs, mb, algo, tokens, 1)
            total = total + loss + anchor_loss(logprobs, mb, 0.5, anchors, 1)[0]
            stats_sum = {k: stats_sum.get(k, 0.0) + v * mb.num_loss_tokens for k, v in stats.items()}
        total.backward()
        return float(total.detach()), stats_sum, (tokens, anchors), [p.grad.clone() for p in params]

    loss_all, stats_all, counts_all, grads_all = train(seqs)
    loss_merged, stats_merged, counts_merged, grads_merged = train(merged)
    hf_model.zero_grad()
    assert counts_all == counts_merged == (14, 21)
    assert loss_merged == pytest.approx(loss_all, rel=1e-5) and loss_all != 0.0
    assert stats_merged == pytest.approx(stats_all, rel=1e-5)
    scale = max(float(g.abs().max()) for g in grads_all)
    assert scale > 0 and max(float((a - b).abs().max()) for a, b in zip(grads_all, grads_merged)) <= 1e-5 * scale

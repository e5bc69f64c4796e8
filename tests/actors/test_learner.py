"""DeepSpeed learner on the tiny Qwen3: learning signal, bf16, lr schedule, clipping, exact data parallelism
(2 Ray ranks vs 1 rank, ZeRO-2 and ZeRO-3), checkpoint round trips, weight export."""
from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from core.packing import count_loss_tokens, pack_sequences, split_mini_batches
from core.config import AlgorithmConfig, LearnerConfig
from core.net import free_port, rendezvous_port
from core.records import TrainSequence

ROOT = Path(__file__).resolve().parents[2]
ON_POLICY = AlgorithmConfig(ratio_reference="behaviour")  # AlgorithmConfig()'s 'auto' is resolved by load_config


@pytest.fixture(scope="module")
def vocab(tiny_model_path) -> int:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(tiny_model_path)).vocab_size


def learner_cfg(**overrides) -> LearnerConfig:
    base = dict(lr=1e-3, micro_batch_tokens=256, step_timeout_s=120.0)
    base.update(overrides)
    return LearnerConfig(**base)


def make_batch(n: int, seed: int, vocab: int, prompt=(20, 60), response=(4, 12), group: int = 1) -> list:
    """Random sequences, `group` consecutive ones sharing a prompt; advantages alternate +1 / -1;
    behaviour log-probs are placeholders (-2)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        r = rng.randrange(*response)
        if i % group == 0:
            prompt_ids = [rng.randrange(2, vocab) for _ in range(rng.randrange(*prompt))]
        out.append(TrainSequence(prompt_ids, [rng.randrange(2, vocab) for _ in range(r)], [-2.0] * r,
                                 advantage=1.0 if i % 2 == 0 else -1.0, policy_version=0))
    return out


def on_policy(learner, seqs: list) -> list:
    """The same sequences with behaviour log-probs set to the learner's own (ratio 1 at the first update)."""
    lps = learner.compute_logprobs(seqs)
    return [dataclasses.replace(s, behaviour_logprobs=lp) for s, lp in zip(seqs, lps)]


def new_learner(path, cfg=None, algo=None, **kw):
    from actors.learner.learner import Learner

    return Learner(cfg or learner_cfg(), algo or ON_POLICY, str(path), master_port=free_port(), **kw)


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float(np.abs(a[k] - b[k]).max()) for k in a)


# ----------------------------------------------------------------------------- pure


def test_learner_refuses_an_unresolved_ratio_reference(tiny_model_path):
    with pytest.raises(ValueError, match="ratio_reference='auto'"):
        new_learner(tiny_model_path, algo=AlgorithmConfig())  # fails before any process group is formed


# ----------------------------------------------------------------------------- one rank, in-process


@pytest.mark.slow
def test_one_rank_learns_clips_and_exports(tiny_model_path, vocab, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = learner_cfg(micro_batch_tokens=128)
    learner = new_learner(tiny_model_path, cfg=cfg)
    try:
        init = learner.export_weights()
        batch = on_policy(learner, make_batch(8, seed=0, vocab=vocab, group=2))
        pos = [i for i, s in enumerate(batch) if s.advantage > 0]
        neg = [i for i, s in enumerate(batch) if s.advantage < 0]
        n_tok = count_loss_tokens(batch)
        with pytest.raises(ValueError, match="global_num_tokens"):
            learner.train_step(batch, n_tok + 1, step=0)
        history = [learner.train_step(batch, n_tok, step=0)]
        first, first_update = history[0], max_diff(learner.export_weights(), init)
        history += [learner.train_step(batch, n_tok, step=k) for k in range(1, 4)]
        assert first["ratio_mean"] == pytest.approx(1.0, abs=1e-5) and first["clip_frac"] == 0.0
        assert first["micro_batches"] > 1 and first["loss_tokens"] == n_tok and first["updates"] == 1
        assert first["entropy"] > 0 and first["grad_norm"] > 0 and first["lr"] == pytest.approx(1e-3)
        assert [h["weight_version"] for h in history] == [1, 2, 3, 4] and learner.weight_version() == 4
        assert history[-1]["loss"] < history[0]["loss"]
        before = [sum(s.behaviour_logprobs) for s in batch]
        after = [sum(lp) for lp in learner.compute_logprobs(batch)]
        assert all(after[i] > before[i] for i in pos) and all(after[i] < before[i] for i in neg)
        for key in ("forward_s", "backward_s", "optimizer_s", "tokens_per_s", "padding_fraction"):
            assert math.isfinite(history[-1][key])

        # export: HF names, float32, lm_head.weight present for the tied embeddings, equal to them
        weights = learner.export_weights()
        assert "lm_head.weight" in weights and all(w.dtype == np.float32 for w in weights.values())
        np.testing.assert_array_equal(weights["lm_head.weight"], weights["model.embed_tokens.weight"])
        hf_keys = set(AutoModelForCausalLM.from_pretrained(str(tiny_model_path)).state_dict())
        assert set(weights) == hf_keys | {"lm_head.weight"}
        assert max_diff(weights, init) > 1e-4

        # export_hf: transformers loads it and gives the learner's log-probs
        out = tmp_path / "export"
        learner.export_hf(str(out))
        assert not (tmp_path / "export.tmp").exists()
        model = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
        AutoTokenizer.from_pretrained(str(out))
        np.testing.assert_array_equal(model.lm_head.weight.detach().numpy(), weights["lm_head.weight"])
        s = batch[0]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([s.prompt_token_ids + s.response_token_ids])).logits[0]
        want = torch.log_softmax(logits[len(s.prompt_token_ids) - 1:-1], -1)
        want = want.gather(1, torch.tensor(s.response_token_ids)[:, None])[:, 0]
        np.testing.assert_allclose(learner.compute_logprobs([s])[0], want.numpy(), atol=1e-5)
    finally:
        learner.shutdown()

    # gradient clipping: a tiny clip norm shrinks the (Adam) update by orders of magnitude; grad_norm is pre-clip
    clipped = new_learner(tiny_model_path, cfg=dataclasses.replace(cfg, grad_clip=1e-9))
    try:
        metrics = clipped.train_step(batch, n_tok, step=0)
        step = max_diff(clipped.export_weights(), init)
    finally:
        clipped.shutdown()
    assert metrics["grad_norm"] == pytest.approx(first["grad_norm"], rel=1e-4)
    assert first_update > 0.5e-3 and step < 1e-2 * first_update  # unclipped, Adam moves some weight by ~lr


@pytest.mark.slow
def test_bf16_and_proximal_ratio(tiny_model_path, vocab):
    algo = AlgorithmConfig(ratio_reference="proximal", tis_cap=2.0)
    cfg = learner_cfg(dtype="bfloat16", zero_stage=3, lr_schedule="linear", warmup_steps=1)  # bf16 under ZeRO-3
    learner = new_learner(tiny_model_path, cfg=cfg,
                          algo=algo, total_train_steps=4)
    try:
        init = learner.export_weights()
        wire = learner.export_weights(widen=False)  # what the weight sync sends: bf16, not widened
        assert all(w.itemsize == 2 for w in wire.values()) and wire.keys() == init.keys()
        assert all(np.array_equal(torch.from_numpy(wire[k].view(np.int16)).view(torch.bfloat16).float().numpy(),
                                  init[k]) for k in init)
        batch = on_policy(learner, make_batch(6, seed=1, vocab=vocab))
        # behaviour policy lower than the learner's by 0.5 (IS weight e^0.5 < cap) or 1.5 (capped at 2)
        shifts = [0.5, 1.5] * 3
        batch = [dataclasses.replace(s, behaviour_logprobs=[x - d for x in s.behaviour_logprobs])
                 for s, d in zip(batch, shifts)]
        n_tok = count_loss_tokens(batch)
        m = learner.train_step(batch, n_tok, step=0)
        capped = sum(len(s.response_token_ids) for s, d in zip(batch, shifts) if d > 1) / n_tok
        # the ratio is taken against the proximal (current) log-probs: exactly 1 at the first update
        assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-6) and m["clip_frac"] == 0.0
        assert m["tis_capped_frac"] == pytest.approx(capped)
        assert m["tis_mean"] == pytest.approx(capped * 2 + (1 - capped) * math.exp(0.5), rel=1e-2)  # bf16 log-probs
        assert m["lr"] == pytest.approx(1e-3)  # warm-up step 0 of 1
        m2 = learner.train_step(batch, n_tok, step=1)
        assert m2["lr"] == pytest.approx(1e-3 * 3 / 3) and math.isfinite(m2["loss"])
        m3 = learner.train_step(batch, n_tok, step=2)
        assert m3["lr"] == pytest.approx(1e-3 * 2 / 3)
        assert max_diff(learner.export_weights(), init) > 1e-3
    finally:
        learner.shutdown()


def test_log_probs_at_another_temperature_leave_the_training_temperature_as_it_was(tiny_model_path, vocab):
    """The sync check (driver/sync_check.py) compares temperature-1 log-probs with an engine's prompt log-probs while
    the learner trains at the sampling temperature: `compute_logprobs(..., temperature=1.0)` is the raw model's, and
    the training temperature is back afterwards."""
    from transformers import AutoModelForCausalLM

    learner = new_learner(tiny_model_path, temperature=1.5)
    try:
        s = make_batch(1, seed=3, vocab=vocab)[0]
        trained = learner.compute_logprobs([s])[0]
        raw = learner.compute_logprobs([s], temperature=1.0)[0]
        model = AutoModelForCausalLM.from_pretrained(str(tiny_model_path), dtype=torch.float32).eval()
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([s.prompt_token_ids + s.response_token_ids])).logits[0]
        ids = torch.tensor(s.response_token_ids)[:, None]
        for temperature, got in ((1.0, raw), (1.5, trained)):
            want = torch.log_softmax(logits[len(s.prompt_token_ids) - 1:-1] / temperature, -1).gather(1, ids)[:, 0]
            np.testing.assert_allclose(got, want.numpy(), atol=1e-5)
        assert learner.compute_logprobs([s])[0] == trained
    finally:
        learner.shutdown()


def test_shutdown_releases_the_model_under_zero2(tiny_model_path):
    """After shutdown (engine destroyed, then the process group) nothing keeps a ZeRO-2 learner's model alive:
    several learners in one process (tests, benchmarks) do not pile up weights and optimizer state. Twice is a
    no-op."""
    import gc
    import weakref

    learner = new_learner(tiny_model_path, cfg=learner_cfg(zero_stage=2))
    model = weakref.ref(learner.hf)
    learner.shutdown()
    learner.shutdown()
    del learner
    gc.collect()
    assert model() is None


def tiny_model_folder_without_circuit(tmp_path):
    from tiny_recipe.config import TinyModelConfig
    from tiny_recipe.model import build_tiny_model

    from .conftest import tiny_texts

    return build_tiny_model(TinyModelConfig(), tiny_texts(), tmp_path / "plain", seed=0)


def test_a_wired_induction_circuit_stays_as_written_through_learner_steps(vocab, tmp_path):
    """A model built with `tiny.model.induction_circuit` (recorded in its folder) declares the circuit's entries
    frozen (tiny_recipe.model.frozen_entries); handed to the learner, they stay exactly as written through
    DeepSpeed steps (gradient masks) while the rest of the model trains. ZeRO-3 is refused with frozen entries."""
    from transformers import AutoModelForCausalLM

    from tiny_recipe.config import TinyModelConfig
    from tiny_recipe.induction import circuit_masks
    from tiny_recipe.model import build_tiny_model, frozen_entries

    from .conftest import tiny_texts

    path = build_tiny_model(TinyModelConfig(induction_circuit=True), tiny_texts(), tmp_path / "wired", seed=0)
    masks = {k: m.numpy() for k, m in circuit_masks(AutoModelForCausalLM.from_pretrained(path)).items()}
    frozen = frozen_entries(path)  # what the run hands the learner for this folder
    assert frozen is not None and all(np.array_equal(frozen[k], masks[k]) for k in frozen)
    assert frozen_entries(tiny_model_folder_without_circuit(tmp_path)) is None
    with pytest.raises(ValueError, match="zero_stage=3"):
        new_learner(path, cfg=learner_cfg(zero_stage=3), frozen=frozen)
    learner = new_learner(path, cfg=learner_cfg(zero_stage=2), frozen=frozen)
    try:
        before = learner.export_weights()
        seqs = on_policy(learner, make_batch(6, seed=5, vocab=vocab, group=3))
        for step in range(2):
            learner.train_step(seqs, count_loss_tokens(seqs), step=step)
        after = learner.export_weights()
    finally:
        learner.shutdown()
    moved = 0.0
    for name, mask in masks.items():
        if name in after:
            assert np.array_equal(before[name][mask], after[name][mask]), name
            moved = max(moved, float(np.abs(before[name][~mask] - after[name][~mask]).max(initial=0.0)))
    assert moved > 0  # everything else trained


def test_gradient_checkpointing_changes_memory_not_the_step(tiny_model_path, vocab):
    """`learner.gradient_checkpointing` recomputes every decoder layer in the backward pass (the layers are
    switched to it) and the step stays the same: log-probs, loss and new weights equal to float32 rounding."""
    batch = make_batch(6, seed=3, vocab=vocab, group=3)
    results = []
    for checkpointing in (False, True):
        learner = new_learner(tiny_model_path, cfg=learner_cfg(gradient_checkpointing=checkpointing))
        try:
            layers = learner.hf.base_model.layers
            assert all(layer.gradient_checkpointing for layer in layers) == checkpointing
            seqs = on_policy(learner, batch)
            metrics = learner.train_step(seqs, count_loss_tokens(seqs), step=0)
            results.append((seqs, metrics, learner.export_weights()))
        finally:
            learner.shutdown()
    (seqs_off, m_off, w_off), (seqs_on, m_on, w_on) = results
    assert all(a.behaviour_logprobs == b.behaviour_logprobs for a, b in zip(seqs_off, seqs_on))
    assert m_on["loss"] == pytest.approx(m_off["loss"], abs=1e-6)
    assert m_on["grad_norm"] == pytest.approx(m_off["grad_norm"], rel=1e-5)
    assert max_diff(w_on, w_off) < 1e-6


@pytest.mark.slow
def test_proximal_ratio_reuses_the_first_forward_and_keeps_the_step_start_for_later_mini_batches(tiny_model_path,
                                                                                               vocab):
    """On-policy data: the decoupled ratio (proximal = this step's starting weights, taken from the first
    mini-batch's own forward pass) updates exactly as the behaviour ratio does; with two mini-batches the
    second one's ratio is against the step-start weights, so it moves off 1 after the first update."""
    batch = make_batch(6, seed=4, vocab=vocab)
    weights = {}
    for ref in ("behaviour", "proximal"):
        learner = new_learner(tiny_model_path, algo=dataclasses.replace(ON_POLICY, ratio_reference=ref),
                              total_train_steps=2)
        try:
            data = on_policy(learner, batch)
            m = learner.train_step(data, count_loss_tokens(data), step=0)
            assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
            weights[ref] = learner.export_weights()
        finally:
            learner.shutdown()
    assert max_diff(weights["behaviour"], weights["proximal"]) < 1e-6
    two = new_learner(tiny_model_path, cfg=learner_cfg(mini_batches_per_step=2),
                      algo=dataclasses.replace(ON_POLICY, ratio_reference="proximal"), total_train_steps=2)
    try:
        data = on_policy(two, batch)
        m = two.train_step(data, count_loss_tokens(data), step=0)
        assert m["ratio_mean"] != pytest.approx(1.0, abs=1e-7) and math.isfinite(m["loss"])
    finally:
        two.shutdown()


@pytest.mark.slow
def test_written_tokens_are_read_not_trained(tiny_model_path, vocab):
    """Responses [pick] + written solution + [point] (loss mask [1, 0, ..., 0, 1], the solution outside the
    allowed set, its behaviour log-probs 0.0 as the rollout gives them): a decoupled-ratio step counts the two
    index tokens only and stays finite, and the update does not depend on the written tokens' behaviour
    log-probs."""
    rng = random.Random(6)
    allowed = rng.sample(range(2, vocab), 4)
    others = [t for t in range(2, vocab) if t not in allowed]
    seqs = []
    for i in range(6):
        if i % 2 == 0:
            prompt = [rng.randrange(2, vocab) for _ in range(rng.randrange(20, 40))]
        n = rng.randrange(3, 9)
        seqs.append(TrainSequence(prompt, [rng.choice(allowed)] + rng.sample(others, n) + [rng.choice(allowed)],
                                  [0.0] * (n + 2), advantage=1.0 if i % 2 == 0 else -1.0, policy_version=0,
                                  allowed_token_ids=allowed, loss_mask=[1] + [0] * n + [1]))
    algo = dataclasses.replace(ON_POLICY, ratio_reference="proximal")
    results = []
    for written in (0.0, -30.0):
        learner = new_learner(tiny_model_path, algo=algo)
        try:
            before = learner.export_weights()
            data = [dataclasses.replace(s, behaviour_logprobs=[lp if m else written for lp, m in zip(lps, s.loss_mask)])
                    for s, lps in zip(seqs, learner.compute_logprobs(seqs))]
            metrics = learner.train_step(data, count_loss_tokens(data), step=0)
            results.append((metrics, learner.export_weights()))
        finally:
            learner.shutdown()
    (m, after), (m_other, after_other) = results
    assert m["loss_tokens"] == 2 * len(seqs)
    assert all(math.isfinite(m[k]) for k in ("loss", "entropy", "approx_kl", "ratio_mean", "tis_mean", "grad_norm"))
    assert m["tis_mean"] == pytest.approx(1.0, abs=1e-5) and m["tis_capped_frac"] == 0.0  # index tokens on-policy
    assert max_diff(after, before) > 1e-4
    assert max_diff(after_other, after) == 0.0 and m_other["loss"] == m["loss"]


@pytest.mark.slow
def test_solution_anchor_raises_the_likelihood_of_the_written_solution(tiny_model_path, vocab):
    """algorithm.solution_anchor on a real learner: responses [pick] + written solution + [point] whose solution
    carries anchor_mask 1, zero advantages (no policy gradient): one step lowers the solution's NLL over the whole
    vocabulary and reports it as `anchor_nll`; with the anchor off the same step reports none."""
    rng = random.Random(8)
    allowed = rng.sample(range(2, vocab), 4)
    others = [t for t in range(2, vocab) if t not in allowed]
    prompt = [rng.randrange(2, vocab) for _ in range(30)]
    solution = rng.sample(others, 12)
    seqs = [TrainSequence(prompt, [rng.choice(allowed)] + solution + [rng.choice(allowed)], [0.0] * 14,
                          advantage=0.0, policy_version=0, allowed_token_ids=allowed, loss_mask=[1] + [0] * 12 + [1],
                          anchor_mask=[0] + [1] * 12 + [0]) for _ in range(4)]

    def solution_nll(learner) -> float:
        return -sum(sum(lps[1:13]) for lps in learner.compute_logprobs(seqs)) / (12 * len(seqs))

    for coef in (1.0, 0.0):
        learner = new_learner(tiny_model_path, cfg=learner_cfg(lr=1e-3),
                              algo=dataclasses.replace(ON_POLICY, solution_anchor=coef))
        try:
            data = [dataclasses.replace(s, behaviour_logprobs=lps) for s, lps in zip(seqs, learner.compute_logprobs(seqs))]
            before = solution_nll(learner)
            metrics = learner.train_step(data, count_loss_tokens(data), step=0)
            after = solution_nll(learner)
        finally:
            learner.shutdown()
        assert metrics["loss_tokens"] == 2 * len(seqs)
        if coef:
            assert metrics["anchor_nll"] == pytest.approx(before, rel=1e-4) and before > 1.0
            assert after < before - 0.05, (before, after)
        else:
            assert "anchor_nll" not in metrics


@pytest.mark.slow
def test_checkpoint_round_trip_gives_identical_next_step(tiny_model_path, vocab, tmp_path):
    cfg = learner_cfg(lr_schedule="cosine", warmup_steps=2, mini_batches_per_step=2)
    ckpt = tmp_path / "ckpt"
    a = new_learner(tiny_model_path, cfg=cfg, total_train_steps=5)
    try:
        b1, b2 = on_policy(a, make_batch(6, seed=2, vocab=vocab)), make_batch(6, seed=3, vocab=vocab)
        a.train_step(b1, count_loss_tokens(b1), step=0)
        a.save_checkpoint(str(ckpt), {"step": 1, "data_cursor": 42})
        a.save_checkpoint(str(ckpt), {"step": 1, "data_cursor": 42})  # overwriting a checkpoint is atomic too
        expected_metrics = a.train_step(b2, count_loss_tokens(b2), step=1)
        expected_rng = torch.rand(3)
        expected = a.export_weights()
    finally:
        a.shutdown()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]

    b = new_learner(tiny_model_path, cfg=cfg, seed=7, total_train_steps=5)  # other seed: RNG must be restored
    try:
        assert b.load_checkpoint(str(ckpt)) == {"step": 1, "data_cursor": 42}
        assert b.weight_version() == 2
        got_metrics = b.train_step(b2, count_loss_tokens(b2), step=1)
        assert torch.equal(torch.rand(3), expected_rng)
        assert max_diff(b.export_weights(), expected) <= 1e-7
        assert got_metrics["lr"] == expected_metrics["lr"] and got_metrics["weight_version"] == 4
        assert got_metrics["loss"] == pytest.approx(expected_metrics["loss"], abs=1e-7)
        with pytest.raises(FileNotFoundError):
            b.load_checkpoint(str(tmp_path / "missing"))
    finally:
        b.shutdown()


# ----------------------------------------------------------------------------- two ranks (Ray actors)


def split_batches(vocab: int, adv_scale: float = 1e-9):
    """Rank shards with unequal sizes, lengths and micro-batch counts, and a masked sequence.

    Advantages are scaled to +-1e-9 so every gradient element is far below AdamW's eps (1e-8): the update is
    then lr * g / eps, LINEAR in the gradient, and comparing weights compares gradients. (With O(1)
    advantages Adam normalises each element to ~lr, which turns fp32 summation-order noise in near-zero
    gradient elements into O(1e-2 lr) weight differences and hides a uniform scale error altogether.)
    Returns (whole batch ordered so that its 2 mini-batches are the unions of the ranks' halves, shards).
    """
    r0 = make_batch(4, seed=10, vocab=vocab, prompt=(10, 20))
    r1 = make_batch(6, seed=11, vocab=vocab, prompt=(40, 90), response=(8, 20), group=3)  # shared prompts
    r1[1] = dataclasses.replace(r1[1], loss_weight=0.0)  # overlong-filtered: in the batch, out of the loss
    r0, r1 = ([dataclasses.replace(s, advantage=s.advantage * adv_scale) for s in r] for r in (r0, r1))
    whole = r0[:2] + r1[:3] + r0[2:] + r1[3:]
    return whole, [r0, r1]


@pytest.fixture(scope="module")
def ray_session():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR",
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    yield ray
    ray.shutdown()


def run_two_ranks(ray, path, cfg, shards, n_tok, checkpoint_dir=None):
    from actors.learner.learner import Learner

    actor = ray.remote(num_cpus=1)(Learner)
    port = rendezvous_port()
    ranks = [actor.remote(cfg, ON_POLICY, str(path), rank=r, world_size=2, master_port=port)
             for r in range(2)]

    def export():  # collective under ZeRO-3: every rank takes part
        return ray.get([a.export_weights.remote() for a in ranks], timeout=120)

    try:
        metrics = ray.get([a.train_step.remote(s, n_tok, 0) for a, s in zip(ranks, shards)], timeout=300)
        weights = export()
        extra = None
        if checkpoint_dir is not None:  # save -> step -> load -> same step again: identical result
            ray.get([a.save_checkpoint.remote(str(checkpoint_dir), {"k": 1}) for a in ranks], timeout=120)
            after = ray.get([a.train_step.remote(s, n_tok, 1) for a, s in zip(ranks, shards)], timeout=300)
            w_after = export()[0]
            ray.get([a.load_checkpoint.remote(str(checkpoint_dir)) for a in ranks], timeout=120)
            again = ray.get([a.train_step.remote(s, n_tok, 1) for a, s in zip(ranks, shards)], timeout=300)
            w_again = export()[0]
            extra = (after[0], w_after, again[0], w_again)
        ray.get([a.shutdown.remote() for a in ranks], timeout=60)
        return metrics, weights, extra
    finally:
        for a in ranks:
            ray.kill(a)


@pytest.fixture(scope="module")
def single_rank_reference(tiny_model_path, vocab):
    """1 rank, whole batch, 2 mini-batches: initial and updated weights, metrics."""
    whole, shards = split_batches(vocab)
    cfg = learner_cfg(lr=1.0, micro_batch_tokens=100, mini_batches_per_step=2)  # lr 1: see split_batches
    learner = new_learner(tiny_model_path, cfg=cfg)
    try:
        init = learner.export_weights()
        metrics = learner.train_step(whole, count_loss_tokens(whole), step=0)
        return {"cfg": cfg, "whole": whole, "shards": shards, "init": init, "metrics": metrics,
                "weights": learner.export_weights()}
    finally:
        learner.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize("zero_stage", [2, 3])
def test_two_ranks_equal_one_rank_on_the_whole_batch(ray_session, tiny_model_path, single_rank_reference,
                                                     zero_stage, tmp_path):
    ref = single_rank_reference
    cfg = dataclasses.replace(ref["cfg"], zero_stage=zero_stage)
    n_tok = count_loss_tokens(ref["whole"])
    ckpt = tmp_path / "ckpt" if zero_stage == 3 else None
    metrics, weights, extra = run_two_ranks(ray_session, tiny_model_path, cfg, ref["shards"], n_tok, ckpt)
    per_rank = [[len(pack_sequences(m, cfg.micro_batch_tokens)) for m in split_mini_batches(s, 2)]
                for s in ref["shards"]]
    assert per_rank[0] != per_rank[1]  # the ranks run different numbers of real micro-batches (dummies pad)
    # the update is real (a wrong rank normalisation, e.g. grad_divisor=1, moves weights by ~1e-4 off) ...
    assert max_diff(ref["weights"], ref["init"]) > 1e-4
    # ... and 2 ranks on the split batch reproduce it to a few fp32 ulps (measured: <= 1e-8)
    assert max_diff(weights[0], ref["weights"]) <= 1e-7
    assert max_diff(weights[1], weights[0]) == 0.0
    for key in ("loss", "grad_norm", "entropy", "ratio_mean"):
        assert metrics[0][key] == pytest.approx(ref["metrics"][key], rel=1e-5, abs=0), key
        assert metrics[1][key] == metrics[0][key]
    assert metrics[0]["updates"] == 2 and metrics[0]["loss_tokens"] == n_tok
    if extra is not None:
        after, w_after, again, w_again = extra
        assert max_diff(w_again, w_after) <= 1e-7
        assert again["loss"] == pytest.approx(after["loss"], abs=1e-7) and again["lr"] == after["lr"]


class RecordingRollout:
    """Stands in for a rollout actor: keeps the weights a sync delivers."""

    def __init__(self):
        self.weights, self.version = None, 0

    def update_weights_from_object_store(self, weights: dict, version: int) -> dict:
        self.weights, self.version = weights, version
        return {"version": version, "bytes": sum(int(v.nbytes) for v in weights.values())}

    def received(self) -> tuple:
        return self.weights, self.version


def _bounded(fn, seconds: float):
    """fn() in a thread; fails the test (instead of hanging it) when it is not done in `seconds`."""
    import concurrent.futures

    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        return pool.submit(fn).result(timeout=seconds)
    except concurrent.futures.TimeoutError:
        pytest.fail(f"did not finish within {seconds:.0f} s: a collective with only some ranks taking part?")
    finally:
        pool.shutdown(wait=False)


@pytest.mark.slow
def test_two_rank_zero3_weight_sync_and_final_export(ray_session, tiny_model_path, tmp_path):
    """ZeRO-3 over 2 ranks: the weight export for a sync and the final HF export gather parameters, a
    collective; with only rank 0 called both hang. Driven exactly as driver.run
    does: the broadcaster gets every learner rank, Run.finish exports from every rank."""
    import sys
    from types import SimpleNamespace

    from actors.learner.learner import Learner
    from actors.weight_sync.coordinator import WeightSyncBroadcaster
    from core.config import WeightSyncConfig
    from driver.run import Run

    ray = ray_session
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # RecordingRollout travels by value
    cfg = learner_cfg(zero_stage=3, step_timeout_s=60.0)  # a gloo collective left waiting fails after 60 s
    port = rendezvous_port()
    ranks = [ray.remote(num_cpus=1)(Learner).remote(cfg, ON_POLICY, str(tiny_model_path), rank=r, world_size=2,
                                                    master_port=port) for r in range(2)]
    receiver = ray.remote(num_cpus=0)(RecordingRollout).remote()
    try:
        ray.get([a.weight_version.remote() for a in ranks], timeout=300)  # started, process group formed
        broadcaster = WeightSyncBroadcaster(WeightSyncConfig(timeout_s=90.0), ranks, [receiver])  # as Run._launch does
        stats = _bounded(lambda: broadcaster.sync(1), 120)
        weights, version = ray.get(receiver.received.remote(), timeout=60)
        full = ray.get([a.export_weights.remote() for a in ranks], timeout=120)[0]
        assert version == 1 and stats["bytes"] > 0 and weights.keys() == full.keys()
        assert "lm_head.weight" in weights and max_diff(weights, full) == 0.0
        assert [len(w) for w in ray.get([a.export_weights.remote(rank0_only=True) for a in ranks],
                                        timeout=120)][1] == 0  # ranks > 0 gather but ship nothing

        run = Run.__new__(Run)  # Run.finish with everything but the learners stubbed
        run.run_dir, run.started_at = tmp_path / "run", 0.0
        run.fleet = SimpleNamespace(version=1, call=lambda refs, timeout, what: ray.get(refs, timeout=timeout))
        run.run_dir.mkdir()
        run.cfg = SimpleNamespace(steps=1, data=SimpleNamespace(), tiny=SimpleNamespace(solution_end_line=False,
                                                                                      line_labels=False))
        run.handles = SimpleNamespace(learners=ranks)
        run.metrics = SimpleNamespace(close=lambda: None)
        run.prepared = SimpleNamespace(dataset_dir="unused", model_dir=str(tiny_model_path))
        import driver.run as run_module
        patched = {"plot_curves": lambda *a, **k: None, "summarize": lambda *a, **k: {}}
        saved = {k: getattr(run_module, k) for k in patched}
        try:
            for k, v in patched.items():
                setattr(run_module, k, v)
            summary = _bounded(run.finish, 120)
        finally:
            for k, v in saved.items():
                setattr(run_module, k, v)
        from safetensors.numpy import load_file
        exported = load_file(str(run.run_dir / "export" / "model.safetensors"))
        assert summary["export"] == str(run.run_dir / "export")
        assert max_diff(exported, {k: v for k, v in full.items() if k in exported}) == 0.0
        ray.get([a.shutdown.remote() for a in ranks], timeout=60)
    finally:
        for a in ranks + [receiver]:
            ray.kill(a)


JOIN_TAKEN_PORT = r'''
import datetime, functools, socket, sys
import torch.distributed as dist
import core.net
from actors.learner.process_group import join_process_group

held = socket.socket()
held.bind(("", 0))
held.listen()
taken = held.getsockname()[1]
picks = iter([taken])
real = core.net.rendezvous_port
core.net.rendezvous_port = lambda host="": next(picks, None) or real(host)
init = functools.partial(dist.init_process_group, backend="gloo", timeout=datetime.timedelta(seconds=30))
join_process_group(init, rank=0, world_size=1, master_addr="10.255.255.1", master_port=taken)
import os
print("joined", dist.get_world_size(), os.environ["MASTER_PORT"] != str(taken), os.environ["MASTER_ADDR"])
dist.destroy_process_group()
'''


def test_single_rank_picks_its_own_port_and_again_when_taken():
    """One learner rank needs no rendezvous with a peer: it picks its port itself (a port the driver picks
    while the actor starts can be taken by then on a busy machine) and picks again on EADDRINUSE. The first pick here
    is a port another socket listens on; the join succeeds on the second, on loopback (not the address given)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent.parent
    out = subprocess.run([sys.executable, "-c", JOIN_TAKEN_PORT], cwd=root, capture_output=True, text=True,
                         timeout=120, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "joined 1 True 127.0.0.1", out.stdout
    assert "was taken before the process group could listen" in out.stderr, out.stderr[-2000:]

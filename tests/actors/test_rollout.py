"""RolloutWorker on a real vLLM engine (CPU, tiny Qwen3, fp32): sampling contract, log-probs, pause/resume,
policy-version tagging across a weight update, the weight-update proof, and a clean shutdown.

One engine for the whole module (start ~20-30 s on 2 cores), driven from one event loop in a thread (as an
async Ray actor would); the last test shuts it down and checks processes and /dev/shm.
"""
from __future__ import annotations

import dataclasses
import os
import pickle
import time

import numpy as np
import pytest

from actors.rollout.engine_gate import WeightUpdateError
from actors.rollout.rollout_worker import RolloutTimeout, RolloutWorker
from actors.weight_sync.buckets import plan_buckets
from actors.weight_sync.object_store import with_output_layer, write_safetensors
from core.config import RolloutConfig, WeightSyncConfig

G, MAX_TOKENS = 4, 12


# ---- pure parts (no engine) ---------------------------------------------------------------------------
@pytest.mark.parametrize("sizes,bucket,expected", [
    ({"a": 5, "b": 5, "c": 20, "d": 1}, 10, [["a", "b"], ["c"], ["d"]]),
    ({"a": 3, "b": 3, "c": 3}, 100, [["a", "b", "c"]]),
    ({"a": 3, "b": 3, "c": 3}, 3, [["a"], ["b"], ["c"]]),
    ({}, 10, []),
])
def test_plan_buckets(sizes, bucket, expected):
    assert plan_buckets(sizes, bucket) == expected


def test_write_safetensors_roundtrip(tmp_path):
    from safetensors.numpy import load_file

    rng = np.random.default_rng(0)
    arrays = {"w": rng.random((3, 5), dtype=np.float32), "t": rng.random((4, 2)).T, "i": np.arange(7),
              "h": rng.random(6).astype(np.float16), "empty": np.zeros((0, 3), np.float32)}
    arrays["w"].setflags(write=False)  # arrays from the object store are read-only
    write_safetensors(tmp_path / "x.safetensors", arrays)
    back = load_file(str(tmp_path / "x.safetensors"))
    assert set(back) == set(arrays)
    for name, array in arrays.items():
        assert back[name].dtype == array.dtype and np.array_equal(back[name], array), name
    with pytest.raises(TypeError, match="complex"):
        write_safetensors(tmp_path / "bad.safetensors", {"c": np.zeros(2, np.complex64)})


def test_bf16_weights_travel_as_bf16(tmp_path):
    """The weight sync ships bf16 weights in 2 bytes per element, not widened to float32 (half the bytes):
    the learner's wire arrays survive pickling (Ray's object store) and are written as BF16, bit-exact."""
    import pickle

    import torch
    from safetensors.torch import load_file

    from actors.learner.checkpoint_io import to_numpy

    state = {"w": torch.randn(64, 32).to(torch.bfloat16), "b": torch.randn(5)}
    wire = to_numpy(state, widen=False)
    assert wire["w"].nbytes == 64 * 32 * 2 and wire["b"].dtype == np.float32
    buffers = []  # out-of-band buffers, as Ray serialises numpy arrays
    wire = pickle.loads(pickle.dumps(wire, protocol=5, buffer_callback=buffers.append), buffers=buffers)
    write_safetensors(tmp_path / "w.safetensors", wire)
    back = load_file(str(tmp_path / "w.safetensors"))
    assert back["w"].dtype == torch.bfloat16 and torch.equal(back["w"], state["w"])
    assert torch.equal(back["b"], state["b"])
    assert to_numpy(state)["w"].dtype == np.float32  # the default (inspection, tests) still widens


def test_with_output_layer_adds_lm_head_only_when_tied():
    embed = np.ones((4, 2), np.float32)
    assert with_output_layer({"model.embed_tokens.weight": embed}, tied=True)["lm_head.weight"] is embed
    assert "lm_head.weight" not in with_output_layer({"model.embed_tokens.weight": embed}, tied=False)
    own = np.zeros((4, 2), np.float32)
    assert with_output_layer({"model.embed_tokens.weight": embed, "lm_head.weight": own}, True)["lm_head.weight"] is own


def test_encode_prompt_fails_without_the_chat_module(monkeypatch):
    """No silent fallback: without core/chat.py the rollout would tokenize `prompt + "\\n"`, a format
    the learner never sees; encode_prompt must raise instead."""
    import sys

    from actors.rollout.rollout_worker import encode_prompt

    def tokenizer(text):  # would succeed: any fallback shows up as a return value
        return {"input_ids": [ord(c) for c in text]}

    monkeypatch.setitem(sys.modules, "core.chat", None)  # `import` raises ModuleNotFoundError
    with pytest.raises(ImportError):
        encode_prompt(tokenizer, "which one?")


def test_cpu_engines_run_vllms_sampler_helpers_eagerly():
    """With enforce_eager on CPU, vLLM's torch.compiled sampler helpers stay plain functions: on a fresh machine
    compiling them cost ~11 s at the first request (the default run's first evaluation). Checked in a fresh process,
    as an engine's own is (decoration happens when vLLM's modules are imported)."""
    import subprocess
    import sys

    script = (
        "import dataclasses, os\n"
        "from actors.rollout.engine_env import configure_cpu_env\n"
        "from core.config import RolloutConfig\n"
        "configure_cpu_env(dataclasses.replace(RolloutConfig(), enforce_eager=False))\n"
        "compiled_kept = os.environ.get('TORCHDYNAMO_DISABLE')\n"
        "configure_cpu_env(RolloutConfig())\n"
        "from vllm.v1.sample.ops.logprobs import batched_count_greater_than as ranks\n"
        "print('RESULT', compiled_kept, os.environ.get('TORCHDYNAMO_DISABLE'), "
        "hasattr(ranks, '_torchdynamo_orig_callable'))\n")
    env = {k: v for k, v in os.environ.items() if k != "TORCHDYNAMO_DISABLE"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    result = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert result == ["RESULT None 1 False"], proc.stdout[-2000:] + proc.stderr[-2000:]


# ---- the engine ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine(rollout_model_path, loop_thread, rh):
    """(worker, loop, snapshot before start). Shut down by test_shutdown_leaves_nothing (or here)."""
    before = rh.child_pids()
    # unconstrained sampling (the whole vocabulary), as for a chat model; the constrained path has its own test
    cfg = RolloutConfig(samples_per_prompt=G, max_response_tokens=MAX_TOKENS, max_num_seqs=64,
                        request_timeout_s=120.0, constrain_index=False)
    worker = RolloutWorker(cfg, rollout_model_path, dtype="float32", seed=0)
    yield worker, loop_thread, before
    loop_thread.run(worker.shutdown())


@pytest.fixture(scope="module")
def reference(rollout_model_path, rh):
    """transformers model holding the same weights as the engine (kept in step by the tests)."""
    return rh.hf_model(rollout_model_path)




@pytest.mark.slow
def test_generate_contract(engine, rh):
    worker, loop, _ = engine
    tasks = [rh.make_task(i) for i in range(3)]
    groups = loop.run(worker.generate(tasks))
    assert [g.task.prompt_id for g in groups] == [t.prompt_id for t in tasks]
    for task, group in zip(tasks, groups):
        assert len(group.rollouts) == G and group.policy_version == worker.policy_version() == 0
        prompt_ids = worker.encode_prompt(task.prompt)
        shared = pickle.loads(pickle.dumps(group))  # as Ray sends it: the prompt once per group
        assert all(r.prompt_token_ids is shared.rollouts[0].prompt_token_ids for r in shared.rollouts)
        for r in group.rollouts:
            assert r.prompt_token_ids == prompt_ids and r.prompt_id == task.prompt_id
            assert 1 <= len(r.response_token_ids) <= MAX_TOKENS
            assert len(r.behaviour_logprobs) == len(r.response_token_ids)
            assert all(isinstance(x, float) and x <= 0.0 for x in r.behaviour_logprobs)
            assert r.policy_version == 0 and r.timings["generate_s"] > 0
            decoded = worker.tokenizer.decode(r.response_token_ids, skip_special_tokens=True)
            # the prompt holds the answer prefix (no chat template); the response text has it back in front
            assert r.response_text.rstrip("\ufffd") == ("Judgment: " + decoded).rstrip("\ufffd")  # vLLM holds back a partial char
            assert r.allowed_token_ids is None
        assert len({tuple(r.response_token_ids) for r in group.rollouts}) > 1, "G samples are not distinct"


@pytest.mark.slow
def test_behaviour_logprobs_match_engine_and_transformers(engine, reference, rh):
    """Sampled tokens' behaviour log-probs (temperature 1) == prompt log-probs of the same tokens ==
    transformers' log-probs of the same tokens."""
    worker, loop, _ = engine
    groups = loop.run(worker.generate([rh.make_task(7)], temperature=1.0))
    for r in groups[0].rollouts:
        fixed = loop.run(worker.compute_logprobs(r.prompt_token_ids, r.response_token_ids))
        ref = rh.hf_logprobs(reference, r.prompt_token_ids, r.response_token_ids)
        assert abs(sum(fixed) - sum(r.behaviour_logprobs)) < 1e-4
        assert np.max(np.abs(np.array(fixed) - np.array(ref))) < 1e-4


@pytest.mark.slow
def test_learner_logprobs_match_engine_at_the_paper_temperature(engine, reference, rh):
    """At the paper's temperature 1.5 (not only at 1.0) the learner's scoring path (actors.learner.learner
    `_PolicyLogprobs` on packed, prefix-shared sequences, logits / temperature) reproduces the engine's
    behaviour log-probs of the sampled tokens: the PPO ratio is 1 on-policy."""
    import torch

    from actors.learner.policy_forward import _PolicyLogprobs
    from core.packing import pack_sequences, unpack_per_sequence
    from core.records import TrainSequence

    worker, loop, _ = engine
    temperature = 1.5
    groups = loop.run(worker.generate([rh.make_task(11), rh.make_task(12, words=3)], temperature=temperature))
    rollouts = [r for g in groups for r in g.rollouts]
    seqs = [TrainSequence(r.prompt_token_ids, r.response_token_ids, r.behaviour_logprobs, 0.0, r.policy_version)
            for r in rollouts]

    def learner_logprobs(temp: float) -> list:
        module, out = _PolicyLogprobs(reference, temp).eval(), [[] for _ in seqs]
        with torch.no_grad():
            for mb in pack_sequences(seqs, 4096):
                unpack_per_sequence(module(mb.input_ids, mb.position_ids, mb.attention_mask, mb.target_index,
                                           mb.target_ids)[0], mb, out)
        return out

    scaled, unscaled = learner_logprobs(temperature), learner_logprobs(1.0)
    behaviour = np.concatenate([r.behaviour_logprobs for r in rollouts])
    assert np.max(np.abs(np.concatenate(scaled) - behaviour)) < 1e-4
    assert np.max(np.abs(np.concatenate(unscaled) - behaviour)) > 1e-2  # the temperature does matter here


@pytest.mark.slow
def test_constrained_index_sampling_and_learner_normalisation(engine, reference, rh):
    """rollout.constrain_index: the response is exactly one valid index token (a complete answer, not a
    truncated one), and the engine's behaviour log-probs are normalised over the valid indices: the
    learner's `_PolicyLogprobs` with the same `allowed_ids` reproduces them (PPO ratio 1 on-policy), while
    the whole-vocabulary log-probs do not."""
    import dataclasses

    import torch

    from actors.learner.policy_forward import _PolicyLogprobs
    from core.packing import pack_sequences, unpack_per_sequence
    from core.records import TrainSequence

    worker, loop, _ = engine
    worker.cfg = dataclasses.replace(worker.cfg, constrain_index=True)
    try:
        groups = loop.run(worker.generate([rh.make_task(21), rh.make_task(22)], temperature=1.0))
    finally:
        worker.cfg = dataclasses.replace(worker.cfg, constrain_index=False)
    tok = worker.tokenizer
    allowed = [tok(str(i), add_special_tokens=False)["input_ids"][0] for i in range(2)]
    rollouts = [r for g in groups for r in g.rollouts]
    assert all(r.allowed_token_ids == allowed and len(r.response_token_ids) == 1 for r in rollouts)
    assert all(r.response_token_ids[0] in allowed and not r.truncated for r in rollouts)
    assert {r.response_text for r in rollouts} <= {"Judgment: 0", "Judgment: 1"}
    seqs = [TrainSequence(r.prompt_token_ids, r.response_token_ids, r.behaviour_logprobs, 0.0, r.policy_version,
                          allowed_token_ids=r.allowed_token_ids) for r in rollouts]

    def learner_logprobs(constrained: bool) -> np.ndarray:
        module, out = _PolicyLogprobs(reference).eval(), [[] for _ in seqs]
        with torch.no_grad():
            for mb in pack_sequences(seqs, 4096):
                unpack_per_sequence(module(mb.input_ids, mb.position_ids, mb.attention_mask, mb.target_index,
                                           mb.target_ids, mb.allowed_ids if constrained else None)[0], mb, out)
        return np.concatenate(out)

    behaviour = np.concatenate([r.behaviour_logprobs for r in rollouts])
    assert np.max(np.abs(learner_logprobs(True) - behaviour)) < 1e-4
    assert np.max(np.abs(learner_logprobs(False) - behaviour)) > 1e-2


@pytest.mark.slow
def test_sample_index_only_points_after_a_greedy_solution(engine, reference, rh, monkeypatch):
    """tiny.sample_index_only: one greedy solution up to the pointer mark, then G index tokens sampled
    among 0..N-1 after it. Every rollout's prompt is the prompt plus that solution (one shared list), its
    response the index token, its text the solution and the index; the behaviour log-probs are the learner's
    constrained ones after that prompt. A solution that never writes the mark gives G empty responses.
    (The untrained model never writes `#`: the mark is set to a token its greedy solution does write.)"""
    import torch

    import tiny_recipe.pick_point as pick_point_module
    from actors.learner.policy_forward import _PolicyLogprobs
    from core.packing import pack_sequences, unpack_per_sequence
    from core.chat import full_response
    from core.records import TrainSequence
    from tiny_recipe.solve_point import SolveThenPoint

    worker, loop, _ = engine
    tok = worker.tokenizer

    def first_printable(ids: list):  # a printable token the greedy text writes, not written before it
        return next((i for i in range(len(ids)) if tok.decode(ids[i:i + 1]).strip().isascii()
                     and tok.decode(ids[i:i + 1]).strip() and tok.decode(ids[i:i + 1]) not in tok.decode(ids[:i])),
                    None)

    candidates = [rh.make_task(i, words=w) for i in range(31, 61) for w in (1, 2)]
    found = [(g.task, g.rollouts[0]) for g in loop.run(worker.generate(candidates, n=1, temperature=0.0))
             if first_printable(g.rollouts[0].response_token_ids) is not None]
    assert found, "no greedy response of the untrained model writes a printable token"
    task, greedy = found[0]
    ids = greedy.response_token_ids
    cut = first_printable(ids)
    mark = tok.decode(ids[cut:cut + 1])
    monkeypatch.setattr(pick_point_module, "POINTER_MARK", mark)
    monkeypatch.setattr(worker, "response_form", SolveThenPoint())  # as driver.models.registry hands it
    group = loop.run(worker.generate([task], temperature=1.0))[0]
    monkeypatch.setattr(pick_point_module, "POINTER_MARK", "\u00a7never")
    unpointed = loop.run(worker.generate([task], temperature=1.0))[0]
    prompt = worker.encode_prompt(task.prompt)
    allowed = [tok(str(i), add_special_tokens=False)["input_ids"][0] for i in range(2)]
    solution = group.rollouts[0].prompt_token_ids[len(prompt):]
    assert len(group.rollouts) == G and group.rollouts[0].prompt_token_ids[:len(prompt)] == prompt
    assert tok.decode(solution).endswith(mark) and solution == greedy.response_token_ids[:len(solution)]
    assert all(r.prompt_token_ids is group.rollouts[0].prompt_token_ids for r in group.rollouts)
    assert all(len(r.response_token_ids) == 1 and r.response_token_ids[0] in allowed and not r.truncated
               and r.allowed_token_ids == allowed for r in group.rollouts)
    assert {r.response_text for r in group.rollouts} <= {full_response(tok, tok.decode(solution + [a]))
                                                          for a in allowed}
    seqs = [TrainSequence(r.prompt_token_ids, r.response_token_ids, r.behaviour_logprobs, 0.0, r.policy_version,
                          allowed_token_ids=r.allowed_token_ids) for r in group.rollouts]
    module, out = _PolicyLogprobs(reference).eval(), [[] for _ in seqs]
    with torch.no_grad():
        for mb in pack_sequences(seqs, 4096):
            unpack_per_sequence(module(mb.input_ids, mb.position_ids, mb.attention_mask, mb.target_index,
                                       mb.target_ids, mb.allowed_ids)[0], mb, out)
    behaviour = np.concatenate([r.behaviour_logprobs for r in group.rollouts])
    assert np.max(np.abs(np.concatenate(out) - behaviour)) < 1e-4
    assert len(unpointed.rollouts) == G
    assert all(r.response_token_ids == [] and r.behaviour_logprobs == [] for r in unpointed.rollouts)
    unpointed_solution = unpointed.rollouts[0].prompt_token_ids[len(prompt):]
    assert unpointed_solution == ids[:len(unpointed_solution)] and len(unpointed_solution) >= MAX_TOKENS - 1
    assert unpointed.rollouts[0].response_text == full_response(tok, tok.decode(unpointed_solution))
    assert len(solution) == cut + 1


def _task_of(rh, i: int, num_candidates: int):
    """rh.make_task(i) with `num_candidates` candidates (the first correct)."""
    import dataclasses

    task = rh.make_task(i)
    candidates = tuple(f"{task.problem} = {int(task.reference) + k}" for k in range(num_candidates))
    body = "\n".join(f"Solution {k}: {c}" for k, c in enumerate(candidates))
    return dataclasses.replace(task, candidates=candidates, labels=(1.0,) + (0.0,) * (num_candidates - 1),
                               candidate_answers=tuple(str(int(task.reference) + k) for k in range(num_candidates)),
                               prompt=f"Problem: what is {task.problem}?\n{body}\nWhich solution is correct?")


@pytest.mark.slow
@pytest.mark.parametrize("budget,num_candidates", [(6, 2), (0, 12)])
def test_forced_judgment_ends_every_response_in_a_judgment(engine, reference, rh, monkeypatch, budget,
                                                          num_candidates):
    """rollout.response_form.name=forced_judgment (actors/rollout/forced_judgment.py) on a model with a chat template:
    every response parses to a valid index; a forced one is the reasoning, the prefix (loss 0, log-prob 0) and index
    tokens sampled among each trie level's tokens (two-token indices 10 and 11 and the end token after `1` with 12
    candidates); the learner's log-probs of the trained tokens, normalised per position as recorded, equal the
    engine's."""
    import torch

    from actors.rollout.forced_judgment import ForcedJudgment
    from actors.learner.policy_forward import _PolicyLogprobs
    from core.packing import pack_sequences, unpack_per_sequence
    from core.algo.genselect import parse_judgment
    from core.records import TrainSequence

    worker, loop, _ = engine
    tok = worker.tokenizer
    monkeypatch.setattr(tok, "chat_template", "{% for m in messages %}{{ m['content'] }}{% endfor %}\nAnswer:\n",
                        raising=False)
    monkeypatch.setattr(worker, "response_form", ForcedJudgment(budget))
    tasks = [_task_of(rh, 70 + i, num_candidates) for i in range(3)]
    groups = loop.run(worker.generate(tasks, temperature=1.0))
    rollouts = [r for g in groups for r in g.rollouts]
    assert all(parse_judgment(r.response_text, num_candidates).index is not None for r in rollouts)
    forced = [r for r in rollouts if r.forced]
    assert forced and all(g.extras["forced_judgments"] == sum(r.forced for r in g.rollouts) for g in groups)
    for r in forced:  # [reasoning: trained] [newline and prefix: loss 0] [index: trained, constrained]
        written = [i for i, m in enumerate(r.loss_mask) if m == 0]
        start, end = written[0], written[-1] + 1
        assert written == list(range(start, end)) and not r.truncated and len(r.response_token_ids) <= budget + 8
        assert tok.decode(r.response_token_ids[start:end]).lstrip("\n") == "Judgment: "
        assert r.behaviour_logprobs[start:end] == [0.0] * (end - start)
        assert r.allowed_ids_by_token[:end] == [None] * end and None not in r.allowed_ids_by_token[end:]
        assert 1 <= len(r.response_token_ids) - end <= 3
    if num_candidates > 10:  # two-token indices: the first digit `1` is followed by a second level
        one = tok("1", add_special_tokens=False)["input_ids"]
        after_one = [r for r in forced if r.response_token_ids[-2:-1] == one and r.allowed_ids_by_token[-2] is not None]
        assert all(len(r.allowed_ids_by_token[-1]) == 3 for r in after_one)  # `0`, `1`, or the end token
    seqs = [TrainSequence(r.prompt_token_ids, r.response_token_ids, r.behaviour_logprobs, 0.0, r.policy_version,
                          loss_mask=r.loss_mask, allowed_ids_by_token=r.allowed_ids_by_token) for r in rollouts]
    module, out = _PolicyLogprobs(reference).eval(), [[] for _ in seqs]
    with torch.no_grad():
        for mb in pack_sequences(seqs, 4096):
            unpack_per_sequence(module(mb.input_ids, mb.position_ids, mb.attention_mask, mb.target_index,
                                       mb.target_ids, mb.allowed_ids, mb.free_targets)[0], mb, out)
    for seq, learner in zip(seqs, out):
        trained = [i for i, m in enumerate(seq.token_mask) if m]
        assert np.max(np.abs(np.array(learner)[trained] - np.array(seq.behaviour_logprobs)[trained]),
                      initial=0.0) < 1e-4


@pytest.mark.slow
def test_pick_then_point_samples_a_pick_and_a_pointer_around_a_greedy_solution(engine, reference, rh, monkeypatch):
    """A pick-then-point model (tiny_recipe/pick_point.py): G picks sampled among 0..N-1 after the prompt, then per distinct
    pick the problem's head and a greedy solution up to the pointer mark, then one index after it per rollout. The
    response is [g] + head + solution + [k] with a loss mask on g and k only; the behaviour log-probs there are the
    learner's constrained ones, 0 elsewhere. A solution that never writes the mark ends its rollouts without a pointer.
    (The untrained model never writes `#`: the mark is set to a token one of its greedy solutions does write.)"""
    import torch

    import tiny_recipe.pick_point as pick_point_module
    from tiny_recipe.pick_point import PickThenPoint
    from actors.learner.policy_forward import _PolicyLogprobs
    from core.packing import pack_sequences, unpack_per_sequence
    from core.chat import PICK_MARK
    from tiny_recipe.chat import pick_point_head
    from core.records import TrainSequence

    worker, loop, _ = engine
    tok = worker.tokenizer
    task = rh.make_task(7)
    prompt = worker.encode_prompt(task.prompt)
    head = tok(pick_point_head(task.problem), add_special_tokens=False)["input_ids"]
    allowed = [tok(str(i), add_special_tokens=False)["input_ids"][0] for i in range(2)]
    monkeypatch.setattr(worker, "response_form", PickThenPoint())  # as driver.models.registry hands it
    monkeypatch.setattr(pick_point_module, "POINTER_MARK", "\u00a7never")
    unpointed = loop.run(worker.generate([task], temperature=1.0, max_tokens=64))[0]
    solutions = {}
    for r in unpointed.rollouts:
        g, body = r.response_token_ids[0], r.response_token_ids[1 + len(head):]
        assert g in allowed and r.response_token_ids[1:1 + len(head)] == head and r.prompt_token_ids == prompt
        assert r.loss_mask == [1] + [0] * (len(head) + len(body)) and r.behaviour_logprobs[1:] == [0.0] * len(head + body)
        assert r.anchor_mask == [0] * len(r.response_token_ids)  # a solution without its pointer is not reinforced
        assert solutions.setdefault(g, body) == body and 0 < len(body) <= 64 - 2 - len(head)  # greedy: one per pick
        assert r.response_text == PICK_MARK + tok.decode(r.response_token_ids)
    g0, body = next(iter(solutions.items()))
    cut = next(i for i in range(len(body)) if tok.decode(body[i:i + 1]).strip().isascii()
               and tok.decode(body[i:i + 1]).strip() and tok.decode(body[i:i + 1]) not in tok.decode(body[:i]))
    monkeypatch.setattr(pick_point_module, "POINTER_MARK", tok.decode(body[cut:cut + 1]))
    group = loop.run(worker.generate([task], n=16, temperature=1.0, max_tokens=64))[0]  # g0 among 16 picks
    pointed = [r for r in group.rollouts if len(r.loss_mask) > 1 and r.loss_mask[-1] == 1]
    assert len(group.rollouts) == 16 and all(r.prompt_token_ids is group.rollouts[0].prompt_token_ids
                                             for r in group.rollouts)
    assert {r.response_token_ids[0] for r in group.rollouts} == set(allowed)
    assert all(r in pointed and r.response_token_ids[1 + len(head):-1] == body[:cut + 1]
               for r in group.rollouts if r.response_token_ids[0] == g0)
    assert all(r.response_token_ids[-1] in allowed and sum(r.loss_mask) == 2 and not r.truncated for r in pointed)
    # the anchor reads the model's own solution up to its pointer mark, not the head, the pick or the pointer
    assert all(r.anchor_mask == [0] * (1 + len(head)) + [1] * (len(r.response_token_ids) - 2 - len(head)) + [0]
               for r in pointed)
    seqs = [TrainSequence(r.prompt_token_ids, r.response_token_ids, r.behaviour_logprobs, 0.0, r.policy_version,
                          allowed_token_ids=r.allowed_token_ids, loss_mask=r.loss_mask) for r in group.rollouts]
    module, out = _PolicyLogprobs(reference).eval(), [[] for _ in seqs]
    with torch.no_grad():
        for mb in pack_sequences(seqs, 4096):
            unpack_per_sequence(module(mb.input_ids, mb.position_ids, mb.attention_mask, mb.target_index,
                                       mb.target_ids, mb.allowed_ids)[0], mb, out)
    for r, learner in zip(group.rollouts, out):
        trained = [i for i, m in enumerate(r.loss_mask) if m]
        assert np.max(np.abs(np.asarray(learner)[trained] - np.asarray(r.behaviour_logprobs)[trained])) < 1e-4


@pytest.mark.slow
def test_serving_a_pick_then_point_model_answers_through_the_same_rollout(engine, rh, monkeypatch):
    """The selector server reads a pick-then-point model's groups through `pick_then_point` (chosen by the tokenizer's
    template, as in training): each judgment is `Pick: #g`, the problem's head and the greedy solution; one that never
    reaches the pointer mark is counted unparsed (no index), not guessed."""
    import json

    import tiny_recipe.pick_point as pick_point_module
    from tiny_recipe.pick_point import PickThenPoint
    from actors.serving.select_request import SelectorSettings
    from actors.serving.selector_server import SelectorServer
    from core.chat import PICK_MARK
    from tiny_recipe.chat import pick_point_head

    worker, loop, _ = engine
    task = rh.make_task(9)
    monkeypatch.setattr(worker, "response_form", PickThenPoint())  # as driver.models.registry hands it
    monkeypatch.setattr(pick_point_module, "POINTER_MARK", "\u00a7never")
    server = SelectorServer(SelectorSettings(model="m", rollout=None, window=2, max_response_tokens=48,
                                             policy_version=worker.version), worker=worker)
    body = {"problem": task.problem, "candidates": list(task.candidates), "samples": 3}
    try:
        out = loop.run(server._select(json.dumps(body).encode()))
    finally:
        server.worker = None  # the module's shared engine: a collected server shuts its worker down
    assert len(out["judgments"]) == 3 and out["unparsed"] == 3 and out["parsed"] == [None] * 3
    assert all(j.startswith(PICK_MARK) and pick_point_head(task.problem) in j for j in out["judgments"])
    assert out["policy_version"] == worker.version


@pytest.mark.slow
def test_index_logprobs_are_the_constrained_distribution(engine, reference, rh):
    """`index_logprobs`: per task, the log-prob of every index 0..N-1 under the constrained one-token
    distribution at temperature 1, equal to transformers' log-softmax over the index tokens at the prompt's
    end; refused for a worker that answers in free text."""
    import dataclasses

    import torch

    worker, loop, _ = engine
    tasks = [rh.make_task(31), rh.make_task(32)]
    with pytest.raises(ValueError, match="constrain_index"):
        loop.run(worker.index_logprobs(tasks))
    worker.cfg = dataclasses.replace(worker.cfg, constrain_index=True)
    try:
        got = loop.run(worker.index_logprobs(tasks))
    finally:
        worker.cfg = dataclasses.replace(worker.cfg, constrain_index=False)
    tok = worker.tokenizer
    assert all(version == worker.version for _, version in got)
    for task, (row, _) in zip(tasks, got):
        allowed = [tok(str(i), add_special_tokens=False)["input_ids"][0] for i in range(task.num_candidates)]
        with torch.no_grad():
            logits = reference(torch.tensor([worker.task_prompt_ids(task)])).logits[0, -1]
        want = torch.log_softmax(logits[allowed].double(), -1).numpy()
        assert len(row) == task.num_candidates
        assert np.max(np.abs(np.array(row) - want)) < 1e-4


@pytest.mark.slow
def test_truncation_sets_finish_reason(engine, rh):
    worker, loop, _ = engine
    eos = worker.tokenizer.eos_token_id
    groups = loop.run(worker.generate([rh.make_task(i) for i in range(2)], max_tokens=3))
    for r in (r for g in groups for r in g.rollouts):
        assert r.finish_reason in ("stop", "length")
        if r.finish_reason == "length":
            assert len(r.response_token_ids) == 3 and r.truncated
        else:
            assert len(r.response_token_ids) <= 3 and r.response_token_ids[-1] == eos


@pytest.mark.slow
def test_prefix_cached_across_calls(engine, rh):
    """The second request for the same prompt reuses its cached prefix (one prefill per prompt)."""
    worker, loop, _ = engine
    task = rh.make_task(11, words=4)
    loop.run(worker.generate([task], max_tokens=2))
    again = loop.run(worker.generate([task], max_tokens=2))[0]
    assert again.extras["cached_prompt_tokens"] >= 32  # whole KV blocks (CPU_BLOCK_SIZE) of the prompt


@pytest.mark.slow
def test_many_requests_in_flight(engine, rh):
    worker, loop, _ = engine
    tasks = [rh.make_task(100 + i) for i in range(16)]
    future = loop.submit(worker.generate(tasks, max_tokens=6))
    peak = 0
    while not future.done():
        peak = max(peak, loop.run(worker.health())["in_flight"])
        time.sleep(0.01)
    groups = future.result()
    assert len(groups) == 16 and all(len(g.rollouts) == G for g in groups)
    assert peak > 1, "requests were not in flight concurrently"


@pytest.mark.slow
def test_generate_waits_while_paused(engine, rh):
    worker, loop, _ = engine
    loop.run(worker.pause())
    future = loop.submit(worker.generate([rh.make_task(3)], max_tokens=4))
    time.sleep(1.0)
    health = loop.run(worker.health())
    assert not future.done() and health["paused"] and health["in_flight"] == 0
    loop.run(worker.resume())
    groups = future.result(120)
    assert len(groups[0].rollouts) == G and groups[0].policy_version == worker.policy_version()


@pytest.mark.slow
def test_update_proof_and_version_tagging(engine, reference, rh):
    """THE proof the weights arrive: for a fixed prompt+completion the engine's log-probs match
    transformers with the NEW weights after the update (fp32: < 1e-5) and differ clearly before it.
    Requests issued before the update finish on the old weights with the old version; later ones
    carry the new version. Bucketed (1 MB buckets: layers straddle files), no files left behind."""
    worker, loop, _ = engine
    task = rh.make_task(21)
    fixed = loop.run(worker.generate([task], max_tokens=8))[0].rollouts[0]
    prompt, response = fixed.prompt_token_ids, fixed.response_token_ids
    old_ref = rh.hf_logprobs(reference, prompt, response)
    engine_before = loop.run(worker.compute_logprobs(prompt, response))
    assert np.max(np.abs(np.subtract(engine_before, old_ref))) < 1e-5

    new_state = rh.perturbed_state(reference, seed=1)
    new_ref = rh.hf_logprobs(reference, prompt, response)
    before_diff = float(np.max(np.abs(np.subtract(engine_before, new_ref))))
    assert before_diff > 0.05, "perturbation too small to tell old from new weights"

    old_version = worker.policy_version()
    worker.sync_cfg = WeightSyncConfig(transport={"name": "object_store", "bucket_mb": 1})
    in_flight = loop.submit(worker.generate([rh.make_task(30 + i) for i in range(6)], max_tokens=MAX_TOKENS))
    while loop.run(worker.health())["in_flight"] == 0 and not in_flight.done():
        time.sleep(0.005)
    shm_before = rh.shm_listing()
    export = {k: v for k, v in new_state.items() if k != "lm_head.weight"}  # the tied output layer is re-added
    stats = loop.run(worker.update_weights_from_object_store(export, old_version + 1))
    early = in_flight.result(120)
    late = loop.run(worker.generate([rh.make_task(40)], max_tokens=MAX_TOKENS))

    engine_after = loop.run(worker.compute_logprobs(prompt, response))
    after_diff = float(np.max(np.abs(np.subtract(engine_after, new_ref))))
    print(f"\nweight-sync proof: max |logprob diff| vs new weights before={before_diff:.4f} "
          f"after={after_diff:.2e}; stats={stats}")
    assert after_diff < 1e-5
    assert stats["buckets"] > 5 and stats["version"] == old_version + 1 == worker.policy_version()
    assert stats["write_s"] > 0 and stats["engine_load_s"] > 0
    assert not {n for n in rh.shm_listing() - shm_before if n.startswith("genselect-")}
    assert all(r.policy_version == old_version for g in early for r in g.rollouts)
    assert all(r.policy_version == old_version + 1 for r in late[0].rollouts)
    # the early requests ran entirely on the old weights: their behaviour log-probs are the old model's
    old_model = rh.hf_model(worker.model_path)
    for r in early[0].rollouts[:2]:
        old = rh.hf_logprobs(old_model, r.prompt_token_ids, r.response_token_ids)
        assert np.max(np.abs(np.subtract(r.behaviour_logprobs, old))) < 1e-4
    for r in late[0].rollouts[:2]:
        new = rh.hf_logprobs(reference, r.prompt_token_ids, r.response_token_ids)
        assert np.max(np.abs(np.subtract(r.behaviour_logprobs, new))) < 1e-4


@pytest.mark.slow
def test_extension_loads_a_file_outside_a_session(engine, reference, rh, tmp_path):
    """WeightReceiver.load_weights_from_file without a session = the worker's own reload_weights."""
    worker, loop, _ = engine
    fixed = loop.run(worker.generate([rh.make_task(50)], max_tokens=6))[0].rollouts[0]
    state = rh.perturbed_state(reference, seed=5)
    path = tmp_path / "all.safetensors"
    write_safetensors(path, state)
    before = loop.run(worker.weights_checksum())
    result = loop.run(worker._rpc("load_weights_from_file", str(path)))
    assert result["tensors"] == len(state) and loop.run(worker.weights_checksum()) != before
    loop.run(worker.engine.reset_prefix_cache())
    engine_lp = loop.run(worker.compute_logprobs(fixed.prompt_token_ids, fixed.response_token_ids))
    ref = rh.hf_logprobs(reference, fixed.prompt_token_ids, fixed.response_token_ids)
    assert np.max(np.abs(np.subtract(engine_lp, ref))) < 1e-5


@pytest.mark.slow
def test_failed_update_cleans_up_and_blocks_generation(engine, reference, rh, monkeypatch):
    """A failure while loading deletes the bucket files, marks the engine inconsistent (generate
    refuses), keeps the version; the next good update recovers."""
    worker, loop, _ = engine
    version = worker.policy_version()
    state = {k: v.detach().numpy().copy() for k, v in reference.state_dict().items()}
    real_rpc, seen = worker._rpc, []

    async def failing_rpc(method, *args):
        if method == "load_weights_from_file":
            seen.append(args[0])
            assert os.path.exists(args[0])
            raise RuntimeError("injected failure")
        return await real_rpc(method, *args)

    monkeypatch.setattr(worker, "_rpc", failing_rpc)
    with pytest.raises(RuntimeError, match="injected"):
        loop.run(worker.update_weights_from_object_store(state, version + 1))
    monkeypatch.setattr(worker, "_rpc", real_rpc)
    assert seen and not any(os.path.exists(p) for p in seen)
    assert not os.path.exists(os.path.dirname(seen[0]))
    health = loop.run(worker.health())
    assert not health["ok"] and health["update_failures"] == 1 and worker.policy_version() == version
    with pytest.raises(WeightUpdateError):
        loop.run(worker.generate([rh.make_task(1)], max_tokens=2))
    loop.run(worker.update_weights_from_object_store(state, version + 1))
    assert loop.run(worker.health())["ok"]
    assert loop.run(worker.generate([rh.make_task(1)], max_tokens=2))[0].policy_version == version + 1


@pytest.mark.slow
def test_timeout_aborts_generate(engine, rh):
    worker, loop, _ = engine
    cfg = worker.cfg
    worker.cfg = RolloutConfig(samples_per_prompt=G, max_response_tokens=MAX_TOKENS, request_timeout_s=0.05)
    try:
        loop.run(worker.pause())
        with pytest.raises(RolloutTimeout):
            loop.run(worker.generate([rh.make_task(2)]))
        loop.run(worker.resume())
    finally:
        worker.cfg = cfg
    assert loop.run(worker.health())["in_flight"] == 0
    assert len(loop.run(worker.generate([rh.make_task(2)], max_tokens=2))[0].rollouts) == G


@pytest.mark.slow
def test_keep_mode_updates_without_draining_and_responses_continue_on_the_new_weights(engine, reference, rh):
    """`rollout.sync_mode: keep` (abort-and-resume, as vLLM 0.32's pause_generation(mode="keep")
    offers it): a weight update in the middle of long responses does not wait for them. They are frozen, the
    weights loaded, and they finish under the new weights with their prefix recomputed: every token's behaviour
    log-prob is the old model's up to some token and the new model's after it, and at least one response has
    both parts. The responses keep the version they were admitted under (staleness counts from there)."""
    import copy

    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    worker, loop, _ = engine
    cfg = worker.cfg
    worker.cfg = dataclasses.replace(cfg, sync_mode="keep")
    old_model = copy.deepcopy(reference)  # the weights the engine holds now
    old_version, kept_before = worker.policy_version(), loop.run(worker.health())["kept_requests"]
    # ignore_eos: 600 tokens each (min_tokens would mask EOS out of the processed log-probs the engine reports)
    params = SamplingParams(n=2, temperature=1.0, max_tokens=600, ignore_eos=True, logprobs=0,
                            output_kind=RequestOutputKind.FINAL_ONLY)
    prompt = worker.task_prompt_ids(rh.make_task(50))
    try:
        running = loop.submit(worker.run_request(prompt, params))
        while loop.run(worker.health())["in_flight"] == 0:
            time.sleep(0.005)
        time.sleep(0.3)  # some tokens under the old weights
        new_state = rh.perturbed_state(reference, seed=5)
        stats = loop.run(worker.update_weights_from_object_store(new_state, old_version + 1))
        unfinished_at_update = not running.done()
        final, version, _, _ = running.result(300)
    finally:
        worker.cfg = cfg
    assert unfinished_at_update, f"the update waited for the responses: {stats}"
    assert version == old_version and worker.policy_version() == old_version + 1
    assert loop.run(worker.health())["kept_requests"] == kept_before + 1
    split_responses = 0
    for c in final.outputs:
        tokens = list(c.token_ids)
        got = np.array([c.logprobs[i][t].logprob for i, t in enumerate(tokens)])
        old = np.array(rh.hf_logprobs(old_model, prompt, tokens))
        new = np.array(rh.hf_logprobs(reference, prompt, tokens))
        is_old, is_new = np.abs(got - old) < 1e-4, np.abs(got - new) < 1e-4
        assert len(tokens) == 600 and np.all(is_old | is_new)
        first_new = int(np.argmin(is_old)) if not is_old.all() else len(tokens)
        assert np.all(is_new[first_new:]), "a token after the switch was sampled by the old weights"
        split_responses += 0 < first_new < len(tokens)
    assert split_responses >= 1


@pytest.mark.slow
def test_timeout_leaves_the_engine_idle_before_an_update(engine, reference, rh):
    """On the real engine: a generate call that times out, and one the driver aborts, leave no
    request in the engine (its output processor has none unfinished) by the time they raise, so the next weight
    update's drain has nothing to wait for."""
    import asyncio

    from actors.rollout.rollout_worker import RolloutAborted

    worker, loop, _ = engine
    processor = worker.engine.output_processor
    cfg = worker.cfg
    worker.cfg = RolloutConfig(samples_per_prompt=G, max_response_tokens=2000, max_num_seqs=64,
                               request_timeout_s=0.5, constrain_index=False)
    tasks = [rh.make_task(i) for i in range(16)]
    try:
        with pytest.raises(RolloutTimeout):
            loop.run(worker.generate(tasks))
        assert processor.get_num_unfinished_requests() == 0
        assert loop.run(worker.health())["in_flight"] == 0

        worker.cfg = dataclasses.replace(worker.cfg, request_timeout_s=600.0)
        call = loop.submit(worker.generate(tasks, call_id="driver-gave-up"))
        for _ in range(500):
            if processor.get_num_unfinished_requests() > 0:
                break
            time.sleep(0.01)
        answer = loop.run(worker.abort("driver-gave-up"))
        assert answer == {"aborted": 1, "in_flight": 0}
        with pytest.raises(RolloutAborted):
            call.result(60)
        assert processor.get_num_unfinished_requests() == 0
    finally:
        worker.cfg = cfg
    state = {k: v.detach().numpy().copy() for k, v in reference.state_dict().items()}
    stats = loop.run(worker.update_weights_from_object_store(state, worker.policy_version()))
    assert stats["drain_s"] < 1.0, stats  # nothing left to drain
    assert loop.run(worker.health())["ok"]


@pytest.mark.slow
def test_shutdown_leaves_nothing(engine, rh):
    """Shutdown (twice: idempotent) ends the engine's processes and frees their /dev/shm files."""
    import psutil

    worker, loop, before = engine
    procs = rh.engine_processes(before)
    assert procs, "no engine processes found"
    shm = rh.shm_paths_of(procs)
    loop.run(worker.shutdown())
    loop.run(worker.shutdown())
    gone, alive = psutil.wait_procs(procs, timeout=30)
    assert not alive, f"engine processes still alive: {alive}"
    assert not [p for p in shm if os.path.exists(p)], "engine /dev/shm files leaked"
    assert not loop.run(worker.health())["ok"]
    with pytest.raises(RuntimeError, match="shut down"):
        loop.run(worker.generate([rh.make_task(0)]))
    print(f"\nshutdown: {len(procs)} engine processes ended, {len(shm)} /dev/shm files freed")


# ---- engine processes die with their owner (actors/rollout/vllm_plugin.py) ------------------------------------
def test_parent_watch_is_off_without_an_owner_and_in_the_owner(monkeypatch):
    import threading

    from actors.rollout import vllm_plugin

    def watchers():
        return [t for t in threading.enumerate() if t.name == "genselect-parent-watch"]

    before = len(watchers())
    monkeypatch.delenv(vllm_plugin.OWNER_ENV, raising=False)
    vllm_plugin.die_with_parent()
    monkeypatch.setenv(vllm_plugin.OWNER_ENV, str(os.getpid()))
    vllm_plugin.die_with_parent()
    assert len(watchers()) == before


@pytest.mark.slow
def test_engine_processes_die_when_their_owner_is_sigkilled(rollout_model_path):
    """A rollout worker's process is SIGKILLed (as `ray.kill` or a killed driver tree does): its vLLM engine
    core and worker, which vLLM itself would leave running, exit within seconds."""
    import subprocess
    import sys

    import psutil

    script = (
        "import os, signal, psutil\n"
        "from actors.rollout.rollout_worker import RolloutWorker\n"
        "from core.config import RolloutConfig\n"
        "cfg = RolloutConfig(samples_per_prompt=2, max_response_tokens=4, max_num_seqs=8)\n"
        f"worker = RolloutWorker(cfg, {rollout_model_path!r}, dtype='float32')\n"
        "print('PIDS', *[c.pid for c in psutil.Process().children(recursive=True)], flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("PIDS")]
    assert proc.returncode == -9 and lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    procs = []
    for pid in map(int, lines[0].split()[1:]):
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    names = [p.name() for p in procs if p.is_running()]
    gone, alive = psutil.wait_procs(procs, timeout=30)
    assert not alive, f"engine processes outlived their owner: {alive}"
    print(f"\n{len(procs)} engine processes ({names}) exited after their owner was SIGKILLed")

"""Stages 2-4 of a step, between the verifier and the learner: the staleness and dynamic-sampling filter,
overlong shaping and advantages, token-balanced shards and the global token count."""
import pytest

from core.config import AlgorithmConfig
from core.records import Rollout, RolloutGroup, SelectionTask
from driver.step import dynamic_sampling, filter_groups, shape_and_advantage, shard


TASK = SelectionTask("p/0", "p", "math", "?", ("a", "b"), ("1", "2"), (1.0, 0.0), "1", "...")


def _group(rewards, lengths=None, finish=None, version=0):
    lengths = lengths or [4] * len(rewards)
    finish = finish or ["stop"] * len(rewards)
    # distinct responses (identical ones would be merged by `shard`: its own test below)
    rollouts = [Rollout("p/0", [1, 2, 3], list(range(j, j + n)), [-0.5] * n, "Judgment: 0", version, f, reward=r)
                for j, (r, n, f) in enumerate(zip(rewards, lengths, finish))]
    return RolloutGroup(TASK, rollouts, version)


def build_batch(groups, algo, max_response_tokens, num_ranks):
    """Stages 3 and 4, in the order driver/train.py calls them."""
    return shard(shape_and_advantage(groups, algo, max_response_tokens), num_ranks)


def test_dynamic_sampling_keeps_informative_groups_and_names_reasons():
    groups = [_group([1, 0, 1, 0]), _group([1, 1, 1, 1]), _group([0, 0, 0, 0])]
    kept, filtered, reasons = dynamic_sampling(groups, enabled=True)
    assert kept == groups[:1] and filtered == groups[1:]
    assert sum(reasons.values()) == 3 and reasons["kept"] == 1
    kept_all, none, _ = dynamic_sampling(groups, enabled=False)
    assert kept_all == groups and none == []


def test_filter_drops_stale_groups_before_dynamic_sampling():
    fresh, flat, old = _group([1, 0], version=2), _group([1, 1], version=2), _group([1, 0], version=0)
    verdict = filter_groups([fresh, flat, old], version=2, max_staleness=1, dynamic=True)
    assert verdict.kept == [fresh] and verdict.filtered == [flat] and verdict.stale == [old]
    assert verdict.reasons == {"kept": 1, "all_correct": 1}  # stale groups are counted apart, not as reasons
    assert filter_groups([fresh, flat, old], 2, 2, dynamic=False).kept == [fresh, flat, old]


def test_advantages_are_group_normalised_and_tokens_counted():
    batch = build_batch([_group([1, 0, 0, 0]), _group([1, 1, 0, 0])], AlgorithmConfig(overlong_buffer_len=2),
                        max_response_tokens=32, num_ranks=1)
    seqs = batch.shards[0]
    assert len(seqs) == 8 and batch.global_num_tokens == 8 * 4
    by_reward = {}
    for s in seqs:
        by_reward.setdefault(s.advantage > 0, []).append(s)
    assert len(by_reward[True]) == 3  # the three correct responses get positive advantages
    assert batch.stats["reward/mean"] == pytest.approx(3 / 8)


def test_overlong_shaping_penalises_long_responses_and_filtering_masks_truncated():
    algo = AlgorithmConfig(overlong_buffer_len=4, overlong_penalty_factor=1.0)
    group = _group([1, 1], lengths=[4, 16], finish=["stop", "length"])
    shaped = build_batch([group], algo, max_response_tokens=16, num_ranks=1)
    short, long_ = sorted(shaped.shards[0], key=lambda s: len(s.response_token_ids))
    assert short.advantage > 0 > long_.advantage  # same raw reward; the overlong one is penalised
    algo.overlong_filtering = True
    masked = build_batch([group], algo, max_response_tokens=16, num_ranks=1)
    weights = {len(s.response_token_ids): s.loss_weight for s in masked.shards[0]}
    assert weights == {4: 1.0, 16: 0.0} and masked.global_num_tokens == 4


def test_a_groups_responses_stay_on_one_rank():
    groups = [_group([1, 0, 1, 0]) for _ in range(3)]
    for i, g in enumerate(groups):
        for r in g.rollouts:
            r.prompt_token_ids = [1, 2, 3, i]
    batch = build_batch(groups, AlgorithmConfig(overlong_buffer_len=2), 32, num_ranks=2)
    assert sum(len(s) for s in batch.shards) == 12
    for shard in batch.shards:
        assert all(len([s for s in shard if s.prompt_token_ids == seq.prompt_token_ids]) == 4 for seq in shard)


def test_identical_samples_reach_the_learner_once_with_their_count():
    """Stage 4 merges a group's identical samples (same tokens, log-probs, reward, hence advantage) into one sequence
    with `copies`: the learner computes it once; the token count every rank divides by is unchanged."""
    group = _group([1, 0, 1, 0])
    twin = group.rollouts[0]
    group.rollouts[2] = Rollout("p/0", [1, 2, 3], list(twin.response_token_ids), list(twin.behaviour_logprobs),
                                twin.response_text, 0, "stop", reward=1)
    batch = build_batch([group], AlgorithmConfig(overlong_buffer_len=2), 32, num_ranks=1)
    assert [s.copies for s in batch.shards[0]] == [2, 1, 1]
    assert batch.global_num_tokens == 4 * 4 and batch.stats["batch/distinct_sequences"] == 3
    assert batch.stats["batch/sequences"] == 4


def test_groups_of_unequal_size_are_refused():
    with pytest.raises(ValueError, match="different sizes"):
        shape_and_advantage([_group([1, 0]), _group([1, 0, 1])], AlgorithmConfig(), 32)


def _with_status(group, statuses):
    for r, s in zip(group.rollouts, statuses):
        r.verifier_status = s
    return group


def test_verifier_failures_are_not_trained_as_wrong_answers():
    """A hung or crashed check scores reward 0 but is no wrong answer: its group is dropped (whether or not
    dynamic sampling is on) and counted, never given a negative advantage."""
    ok = _with_status(_group([1, 0, 1, 0]), ["ok"] * 4)
    hung = _with_status(_group([1, 0, 1, 0]), ["ok", "timeout", "ok", "ok"])
    crashed = _with_status(_group([1, 1, 1, 0]), ["ok", "ok", "ok", "error"])
    parse = _with_status(_group([1, 0, 1, 0]), ["ok", "parse_failure", "ok", "ok"])  # a real wrong answer
    for enabled in (True, False):
        kept, filtered, reasons = dynamic_sampling([ok, hung, crashed, parse], enabled=enabled)
        assert kept == [ok, parse] and filtered == [hung, crashed]
        assert reasons["verifier_failure"] == 2 and sum(reasons.values()) == 4


def test_shaping_masks_verifier_failures_that_reach_it():
    group = _with_status(_group([1, 0, 1, 0]), ["ok", "timeout", "ok", "error"])
    batch = build_batch([group], AlgorithmConfig(overlong_buffer_len=2), 32, num_ranks=1)
    seqs = batch.shards[0]
    assert [s.loss_weight for s in seqs] == [1.0, 0.0, 1.0, 0.0]
    assert batch.global_num_tokens == 8 and batch.stats["batch/verifier_failures_masked"] == 2


def test_each_prompt_travels_once_per_group_to_the_learner():
    """The G sequences of a group share one prompt list, so a pickled shard (what Ray sends to a learner rank)
    carries each prompt once, not G times."""
    import pickle

    prompt = list(range(1000, 3000))  # a long GenSelect prompt: ~2000 tokens
    groups = []
    for k in range(2):
        g = _group([1, 0, 1, 0, 1, 0, 1, 0])
        for r in g.rollouts:
            r.prompt_token_ids = list(prompt) + [k]  # separate (equal) lists, as after any copy
        groups.append(g)
    batch = build_batch(groups, AlgorithmConfig(overlong_buffer_len=2), 32, num_ranks=1)
    shard = pickle.loads(pickle.dumps(batch.shards[0]))
    assert len({id(s.prompt_token_ids) for s in shard}) == 2  # one list per group, after the round trip too
    one_prompt = len(pickle.dumps(prompt))
    assert len(pickle.dumps(batch.shards[0])) < 2 * one_prompt + 4000  # 2 prompts + 16 short responses


def test_off_policy_maxk_gets_the_sequence_log_ratio_from_the_policy():
    """algorithm.advantage.off_policy: stage 3 asks for the current policy's log-probs and hands
    sum(current) - sum(behaviour) per response to the estimator."""
    import torch

    from core.algo.bon import make_estimator

    algo = AlgorithmConfig(advantage={"name": "maxk", "k": 2, "off_policy": True, "log_ratio_clip": 1.0},
                           overlong_penalty_factor=0.0)
    groups = [_group([1.0, 0.0, 0.5, 0.0], lengths=[4, 2, 3, 1])]
    shifts = [0.1, -0.2, 0.05, 0.0]
    seen = []

    def policy_logprobs(sequences):
        seen.append(len(sequences))
        return [[lp + shift / len(s.behaviour_logprobs) for lp in s.behaviour_logprobs]
                for s, shift in zip(sequences, shifts)]

    out = shape_and_advantage(groups, algo, 32, policy_logprobs)
    want = make_estimator("maxk", k=2, off_policy=True, log_ratio_clip=1.0).advantages(
        torch.tensor([[1.0, 0.0, 0.5, 0.0]], dtype=torch.float64), torch.tensor([shifts], dtype=torch.float64))
    assert seen == [4]
    assert [s.advantage for s in out.sequences] == pytest.approx(want[0].tolist())
    assert out.stats["offpolicy/seq_log_ratio_abs_mean"] == pytest.approx(sum(map(abs, shifts)) / 4)
    with pytest.raises(ValueError, match="policy_logprobs"):
        shape_and_advantage(groups, algo, 32)


def _pick_point_group(rewards):
    """Responses [pick] + written solution + [point]: the two index tokens sampled (mask 1), the solution not
    (mask 0, behaviour log-probs 0.0)."""
    group = _group(rewards, lengths=[5] * len(rewards))
    for r in group.rollouts:
        r.behaviour_logprobs = [-0.5, 0.0, 0.0, 0.0, -0.25]
        r.loss_mask = [1, 0, 0, 0, 1]
    return group


def test_the_loss_mask_travels_to_the_sequences_and_the_token_count():
    group = _pick_point_group([1, 0, 1, 0])
    group.rollouts[3].loss_mask = None  # a response with no written tokens, in the same group
    batch = build_batch([group], AlgorithmConfig(overlong_buffer_len=2), 32, num_ranks=1)
    seqs = batch.shards[0]
    assert [s.loss_mask for s in seqs] == [[1, 0, 0, 0, 1]] * 3 + [None]
    assert batch.global_num_tokens == 3 * 2 + 5 == batch.stats["batch/response_tokens"]


def test_off_policy_log_ratio_sums_the_sampled_tokens_only():
    """The sequence log-ratio of an off-policy estimator leaves the written (mask 0) tokens out of both sums:
    their policy log-probs (the learner's reading of tokens nobody sampled) do not move the advantages."""
    algo = AlgorithmConfig(advantage={"name": "maxk", "k": 2, "off_policy": True, "log_ratio_clip": 1.0},
                           overlong_penalty_factor=0.0)
    group = _pick_point_group([1.0, 0.0, 0.5, 0.0])
    shifts = [0.1, -0.2, 0.05, 0.0]

    def policy_logprobs(sequences):  # each sampled token moves by shift / 2; the written ones by a lot
        return [[b + (shift / 2 if m else -7.0) for b, m in zip(s.behaviour_logprobs, s.loss_mask)]
                for s, shift in zip(sequences, shifts)]

    out = shape_and_advantage([group], algo, 32, policy_logprobs)
    assert out.stats["offpolicy/seq_log_ratio_abs_mean"] == pytest.approx(sum(map(abs, shifts)) / 4)

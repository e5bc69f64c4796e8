"""Deadlines derived from the generation limits (core/deadlines.py): at paper scale a generate call and a sync
are allowed the worst-case generation time at the minimum decode rate (a fixed 300 s / 3600 s would be below
it), the CPU default stays short, and an explicit setting still wins."""
import dataclasses

import pytest

from core.config import load_config
from core.deadlines import (PREFILL_SPEEDUP, SLACK_S, collect_deadline_s, drain_sequences, generate_deadline_s,
                            generation_seconds, sync_deadline_s)


def test_generation_seconds_formula():
    # one wave: 1000 prompt tokens at 10x the rate, 400 response tokens at 4 tokens/s
    assert generation_seconds(1000, 400, 8, 16, 4.0) == pytest.approx(1000 / (PREFILL_SPEEDUP * 4) + 100)
    # 33 sequences through a batch of 16: three waves
    assert generation_seconds(0, 400, 33, 16, 4.0) == pytest.approx(300.0)
    with pytest.raises(ValueError):
        generation_seconds(1, 1, 1, 1, 0.0)


@pytest.mark.parametrize("name", ["paper_math", "paper_code"])
def test_paper_deadlines_exceed_the_worst_case_generation(name):
    cfg = load_config(name, ["rollout.sync_mode=drain"])  # a draining sync waits for the longest response
    r = cfg.rollout
    assert r.request_timeout_s == 0  # derived, not the fixed 3600 s the configs carried
    # a full batch of 16,384-token responses after 16,384-token prompts at the slowest healthy rate
    worst = generation_seconds(cfg.data.max_prompt_tokens, r.max_response_tokens, drain_sequences(cfg),
                               r.max_num_seqs, r.min_decode_tokens_per_s)
    assert worst > 3600 > 300  # what the fixed deadlines allowed
    call = generate_deadline_s(r, cfg.data.max_prompt_tokens, drain_sequences(cfg))
    assert call > worst
    assert cfg.weight_sync.timeout_s == sync_deadline_s(cfg) > worst + cfg.weight_sync.transfer_timeout_s - 1e-9
    assert collect_deadline_s(cfg, cfg.prompts_per_step // r.num_workers) > call  # the actor's fires first


@pytest.mark.parametrize("name", ["paper_math", "paper_code"])
def test_a_sync_that_keeps_the_requests_in_flight_does_not_wait_for_them(name):
    """`rollout.sync_mode: keep` (the paper configs): the sync freezes the requests in flight instead of waiting
    for them, so its deadline is one engine step's slack plus the transfer, not a whole generation: a hung sync
    is caught in minutes, not after an hour and more."""
    keep = load_config(name)
    assert keep.rollout.sync_mode == "keep"
    assert keep.weight_sync.timeout_s == SLACK_S + keep.weight_sync.transfer_timeout_s
    assert keep.weight_sync.timeout_s < load_config(name, ["rollout.sync_mode=drain"]).weight_sync.timeout_s / 20


def test_default_deadlines_stay_short():
    cfg = load_config("selector")
    call = generate_deadline_s(cfg.rollout, cfg.data.max_prompt_tokens, drain_sequences(cfg))
    assert SLACK_S < call < 120
    assert cfg.weight_sync.timeout_s < 300  # shorter than a fixed 300 s sync deadline


def test_an_explicit_deadline_wins():
    cfg = load_config("paper_math", ["rollout.request_timeout_s=900", "weight_sync.timeout_s=1200"])
    assert generate_deadline_s(cfg.rollout, 10 ** 6, 10 ** 6) == 900
    assert cfg.weight_sync.timeout_s == 1200 == sync_deadline_s(cfg)
    # a faster decode rate shortens the derived deadlines
    drain = ["rollout.sync_mode=drain"]
    slow = load_config("paper_math", drain)
    fast = load_config("paper_math", [*drain, "rollout.min_decode_tokens_per_s=40"])
    assert fast.weight_sync.timeout_s < slow.weight_sync.timeout_s / 5
    derived = dataclasses.replace(cfg.rollout, request_timeout_s=0.0)
    assert generate_deadline_s(derived, 100, 1, response_tokens=8) < generate_deadline_s(derived, 100, 1)


def test_the_resolved_deadline_round_trips_through_the_run_folder():
    from core.config import from_yaml, to_yaml

    cfg = load_config("smoke")
    assert from_yaml(to_yaml(cfg)).weight_sync.timeout_s == cfg.weight_sync.timeout_s

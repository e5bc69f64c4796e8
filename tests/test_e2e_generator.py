"""End-to-end generator training (`task=generator`) on the real actor system: vLLM rollout
engine, verifier pool (math-verify in processes), DeepSpeed learner, weight sync, on a local Ray instance,
through the selector's own loop (`driver.train.train_loop`) and `GeneratorRun`.

To stay within a couple of minutes on 2 cores, ONE run (one Ray instance, one engine, one learner) trains a
tiny embedded generator with each estimator in turn, one phase per estimator: the estimator is driver-side
(stage 3), so swapping `run.cfg.algorithm` between steps is exactly what a run configured with it does. The
off-policy max@k phase runs with `max_staleness=1` for two steps, so its second batch was sampled one policy
version behind the learner and the importance weights come from real behaviour log-probs.
"""
import json

import pytest

from core.config import load_config
from driver.generator_run import GeneratorRun
from driver.train import train_loop

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

BASE = ["steps=6", "prompts_per_step=4", "max_staleness=0", "eval_prompts=8", "eval_samples=4", "progress=false",
        "checkpoint_every=100", "data.num_problems=120", "data.heldout_fraction=0.1",
        "tiny.model={hidden_size: 64, num_layers: 2, num_heads: 2, num_kv_heads: 1, intermediate_size: 128, "
        "vocab_size: 256, max_position_embeddings: 192}",
        "tiny.warm_start={steps: 60, batch_size: 8, lr: 3.0e-3}", "rollout.samples_per_prompt=4",
        "rollout.max_response_tokens=40", "rollout.kv_cache_gib=1", "rollout.max_num_seqs=32",
        "algorithm.dynamic_sampling=false", "algorithm.advantage.k=2", "algorithm.overlong_buffer_len=8",
        "learner.micro_batch_tokens=2048", "cluster.num_cpus=2"]
PHASES = [  # (overrides, steps)
    (["algorithm.advantage.name=grpo"], 1),
    (["algorithm.advantage.name=maxk"], 1),
    (["algorithm.advantage.name=bon_rlb", "algorithm.overlong_penalty_factor=0", "algorithm.advantage.n=4"], 1),
    (["algorithm.advantage.name=bon_rlb_p", "algorithm.overlong_filtering=true", "algorithm.advantage.p_estimate=loo",
      "algorithm.advantage.n=4"], 1),
    (["algorithm.advantage.name=maxk", "algorithm.advantage.off_policy=true", "max_staleness=1"], 2),
]


def test_a_generator_trains_with_every_estimator(tmp_path):
    base = BASE + [f"run_dir={tmp_path}/run", f"model.cache_dir={tmp_path}/models"]
    cfg = load_config("generator", base)
    assert cfg.steps == sum(n for _, n in PHASES)
    with GeneratorRun(cfg) as run:
        step = run.start()
        assert step == 0
        for overrides, n in PHASES:
            phase = load_config("generator", base + overrides)  # validated like a run configured with it
            run.cfg.algorithm, run.cfg.max_staleness = phase.algorithm, phase.max_staleness
            train_loop(run, step, step + n)
            step += n
        summary = run.finish()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["policy_version"] for r in train] == [1, 2, 3, 4, 5, 6]           # every phase took its steps
    assert all(r["batch/sequences"] == 16 and r["batch/skipped_update"] == 0 for r in train)
    assert all(r["verifier/verified"] + r["verifier/cache_hits"] + r["verifier/parse_failures"] > 0 for r in train)
    assert train[-1]["offpolicy/seq_log_ratio_abs_mean"] > 0 and train[-1]["staleness/mean"] >= 0.5
    assert "offpolicy/seq_log_ratio_abs_mean" not in train[0]
    assert [r["step"] for r in evals] == [0, 6]
    for r in evals:
        assert r["problems"] == 8 and r["k"] == 4 and set(r["pass_curve"]) == {"1", "2", "4"}
        assert r["pass_at_1"] <= r["pass_at_n"]
        assert 0 < r["mean_length"] <= 40
    assert summary["task"] == "generator" and summary["steps"] == 6 and summary["warm_start"]["steps"] == 60
    assert summary["start_pass_at_1"] == evals[0]["pass_at_1"] and summary["final_pass_at_n"] == evals[1]["pass_at_n"]
    assert (tmp_path / "run" / "curves.png").stat().st_size > 10_000
    from driver.bon import read_samples  # every evaluation kept its scored samples for driver.bon
    for step, rec in ((0, evals[0]), (6, evals[1])):
        rows = read_samples(tmp_path / "run" / "eval_samples" / f"step{step}.jsonl")
        assert len(rows) == 8 and all(len(r.texts) == 4 for r in rows)
        assert sum(sum(r.rewards) for r in rows) / 32 == pytest.approx(rec["mean_reward"])
    assert (tmp_path / "run" / "export" / "config.json").exists()
    assert (tmp_path / "run" / "checkpoints" / "latest").read_text().strip() == "step_000006"

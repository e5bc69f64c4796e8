"""`task=generator`, the pure parts (no Ray, no vLLM): a generator's scored groups go through the selector's
stage 3 (`driver.step.shape_and_advantage`) with every estimator and its config parameters, off-policy
max@k included; the training signal it produces is the exact gradient of max@k for a tiny categorical
generator (enumerated); held-out pass@k / max@k equal brute force over subsets; the worked solutions of the
warm-start are correct; a solution's stated answer and program are read as the verifier reads them."""
import dataclasses
import itertools
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from actors.verifier.solutions import code_program, stated_answer
from core import estimators
from core.config import AlgorithmConfig, DataConfig, load_config
from core.records import Rollout, RolloutGroup, SolveTask
from driver.step import shape_and_advantage
from driver.curriculum import mean_gain
from driver.generator_run import eval_ks, pass_metrics


def group(rewards, pid="p0", tokens=None, version=0, behaviour=-0.5):
    task = SolveTask(pid, pid, "math", "Compute 2 + 3.", "5")
    prompt = [1, 2, 3]
    rollouts = [Rollout(pid, prompt, list(tokens[i]) if tokens else [7, 8],
                        [behaviour] * (len(tokens[i]) if tokens else 2),
                        "Answer: 5" if r else "Answer: 4", version, "stop", reward=float(r), verifier_status="ok")
                for i, r in enumerate(rewards)]
    return RolloutGroup(task, rollouts, version)


ESTIMATORS = [
    ["algorithm.advantage.name=grpo"],
    ["algorithm.advantage.name=grpo", "algorithm.advantage.scale_by_std=false"],
    ["algorithm.advantage.name=maxk", "algorithm.advantage.k=2"],
    ["algorithm.advantage.name=maxk", "algorithm.advantage.k=4", "algorithm.advantage.baseline=mean"],
    ["algorithm.advantage.name=bon_rlb", "algorithm.overlong_penalty_factor=0", "algorithm.advantage.n=4"],
    ["algorithm.advantage.name=bon_rlb_p", "algorithm.overlong_filtering=true", "algorithm.advantage.p_estimate=loo",
     "algorithm.advantage.n=8"],
    ["algorithm.advantage.name=bon_rlb", "algorithm.overlong_penalty_factor=0", "algorithm.advantage.p_min=0.2",
     "algorithm.advantage.p_max=0.9"],
]


@pytest.mark.parametrize("overrides", ESTIMATORS, ids=lambda o: " ".join(x.split("=", 1)[1] for x in o))
def test_generator_groups_get_the_configured_estimators_advantages(overrides):
    cfg = load_config("generator", overrides)
    groups = [group([1, 0, 0, 0, 0, 0, 1, 0], "a"), group([1, 1, 1, 0, 1, 1, 0, 1], "b")]
    out = shape_and_advantage(groups, cfg.algorithm, cfg.rollout.max_response_tokens)
    want = estimators.build_estimator(cfg.algorithm.advantage).advantages(
        torch.tensor([g.rewards for g in groups], dtype=torch.float64))
    got = torch.tensor([s.advantage for s in out.sequences], dtype=torch.float64).view(2, 8)
    assert torch.allclose(got, want)
    assert all(s.prompt_token_ids == [1, 2, 3] and s.allowed_token_ids is None for s in out.sequences)
    assert out.stats["reward/mean"] == pytest.approx(8 / 16)


def test_off_policy_maxk_uses_the_learners_log_probs_against_the_engines():
    """With max@k's off_policy the sequence log-ratio is sum(policy log-probs) - sum(behaviour log-probs): at
    equal log-probs the advantages are the on-policy ones; otherwise the first-order weights move them."""
    cfg = load_config("generator", ["algorithm.advantage.off_policy=true"])
    groups = [group([1, 0, 0, 1, 0, 0, 0, 0], "a"), group([0, 1, 0, 0, 0, 0, 0, 0], "b")]
    calls = []

    def same(sequences):
        calls.append(len(sequences))
        return [list(s.behaviour_logprobs) for s in sequences]

    on = shape_and_advantage(groups, replace(cfg.algorithm,
                                             advantage={**cfg.algorithm.advantage, "off_policy": False}), 64)
    off = shape_and_advantage(groups, cfg.algorithm, 64, policy_logprobs=same)
    assert calls == [16]
    assert [s.advantage for s in off.sequences] == pytest.approx([s.advantage for s in on.sequences])
    assert off.stats["offpolicy/seq_log_ratio_abs_mean"] == 0

    shifted = shape_and_advantage(groups, cfg.algorithm, 64,
                                  policy_logprobs=lambda seqs: [[lp + 0.1 * (i % 3) for lp in s.behaviour_logprobs]
                                                                for i, s in enumerate(seqs)])
    assert shifted.stats["offpolicy/seq_log_ratio_abs_mean"] > 0
    assert [s.advantage for s in shifted.sequences] != pytest.approx([s.advantage for s in on.sequences])
    with pytest.raises(ValueError, match="off-policy"):
        shape_and_advantage(groups, cfg.algorithm, 64)


@pytest.mark.parametrize("k, baseline, factor", [(2, "loo", 1.0), (1, "loo", 1.0), (2, "mean", 1 - 2 / 3),
                                                 (3, "none", 1.0)])
def test_the_generators_training_signal_is_the_gradient_of_max_at_k(k, baseline, factor):
    """A generator that writes one of 3 one-token solutions (logits theta) scored 0, 0.4 and 1 (a code task's
    pass fractions): averaged over every group of G = 3 samples, sum_i A_i grad log pi(y_i) / G from stage 3
    equals grad max@k(pi) (times 1 - k/G for the 'mean' baseline, arXiv 2510.23393)."""
    G, scores = 3, [0.0, 0.4, 1.0]
    theta = torch.tensor([0.3, -0.2, 0.1], dtype=torch.float64, requires_grad=True)
    p = torch.softmax(theta, 0)
    algo = AlgorithmConfig(advantage={"name": "maxk", "k": k, "baseline": baseline}, overlong_penalty_factor=0.0)
    expected = torch.zeros(3, dtype=torch.float64)
    pd = p.detach()
    for ys in itertools.product(range(3), repeat=G):
        g = group([scores[y] for y in ys], tokens=[[y] for y in ys])
        seqs = shape_and_advantage([g], algo, 64).sequences
        weight = float(np.prod([pd[y] for y in ys]))
        for y, s in zip(ys, seqs):
            expected += weight * s.advantage * (torch.eye(3, dtype=torch.float64)[y] - pd) / G
    # max@k of the categorical policy, exactly: sum over k-tuples of prod p * max score
    maxk = sum(torch.prod(torch.stack([p[y] for y in ys])) * max(scores[y] for y in ys)
               for ys in itertools.product(range(3), repeat=k))
    (grad,) = torch.autograd.grad(maxk, theta)
    assert torch.allclose(expected, factor * grad, atol=1e-12)


def brute_pass_at_k(correct, k):
    return np.mean([any(c) for c in itertools.combinations(correct, k)])


def test_held_out_pass_and_max_at_k_equal_brute_force():
    rng = np.random.default_rng(0)
    K = 8
    rewards = [rng.choice([0.0, 0.5, 1.0], size=K, p=[0.6, 0.1, 0.3]) for _ in range(12)]
    groups = [group(list(r), f"p{i}") for i, r in enumerate(rewards)]
    groups[0].rollouts[0].verifier_status = "parse_failure"
    out = pass_metrics(groups, K, binary=False)
    assert eval_ks(K) == [1, 2, 4, 8] and eval_ks(6) == [1, 2, 4, 6] and out["k"] == K and out["problems"] == 12
    for k in eval_ks(K):
        want = np.mean([brute_pass_at_k(r >= 1, k) for r in rewards])
        assert out["pass_curve"][str(k)] == pytest.approx(want)
        want_max = np.mean([np.mean([max(c) for c in itertools.combinations(r, k)]) for r in rewards])
        assert out["max_curve"][str(k)] == pytest.approx(want_max)
    assert out["pass_at_1"] == pytest.approx(np.mean([np.mean(r >= 1) for r in rewards]))
    assert out["pass_at_n"] == pytest.approx(out["pass_curve"]["8"])
    assert out["pass_at_1_lo"] <= out["pass_at_1"] <= out["pass_at_1_hi"]
    assert out["pass_at_n_lo"] <= out["pass_at_n"] <= out["pass_at_n_hi"]
    assert out["mean_reward"] == pytest.approx(np.mean(rewards)) and out["no_answer_rate"] == 1 / 96
    with pytest.raises(ValueError):
        pass_metrics(groups, 4)


def brute_majority_at_k(answers, correct, k):
    """Mean over k-subsets of the majority vote's correctness (ties: the tied answers' mean; None never votes)."""
    scores = []
    for subset in itertools.combinations(range(len(answers)), k):
        votes = {}
        for i in subset:
            if answers[i] is not None:
                votes[answers[i]] = votes.get(answers[i], 0) + 1
        if not votes:
            scores.append(0.0)
            continue
        top = [a for a, v in votes.items() if v == max(votes.values())]
        scores.append(np.mean([correct[answers.index(a)] for a in top]))
    return np.mean(scores)


def test_held_out_majority_at_k_votes_on_the_stated_answers():
    stated = [["5", "4", "4", "5", "7", None], ["3", "3", "5", "6", "6", "6"], [None] * 6]
    groups = []
    for i, answers in enumerate(stated):
        g = group([float(a == "5") for a in answers], f"p{i}")
        for r, a in zip(g.rollouts, answers):
            r.response_text = "1 + 4 = 5\n" + (f"Answer: {a}" if a is not None else "no answer")
        groups.append(g)
    out = pass_metrics(groups, 6)
    for k in eval_ks(6):
        want = np.mean([brute_majority_at_k(a, [x == "5" for x in a], k) for a in stated])
        assert out["majority_curve"][str(k)] == pytest.approx(want)
    assert out["majority_curve"]["1"] == pytest.approx(out["pass_at_1"])  # one vote is one sample
    code = [dataclasses.replace(g, task=dataclasses.replace(g.task, domain="code")) for g in groups]
    assert pass_metrics(code, 6)["majority_curve"] is None


def test_the_curriculum_gain_skips_a_generators_tasks():
    assert mean_gain([group([1, 0])], 0) is None


def test_worked_solutions_are_correct_and_the_split_is_by_problem():
    from driver.data.solve import load_solve_data

    data = load_solve_data(DataConfig(num_problems=60, candidate_error_rate=0.9, hedge_wrong_rate=1.0,
                                      heldout_fraction=0.25))
    assert len(data.train) == 45 and len(data.heldout) == 15
    assert not {t.problem_id for t in data.train} & {t.problem_id for t in data.heldout}
    assert set(data.worked) == {t.problem_id for t in data.train}     # held-out problems have no targets
    refs = {t.problem_id: t.reference for t in data.train}
    for pid, solutions in data.worked.items():
        assert solutions and all(stated_answer(s) == refs[pid] for s in solutions), solutions
        assert all("wrong" not in s and "sure" not in s for s in solutions)  # no hedges, no slips


@pytest.mark.parametrize("text, answer", [
    ("2 + 3 = 5\nAnswer: 5", "5"), ("so \\boxed{7}", "7"), ("2 + 3 = 5", None), ("Answer: 4\nAnswer: 5.", "5"),
    ("", None),
])
def test_a_math_solution_is_judged_by_the_answer_it_states(text, answer):
    assert stated_answer(text) == answer


def test_a_code_solution_is_its_program():
    prompt = "def f(x):\n    \"\"\"Double.\"\"\"\n"
    assert code_program(prompt, "f", "    return 2 * x\n") == prompt + "    return 2 * x\n"
    assert code_program(prompt, "f", "```python\ndef f(x):\n    return 2 * x\n```") == "def f(x):\n    return 2 * x\n"


def test_the_verifier_scores_a_generators_solutions(tmp_path):
    """The real verifier pool (math-verify in its worker processes; no Ray): each solution's stated answer is
    checked; one that states none is a parse failure worth 0 (trained on, not dropped as a verifier failure)."""
    from actors.verifier.verifier_pool import VerifierPool
    from core.config import VerifierConfig

    pool = VerifierPool(VerifierConfig())
    try:
        g = group([0, 0, 0, 0, 0])
        for r, text in zip(g.rollouts, ["2 + 3 = 5\nAnswer: 5", "Answer: 6", "2 + 3 = 5", "Answer: 5",
                                        "Answer: 5.0"]):
            r.response_text = text
        pool.score_groups([g])
        assert g.rewards == [1.0, 0.0, 0.0, 1.0, 1.0]
        assert [r.verifier_status for r in g.rollouts] == ["ok", "ok", "parse_failure", "ok", "ok"]
        assert g.verifier_failures == 0 and g.rollouts[2].parse_status == "no_answer"
        m = pool.metrics()
        assert m["parse_failures/no_answer"] == 1 and m["verified"] == 3 and m["cache_hits"] == 1
    finally:
        pool.close()

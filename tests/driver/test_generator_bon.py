"""Best-of-N of a generator with a selector over all held-out problems (`python -m driver.bon`):
the subset bookkeeping against closed forms with fake choosers, bad sample files, and one real run of the CLI
with a tiny selector in vLLM."""
import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from core.algo.genselect import PLAIN, PromptStyle
from driver.bon import (SampledProblem, SamplesFileError, draw_subsets, evaluate, needs_choice, read_samples)
from driver.generator_run import write_eval_samples

ROOT = Path(__file__).resolve().parents[2]


def _problem(pid, rewards, answers=None):
    n = len(rewards)
    answers = answers or [str(int(r)) for r in rewards]
    return SampledProblem(pid, f"Compute {pid}.", "math", tuple(f"sample {i} of {pid}\nAnswer: {answers[i]}"
                                                               for i in range(n)), tuple(answers), tuple(rewards))


PROBLEMS = [_problem("a", [1, 0, 0, 0]), _problem("b", [1, 1, 0, 0]), _problem("c", [0, 0, 0, 0]),
            _problem("d", [1, 1, 1, 1]), _problem("e", [0, 1, 0, 1])]


def oracle(tasks):
    return [max(range(t.num_candidates), key=lambda i: t.labels[i]) for t in tasks]


def worst(tasks):
    return [min(range(t.num_candidates), key=lambda i: t.labels[i]) for t in tasks]


def test_an_oracle_selector_is_pass_at_k_and_the_worst_is_all_k_correct_exactly_over_all_subsets():
    ks = [1, 2, 3, 4]
    best = evaluate(PROBLEMS, oracle, ks, draws=10, style=PLAIN)["curves"]  # C(4, k) <= 6: every subset
    bad = evaluate(PROBLEMS, worst, ks, draws=10, style=PLAIN)["curves"]
    for k in ks:
        assert best["selector"][str(k)]["mean"] == pytest.approx(best["pass"][str(k)]["mean"])
        all_correct = np.mean([math.comb(int(sum(p.rewards)), k) / math.comb(4, k) for p in PROBLEMS])
        assert bad["selector"][str(k)]["mean"] == pytest.approx(all_correct)
    assert best["random"]["2"]["mean"] == pytest.approx(np.mean([np.mean(p.rewards) for p in PROBLEMS]))
    assert best["selector"]["1"]["mean"] == pytest.approx(best["random"]["1"]["mean"])  # k = 1: nothing to choose


def test_only_subsets_with_mixed_rewards_reach_the_selector_and_unparsed_choices_score_zero():
    seen = []

    def mute(tasks):
        seen.extend(tasks)
        return [None] * len(tasks)

    result = evaluate(PROBLEMS, mute, [2], draws=10, style=PromptStyle(end_lines=True))
    assert result["subsets"] == 5 * 6
    # a: 3 mixed pairs, b: 4, c and d: none, e: 4
    assert result["judged_subsets"] == len(seen) == 11 and result["parse_failures"] == 11
    assert all(len(set(t.labels)) > 1 and "End of solution 1." in t.prompt for t in seen)
    per_problem = {"a": 0.0, "b": 1 / 6, "c": 0.0, "d": 1.0, "e": 1 / 6}  # uniform pairs score their reward
    assert result["curves"]["selector"]["2"]["mean"] == pytest.approx(np.mean(list(per_problem.values())))


def test_subsets_are_drawn_in_a_random_order_reproducibly_and_sampled_when_there_are_too_many():
    every = draw_subsets(4, 2, draws=10, seed=0)
    assert sorted(tuple(sorted(s)) for s in every) == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    assert any(list(s) != sorted(s) for s in every)  # the selector sees them shuffled
    drawn = draw_subsets(16, 8, draws=5, seed=3)
    assert len(drawn) == 5 and all(len(set(s)) == 8 for s in drawn)
    assert drawn == draw_subsets(16, 8, draws=5, seed=3) != draw_subsets(16, 8, draws=5, seed=4)
    assert not needs_choice(PROBLEMS[2], (0, 1)) and needs_choice(PROBLEMS[0], (1, 0))


def _order_dependent(tasks):
    """A deterministic chooser that depends on the order the selector sees (the first candidate's sample
    index), with some unparsed judgments (None)."""
    out = []
    for t in tasks:
        first = int(t.candidates[0].split()[1])
        out.append(None if (first + t.num_candidates) % 4 == 0 else (first * 7 + 3) % t.num_candidates)
    return out


def test_selector_bon_at_k_keeps_its_numbers_through_core_bon_at_k(monkeypatch):
    """Regression target: the values below were computed with a subset average written independently of
    core.algo.passk.bon_at_k (which selector_scores calls) and hard-coded; the two must agree exactly.
    The input mixes every path: partial rewards, all-equal problems, exact (k = 1, 6) and sampled (k = 2, 3)
    subsets, the same subset drawn twice in different orders (judged differently) and unparsed choices."""
    import driver.bon as bon

    def problem(pid, rewards):
        return SampledProblem(pid, f"Compute {pid}.", "math", tuple(f"sample {i} of {pid}" for i in range(6)),
                              tuple(str(r) for r in rewards), tuple(float(r) for r in rewards))

    items = [problem("a", [1, 0.5, 0, 0.25, 1, 0]), problem("b", [0] * 6), problem("c", [1, 1, 0, 0, 0, 0]),
             problem("d", [0.5] * 6), problem("e", [0, 1, 0, 1, 0.75, 0])]
    per_problem, summarize = {}, bon.summarize_curves
    monkeypatch.setattr(bon, "summarize_curves",
                        lambda curves, seed=0: per_problem.update(curves["selector"]) or summarize(curves, seed))
    result = evaluate(items, _order_dependent, [1, 2, 3, 6], draws=8, style=PLAIN, seed=3)
    assert {key: result[key] for key in ("problems", "draws", "judged_subsets", "subsets", "parse_failures")} == {
        "problems": 5, "draws": 8, "judged_subsets": 41, "subsets": 115, "parse_failures": 9}
    want = {1: [0.4583333333333333, 0.0, 0.3333333333333333, 0.5, 0.4583333333333333],
            2: [0.375, 0.0, 0.375, 0.5, 0.71875],
            3: [0.40625, 0.0, 0.0, 0.5, 0.125],
            6: [0.25, 0.0, 0.0, 0.5, 1.0]}
    assert sorted(per_problem) == sorted(want)
    for k, values in want.items():
        assert per_problem[k].tolist() == pytest.approx(values, abs=1e-12)
    want_ci = {"1": (0.35, 0.16645833333333335, 0.475), "2": (0.39375, 0.175, 0.5875),
               "3": (0.20625, 0.025, 0.38125), "6": (0.35, 0.05, 0.7)}
    assert sorted(result["curves"]["selector"]) == sorted(want_ci)
    for k, (mean, lo, hi) in want_ci.items():
        assert result["curves"]["selector"][k] == pytest.approx({"mean": mean, "lo": lo, "hi": hi}, abs=1e-12)
    with pytest.raises(ValueError, match="need the same draws and seed"):  # a plan bon_at_k would not draw
        bon.selector_scores(items, bon.plan(items, [2], draws=8, seed=4), {}, draws=8, seed=3)


def test_majority_uses_the_stated_answers():
    # two wrong samples agree on 7, the right answer 3 stands alone: majority@3 over all 4 is below pass@3
    item = _problem("m", [1, 0, 0, 0], answers=["3", "7", "7", "5"])
    curves = evaluate([item], oracle, [3], draws=10, style=PLAIN)["curves"]
    assert curves["majority"]["3"]["mean"] < curves["pass"]["3"]["mean"] == pytest.approx(0.75)


def test_eval_samples_round_trip_and_bad_files_name_the_line(tmp_path):
    task = SimpleNamespace(problem_id="pm-1", problem="Compute 2 + 2.", domain="math")
    group = SimpleNamespace(task=task, rewards=[1.0, 0.0],
                            rollouts=[SimpleNamespace(response_text="2 + 2 = 4\nAnswer: 4"),
                                      SimpleNamespace(response_text="no answer here")])
    path = write_eval_samples([group, group], tmp_path / "eval_samples" / "step0.jsonl")
    rows = read_samples(path)
    assert rows[0].answers == ("4", None) and rows[0].rewards == (1.0, 0.0) and len(rows) == 2
    assert not list(path.parent.glob("*.tmp"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(path.read_text() + '{"id": "x"}\n')
    with pytest.raises(SamplesFileError, match=r"bad.jsonl:3: not a samples row \(KeyError"):
        read_samples(bad)
    bad.write_text(path.read_text() + json.dumps({"id": "y", "problem": "p", "texts": ["a"] * 3,
                                                  "answers": ["1"] * 3, "rewards": [0, 1, 0]}) + "\n")
    with pytest.raises(SamplesFileError, match=r":3: 3 samples, the first row has 2"):
        read_samples(bad)


def test_an_evaluation_extracts_the_stated_answers_once_and_hands_them_on(tmp_path, monkeypatch):
    """GeneratorRun's evaluation calls stated_answers once; pass_metrics and write_eval_samples given them
    extract nothing again and give what they give on their own."""
    import actors.verifier.solutions
    from core.records import Rollout, RolloutGroup, SolveTask
    from driver.generator_run import pass_metrics, stated_answers

    def group(pid, domain, texts, rewards):
        return RolloutGroup(SolveTask(pid, pid, domain, "Compute 2 + 3.", "5"),
                            [Rollout(pid, [1], [7], [-0.5], t, 0, "stop", reward=r, verifier_status="ok")
                             for t, r in zip(texts, rewards)], 0)

    maths = [group("m0", "math", ["\\boxed{5}", "Answer: 4", "none"], [1.0, 0.0, 0.0]),
             group("m1", "math", ["Answer: 5.", "Answer: 5", "\\boxed{6}"], [1.0, 1.0, 0.0])]
    groups = maths + [group("c0", "code", ["Answer: 5", "def f(): pass", "x"], [1.0, 0.5, 0.0])]
    answers = stated_answers(groups)
    assert answers == [["5", "4", None], ["5", "5", "6"], [None] * 3]
    alone = (pass_metrics(maths, 3), write_eval_samples(groups, tmp_path / "alone.jsonl").read_text())
    calls = []
    monkeypatch.setattr(actors.verifier.solutions, "stated_answer", calls.append)
    handed = (pass_metrics(maths, 3, answers=answers[:2]),
              write_eval_samples(groups, tmp_path / "handed.jsonl", answers=answers).read_text())
    assert calls == [] and handed == alone and alone[0]["majority_curve"] is not None


def test_problems_the_selector_trained_on_are_left_out_whatever_their_wording(monkeypatch, tmp_path):
    import driver.data.dataset as dataset
    from driver.bon import exclude_seen

    trained = SimpleNamespace(train=[SimpleNamespace(problem="Compute 3 + 4 * 2."), SimpleNamespace(problem="Hi?")])
    monkeypatch.setattr(dataset, "load_dataset", lambda path: trained)
    items = [_problem("x", [1, 0]), _problem("y", [1, 0])]
    items[0] = SampledProblem("x", "What is the value of 3 + 4 * 2?", "math", items[0].texts, items[0].answers,
                              items[0].rewards)
    (tmp_path / "manifest.json").write_text("{}")  # a dataset folder
    kept, dropped = exclude_seen(items, [tmp_path])
    assert [p.id for p in kept] == ["y"] and dropped == 1
    assert exclude_seen(items, []) == (items, 0)


def test_a_start_model_excludes_its_pretraining_corpus_through_its_warm_start(tmp_path):
    """`--exclude MODEL`: a warm-started tiny model leads to the pretrained one it started from, whose corpus's
    problems (its `problems_seen` hook, named by its kind) are left out."""
    import json

    from tiny_recipe.config import PretrainConfig
    from driver.bon import exclude_seen, seen_problems
    from tiny_recipe.pretrain import STATS_FILE, pretraining_problems

    pretrained, started = tmp_path / "pt", tmp_path / "ws"
    pretrained.mkdir(), started.mkdir()
    cfg = PretrainConfig(steps=2, batch_size=4)
    (pretrained / STATS_FILE).write_text(json.dumps({"steps": 2, "batch_size": 4}))
    # the model's record, copied from the built tiny model: its `problems_seen` hook reads STATS_FILE
    (pretrained / "genselect_model.json").write_text(json.dumps({"kind": "tiny"}))
    (started / "warm_start.json").write_text(json.dumps({"base_model": str(pretrained)}))
    corpus = pretraining_problems(cfg)
    assert seen_problems(started) == corpus and len(corpus) == 8
    items = [_problem("x", [1, 0]), _problem("y", [1, 0])]
    items[0] = SampledProblem("x", sorted(corpus)[0], "math", items[0].texts, items[0].answers, items[0].rewards)
    assert [p.id for p in exclude_seen(items, [started])[0]] == ["y"]
    with pytest.raises(ValueError, match="no such folder"):
        seen_problems(tmp_path / "missing")


def test_the_cli_refuses_bad_arguments_before_loading_a_model(tmp_path):
    samples = tmp_path / "s.jsonl"
    write_eval_samples([SimpleNamespace(task=SimpleNamespace(problem_id="p", problem="q", domain="math"),
                                        rewards=[1.0, 0.0], rollouts=[SimpleNamespace(response_text="Answer: 1")] * 2)],
                       samples)
    from driver.bon import main
    assert main(["--selector", "nowhere", "--samples", str(samples), "--ks", "2,4"]) == 2       # k > n
    assert main(["--selector", "nowhere", "--samples", str(samples), "--knockout-window", "1"]) == 2
    assert main(["--selector", "nowhere", "--samples", str(tmp_path / "missing.jsonl")]) == 2


@pytest.mark.slow
def test_bon_with_a_real_tiny_selector_in_vllm(tmp_path):
    """The CLI for real: a tiny selector (vLLM, constrained judgments) chooses among procedural samples."""
    from tiny_recipe.config import TinyModelConfig
    from driver.data import procedural
    from tiny_recipe.model import build_tiny_model

    rows = procedural.generate(12, 8, seed=5, spec=procedural.ProceduralSpec(error_rate=0.5))
    problems = [{"id": r["id"], "problem": r["problem"], "domain": "math", "texts": r["candidates"],
                 "answers": [c.rsplit("Answer: ", 1)[1] for c in r["candidates"]],
                 "rewards": [float(c.rsplit("Answer: ", 1)[1] == r["answer"]) for c in r["candidates"]]}
                for r in rows]
    samples = tmp_path / "step0.jsonl"
    samples.write_text("".join(json.dumps(p) + "\n" for p in problems))
    texts = [p["problem"] + "\n" + "\n".join(p["texts"]) + "\nJudgment: 1" for p in problems] * 5
    selector = build_tiny_model(TinyModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                                                intermediate_size=128, vocab_size=256, max_position_embeddings=1024),
                                texts, tmp_path / "selector", seed=0)
    out = tmp_path / "bon.json"
    proc = subprocess.run([sys.executable, "-m", "driver.bon", "--selector", str(selector), "--samples", str(samples),
                           "--ks", "2,4,8", "--draws", "4", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["problems"] == 12 and result["subsets"] == 12 * (4 + 4 + 1)
    assert result["judged_subsets"] > 0 and result["parse_failures"] == 0   # constrained: always an index
    curves = result["curves"]
    for k in ("2", "4", "8"):
        assert 0.0 <= curves["random"][k]["mean"] <= curves["pass"][k]["mean"] + 1e-9
        assert 0.0 <= curves["selector"][k]["mean"] <= 1.0
    assert curves["selector"]["8"]["mean"] <= curves["pass"]["8"]["mean"] + 1e-9  # k = n: the one subset is all
    assert "GenSelect@k" in proc.stdout and "maj@k" in proc.stdout

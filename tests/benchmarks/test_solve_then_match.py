"""benchmarks/solve_then_match.py: the exact-pointer rule, its fallbacks, and a real (tiny) model solving."""
import random

import pytest

from benchmarks.solve_then_match import choose, evaluate_rules, normalize, own_answer
from core.records import SelectionTask


def task(pid: str, answers: list, reference: str) -> SelectionTask:
    labels = tuple(1.0 if a == reference else 0.0 for a in answers)
    return SelectionTask(prompt_id=f"{pid}/p0", problem_id=pid, domain="math", problem=f"Compute {pid}.",
                         candidates=tuple(f"Answer: {a}" for a in answers), candidate_answers=tuple(answers),
                         labels=labels, reference=reference, prompt="")


def test_own_answer_is_the_last_answer_line_normalized():
    assert own_answer("3 + 4 = 7\nAnswer: 7\n") == "7"
    assert own_answer("Answer: 5\nAnswer: 12.\n") == "12"
    assert own_answer("3 + 4 = 7\n") is None
    assert normalize(" 12. ") == "12" and normalize(None) is None


def test_choose_points_at_the_first_candidate_stating_the_answer_else_falls_back():
    answers = ["5", "9", "9", "7"]
    rng = random.Random(0)
    assert choose(answers, "7", "none", rng) == 3
    assert choose(answers, "9", "majority", rng) == 1
    assert choose(answers, "11", "none", rng) is None
    assert choose(answers, "11", "majority", rng) == 1  # 9 is the most common answer
    assert all(0 <= choose(answers, None, "random", rng) < 4 for _ in range(20))
    tied = {choose(["5", "5", "9", "9"], "11", "majority", random.Random(s)) for s in range(30)}
    assert tied == {0, 2}  # ties between answers: a seeded draw among them


def test_evaluate_rules_scores_the_route_against_majority_voting():
    tasks = [task("a", ["5", "5", "8"], "8"),   # majority wrong; the model solved it
             task("b", ["4", "6", "6"], "6"),   # majority right; the model's answer matches no candidate
             task("c", ["1", "2", "2"], "1")]   # majority wrong; the model matches a wrong candidate
    out = evaluate_rules(tasks, {"a/p0": "8", "b/p0": "3", "c/p0": "2"})
    assert out["solve_rate"] == 1 / 3
    assert out["matched_share"] == 2 / 3
    assert out["none"]["genselect"] == 1 / 3           # only the solved problem
    assert out["majority"]["genselect"] == 2 / 3       # + b by majority
    assert out["majority"]["majority"] == 1 / 3
    assert out["majority"]["over_majority"] == 1 / 3


@pytest.fixture(scope="module")
def tiny_model_and_dataset(tmp_path_factory):
    """A tiny model built on 20 worked solutions and a small no-cue selection dataset tokenized by it."""
    from core.config import DataConfig, ModelConfig
    from driver.data import procedural
    from driver.models.pretrain import corpus_text
    from driver.models.registry import resolve_model
    from driver.prepare import prepare

    tmp = tmp_path_factory.mktemp("solve")
    rows = procedural.generate(20, 1, 0, procedural.ProceduralSpec(error_rate=0.0))
    folder = resolve_model(ModelConfig(cache_dir=str(tmp / "models")),
                           [corpus_text(r["problem"], r["candidates"][0]) for r in rows])
    data = prepare(DataConfig(num_problems=40, out_dir=str(tmp / "data")),
                   ModelConfig(name=str(folder), cache_dir=str(tmp / "models")), with_model=False)
    return folder, data.dataset_dir, rows


def test_a_tiny_model_solves_and_the_report_prints_every_rule(tiny_model_and_dataset, tmp_path, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from benchmarks.solve_then_match import main, solve
    from driver.data.dataset import load_dataset

    folder, dataset, rows = tiny_model_and_dataset
    model, tokenizer = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    texts = solve(model, tokenizer, [rows[0]["problem"], rows[1]["problem"]], max_new_tokens=8, batch_size=2)
    assert len(texts) == 2 and all(isinstance(t, str) for t in texts)
    assert load_dataset(dataset).heldout
    assert main(["--model", str(folder), "--dataset", str(dataset), "--problems", "3",
                 "--out", str(tmp_path / "r.json")]) == 0
    printed = capsys.readouterr().out
    assert all(f"else {f}" in printed for f in ("majority", "random", "none"))
    assert (tmp_path / "r.json").is_file()
    assert main(["--model", str(folder), "--dataset", str(dataset), "--problems", "2", "--context", "prompt"]) == 0
    assert "prompts: the model solves" in capsys.readouterr().out


def test_each_context_puts_the_right_text_before_the_problem():
    import dataclasses

    from benchmarks.solve_then_match import head_text, solving_inputs

    tasks = [dataclasses.replace(task("a", ["5", "8"], "8"), prompt="PROMPT A"), task("b", ["4", "6"], "6")]
    per_problem = solving_inputs(tasks, "start")
    per_prompt = solving_inputs(tasks, "prompt")
    other = solving_inputs(tasks, "other-prompt")
    assert set(per_problem) == {"a", "b"} and set(per_prompt) == set(other) == {"a/p0", "b/p0"}
    assert head_text(per_problem["a"]) == "Problem:\nCompute a.\n\nSolution:\n"
    assert head_text(per_prompt["a/p0"]) == "PROMPT A\n\nProblem:\nCompute a.\n\nSolution:\n"
    assert head_text(other["b/p0"]) == "PROMPT A\n\nProblem:\nCompute b.\n\nSolution:\n"  # a's prompt before b


def test_staged_pretraining_saves_each_stage_and_never_trains_on_the_held_out_problems(tiny_model_and_dataset,
                                                                                      tmp_path, capsys):
    import json

    from benchmarks.staged_pretrain import main, stage_config
    from driver.data.dataset import load_dataset
    from driver.data.procedural import problem_key
    from driver.models.pretrain import solution_texts

    folder, dataset, _ = tiny_model_and_dataset
    assert main(["--base", str(folder), "--exclude-dataset", str(dataset), "--out", str(tmp_path / "pt"),
                 "--stages", "2", "--stage-steps", "2", "--batch-size", "2", "--pack-tokens", "256"]) == 0
    records = [json.loads((tmp_path / "pt" / f"stage{k}" / "stage.json").read_text()) for k in (1, 2)]
    # 2 x 2 short texts pack into one row of 256 tokens: one step a stage is what ran, and what is recorded
    assert [r["steps"] for r in records] == [1, 2] and records[1]["seeds"] == [777, 778]
    assert records[0]["pack_tokens"] == 256
    assert (tmp_path / "pt" / "stage2" / "model.safetensors").is_file()
    held_out = frozenset(t.problem for t in load_dataset(dataset).heldout)
    keys = {problem_key(p) for p in held_out}
    big = stage_config(0, 200, 32, 3e-3)  # a corpus large enough to meet held-out expressions
    texts = solution_texts(big, held_out)
    assert len(texts) < 200 * 32  # some were left out ...
    assert not any(problem_key(t.split("\n")[1]) in keys for t in texts)  # ... all of the held-out ones


def test_context_rows_put_the_loss_on_the_worked_solution_only(tiny_model_and_dataset, tmp_path, capsys):
    import json

    from transformers import AutoTokenizer

    from benchmarks.prompt_context_pretrain import context_row, main

    folder, dataset, _ = tiny_model_and_dataset
    tokenizer = AutoTokenizer.from_pretrained(folder)
    before, text = "Solution 0:\n3 + 4 = 7", "Problem:\nCompute 3 + 4.\n\nSolution:\n3 + 4 = 7\n"
    context, target, weights = context_row(tokenizer, before, text)
    assert context + target[:-1] == tokenizer(before + "\n\n" + text)["input_ids"]  # one string, split in two
    assert len(weights) == len(target) and set(weights) == {1} and target[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(target[:-1]).replace(" ", "").startswith("Problem")  # the loss reads only the solution
    assert not tokenizer.decode(context).replace(" ", "").endswith("Problem")
    assert main(["--model", str(folder), "--prompts-dataset", str(dataset), "--out", str(tmp_path / "ctx"),
                 "--steps", "2", "--batch-size", "2"]) == 0
    record = json.loads((tmp_path / "ctx" / "context_pretrain.json").read_text())
    assert record["steps"] == 2 and len(record["losses"]) == 2

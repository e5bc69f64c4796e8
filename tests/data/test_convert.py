"""python -m driver.convert: verl's RL Parquet and NeMo-Skills generation JSONL into the project's data file, every
input row accounted for (rows in = rows out + rows skipped, each skip with its reason), the output read back by the
project's own reader."""
import json

import pytest

from driver import convert
from driver.data.convert_nemo_skills import judgement_label
from driver.data.files import BadRows, read_problem_file

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402


def chat(user, system=None):
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]


VERL_ROWS = [
    {"data_source": "openai/gsm8k", "prompt": chat("Tom has 3 apples and buys 4. How many? Put the answer in "
                                                   "\\boxed{}.", "You are a helpful assistant."),
     "ability": "math", "reward_model": {"style": "rule", "ground_truth": "7"}, "extra_info": {"index": 0}},
    {"data_source": "openai/gsm8k", "prompt": chat("What is 6 * 7?"), "ability": "math",
     "reward_model": {"style": "rule", "ground_truth": "42"}, "extra_info": {"index": 1}},
    {"data_source": "openai/gsm8k", "prompt": [{"role": "system", "content": "no question here"}], "ability": "math",
     "reward_model": {"style": "rule", "ground_truth": "1"}, "extra_info": {"index": 2}},
    {"data_source": "openai/gsm8k", "prompt": chat("What is 2 + 2?"), "ability": "math",
     "reward_model": {"style": "rule", "ground_truth": None}, "extra_info": {"index": 3}},
    {"data_source": "openai/gsm8k", "prompt": chat("What is 6 * 7 again?"), "ability": "math",
     "reward_model": {"style": "rule", "ground_truth": "42"}, "extra_info": {"index": 1}},
]


def write_verl(path, rows=VERL_ROWS):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_verl_becomes_a_problems_only_file(tmp_path, capsys):
    out = tmp_path / "problems.jsonl"
    assert convert.main(["verl", str(write_verl(tmp_path / "train.parquet")), str(out), "--quiet"]) == 0
    stdout, stderr = capsys.readouterr()
    assert stdout.strip() == (f"verl: 5 rows in, 2 rows out, 3 rows skipped (1 no user message in 'prompt'; "
                              f"1 no 'reward_model.ground_truth'; 1 duplicate id) -> {out}")
    assert f"skipped {tmp_path / 'train.parquet'}:3: no user message" in stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0] == {"id": "openai/gsm8k-0", "problem": VERL_ROWS[0]["prompt"][-1]["content"], "answer": "7",
                       "data_source": "openai/gsm8k"}
    problems = read_problem_file(out, "error", problems_only=True)  # what data.source=model reads
    assert [(p.id, p.reference, p.candidates) for p in problems] == [("openai/gsm8k-0", "7", ()),
                                                                    ("openai/gsm8k-1", "42", ())]


def test_verl_rows_without_an_index_are_named_by_their_row_and_lists_are_refused(tmp_path):
    numbers = write_verl(tmp_path / "d.parquet", [{"prompt": chat("1 + 1?"), "reward_model": {"ground_truth": 2}}])
    lists = write_verl(tmp_path / "l.parquet", [{"prompt": chat("Roots of x^2 = 1?"),
                                                 "reward_model": {"ground_truth": ["1", "-1"]}}])
    stats = convert.convert("verl", [numbers, lists], tmp_path / "p.parquet", progress=False)
    assert stats.rows_in == 2 and stats.rows_out == 1
    assert list(stats.skipped) == ["'reward_model.ground_truth' is a list, not one answer (several answers and code "
                                   "tests are not converted)"]
    [problem] = read_problem_file(tmp_path / "p.parquet", "error", problems_only=True)
    assert (problem.id, problem.reference) == ("d-000001", "2")


def nemo_line(problem, answer, generation, correct, predicted=None, **extra):
    return {"problem": problem, "expected_answer": answer, "generation": generation,
            "predicted_answer": predicted, "symbolic_correct": correct, **extra}


def write_seeds(tmp_path):
    """Three seeds of NeMo-Skills output: line 1 fine; line 2 unfinished in seed 1 ({}); line 3 a different problem
    in seed 2; line 4 judged by an LLM judge only, without an expected answer; line 5 two seeds empty."""
    seeds = []
    for seed in range(3):
        right = seed != 1
        lines = [
            nemo_line("Compute 2+3.", "5", f"2+3 = \\boxed{{{5 if right else 6}}}", right, "5" if right else "6"),
            {} if seed == 1 else nemo_line("Compute 3*3.", 9, f"\\boxed{{{9 + seed}}}", seed == 0, str(9 + seed)),
            nemo_line("Compute 1+1." if seed < 2 else "Something else.", "2", "\\boxed{2}", True, "2"),
            {"problem": "Prove it.", "generation": f"proof {seed}",
             "judgement": f"Reasoning...\nJudgement: {'Yes' if seed else 'No'}"},
            {} if seed else nemo_line("Compute 4+4.", "8", "\\boxed{8}", True, "8"),
        ]
        path = tmp_path / f"output-rs{seed}.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        seeds.append(path)
    return seeds


def test_nemo_skills_seeds_become_candidates_with_labels(tmp_path, capsys):
    out = tmp_path / "candidates.parquet"
    assert convert.main(["nemo-skills", *map(str, write_seeds(tmp_path)), str(out), "--quiet"]) == 0
    summary = capsys.readouterr().out.strip()
    assert summary.startswith("nemo-skills: 5 rows in, 3 rows out, 2 rows skipped (")
    assert "1 the problem text differs between the input files" in summary and "1 fewer than 2 solutions" in summary
    report = BadRows()
    problems = {p.id: p for p in read_problem_file(out, "error", report)}
    assert report.count == 0 and set(problems) == {"output-rs0-000001", "output-rs0-000002", "output-rs0-000004"}
    first = problems["output-rs0-000001"]
    assert first.candidates == ("2+3 = \\boxed{5}", "2+3 = \\boxed{6}", "2+3 = \\boxed{5}")
    assert first.labels == (1.0, 0.0, 1.0) and first.candidate_answers == ("5", "6", "5") and first.reference == "5"
    assert problems["output-rs0-000002"].labels == (1.0, 0.0) and problems["output-rs0-000002"].reference == "9"
    judged = problems["output-rs0-000004"]
    assert judged.labels == (0.0, 1.0, 1.0) and judged.reference == ""  # labelled by the judge, no answer


def test_one_line_with_lists_of_solutions_and_labels_left_to_the_verifiers(tmp_path):
    line = {"id": "q7", "problem": "Compute 5-2.", "expected_answer": "3", "generation": ["so 3", "so 4", "so 3"],
            "predicted_answer": ["3", "4", "3"], "symbolic_correct": [True, False, True]}
    path = tmp_path / "gen.jsonl"
    path.write_text(json.dumps(line) + "\n" + json.dumps({**line, "id": "q8", "expected_answer": None}) + "\n")
    out = tmp_path / "c.jsonl"
    stats = convert.convert("nemo-skills", [path], out, label="none", progress=False)
    assert (stats.rows_in, stats.rows_out) == (2, 1)
    assert dict(stats.skipped) == {"no 'expected_answer' and not every solution has a label": 1}
    [row] = [json.loads(x) for x in out.read_text().splitlines()]
    assert row == {"id": "q7", "problem": "Compute 5-2.", "candidates": ["so 3", "so 4", "so 3"], "answer": "3",
                   "candidate_answers": ["3", "4", "3"]}
    assert "1 rows without labels" in stats.summary()
    convert.convert("nemo-skills", [path], out, progress=False)
    assert [json.loads(x)["candidate_labels"] for x in out.read_text().splitlines()] == [[True, False, True]] * 2


@pytest.mark.parametrize("text, label", [("Judgement: Yes", True), ("a\nJudgement: no.", False),
                                         ("Judgement: maybe", None), ("Yes", None), (None, None)])
def test_a_judges_verdict_is_read_after_its_last_judgement(text, label):
    assert judgement_label(text) is label


def test_missing_input_bad_output_and_nothing_converted_are_one_error_line(tmp_path, capsys):
    assert convert.main(["verl", str(tmp_path / "none.parquet"), str(tmp_path / "o.jsonl")]) == 2
    assert capsys.readouterr().err.strip() == f"error: no such input file: {tmp_path / 'none.parquet'}"
    path = write_verl(tmp_path / "d.parquet")
    assert convert.main(["verl", str(path), str(tmp_path / "o.csv")]) == 2
    assert "must end in one of ['.jsonl', '.parquet']" in capsys.readouterr().err
    empty = write_verl(tmp_path / "e.parquet", VERL_ROWS[2:4])
    assert convert.main(["verl", str(empty), str(tmp_path / "o.jsonl"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: nothing converted: 2 rows in, 0 rows out")
    assert not (tmp_path / "o.jsonl").exists()

"""Best-of-N on a benchmark file (`python -m driver.bon --problems`): the table's rows and columns, bad files
named by their line, labelling by math-verify into a samples file that `--samples` reads back, the whole command
with a stand-in selector, and one real run with a tiny model as the generator and a copy of it as the selector
(two vLLM engines)."""
import json
import shutil
import sys
import textwrap

import pytest

import driver.bon as bon
from driver.bon import format_table, read_samples, table1
from driver.bon_problems import benchmark_settings, label_benchmark, read_benchmark, samples_row, write_samples
from driver.data.problem import DataError, RawProblem


def _cell(mean):
    return {"mean": mean, "lo": mean - 0.1, "hi": mean + 0.1}


def _result(names=("selector", "majority", "random", "pass")):
    curves = {name: {k: _cell(0.1 * i + 0.01 * int(k)) for k in ("2", "4")} for i, name in enumerate(names)}
    return {"curves": curves, "problems": 5, "judged_subsets": 3, "subsets": 10, "parse_failures": 0}


def test_the_table_has_a_row_per_metric_and_a_column_per_k():
    result = _result()
    assert list(table1(result["curves"])) == ["pass@1", "maj@k", "GenSelect@k", "pass@k"]
    lines = format_table(result).splitlines()
    assert lines[0].split() == ["metric", "k=2", "k=4"]
    assert [line.split()[0] for line in lines[1:5]] == ["pass@1", "maj@k", "GenSelect@k", "pass@k"]
    assert lines[3].split()[1:] == ["0.020", "[-0.080,", "0.120]", "0.040", "[-0.060,", "0.140]"]
    assert "5 problems" in lines[5] and "3 of 10 subsets" in lines[5]
    code = table1(_result(("selector", "random", "pass"))["curves"])  # code: no majority vote
    assert list(code) == ["pass@1", "GenSelect@k", "pass@k"]


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _row(pid, candidates, answer="4"):
    return {"id": pid, "problem": f"Compute {pid}.", "answer": answer, "candidates": candidates}


def test_bad_benchmark_files_stop_at_the_line_that_is_wrong(tmp_path):
    good = _row("a", ["Answer: 4", "Answer: 5"])
    path = _write(tmp_path / "bench.jsonl", [good, "{not json"])
    with pytest.raises(DataError, match=r"bench.jsonl:2: not valid JSON"):
        read_benchmark(benchmark_settings(path))
    _write(path, [good, _row("b", ["Answer: 4", "Answer: 4", "Answer: 1"])])
    with pytest.raises(DataError, match=r"bench.jsonl:2: 3 candidates, the first row has 2"):
        read_benchmark(benchmark_settings(path))
    with pytest.raises(DataError, match=r"--problems .*missing.jsonl: no such file"):
        read_benchmark(benchmark_settings(tmp_path / "missing.jsonl"))
    _write(path, [good, {"id": "c", "problem": "Compute c.", "answer": "1"}])  # problems only, no generator
    assert bon.main(["--selector", "nowhere", "--problems", str(path), "--ks", "2"]) == 2


def test_a_problems_only_file_without_a_generator_says_which_line_and_what_to_add(tmp_path, capsys):
    path = _write(tmp_path / "bench.jsonl", [{"id": "c", "problem": "Compute c.", "answer": "1"}])
    assert bon.main(["--selector", "nowhere", "--problems", str(path), "--ks", "2"]) == 2
    err = capsys.readouterr().err
    assert "bench.jsonl:1: column 'candidates'" in err and "needs --generator" in err
    assert bon.main(["--selector", "m", "--samples", str(path), "--generator", "g"]) == 2
    assert "--generator needs --problems" in capsys.readouterr().err
    assert bon.main(["--selector", "m", "--problems", str(path), "--generator", str(tmp_path / "none")]) == 2
    assert "no such folder" in capsys.readouterr().err   # the generator folder is checked before any engine
    assert bon.main(["--selector", "m", "--problems", str(path), "--generator", "g", "--ks", "2,32"]) == 2
    assert "every k must be in 1..16 (--samples-per-problem)" in capsys.readouterr().err


def test_candidates_are_labelled_by_math_verify_and_round_trip_through_the_samples_file(tmp_path):
    rows = [_row("a", ["2 + 2 = 4\nAnswer: 4", "Answer: 5", "so \\boxed{4}"]),
            _row("b", ["Answer: 1/2", "Answer: 0.5", "no answer"], answer="\\frac{1}{2}")]
    problems = read_benchmark(benchmark_settings(_write(tmp_path / "bench.jsonl", rows)))
    labelled, stats = label_benchmark(problems)
    assert [p.labels for p in labelled] == [(1.0, 0.0, 1.0), (1.0, 1.0, 0.0)]
    assert stats.to_dict()["verifiers"]["math-verify"]["correct"] == 4
    back = read_samples(write_samples(labelled, tmp_path / "b.samples.jsonl"))
    assert [(s.id, s.texts, s.answers, s.rewards) for s in back] == [
        (p.id, p.candidates, p.candidate_answers, p.labels) for p in labelled]
    code = RawProblem("c", "code", "def f():", "def check(f): pass", ("x", "y"), ("x", "y"), labels=(1.0, 0.0))
    assert samples_row(code)["answers"] == [None, None]   # code: no stated answers to vote on


class FakeEngine:
    """Stands in for driver.bon.LocalEngine: `run(call)` awaits `call(worker)` with a worker whose solutions say
    which problem and sample they are (even samples state the answer 4); counts the problems it was asked for."""

    def __init__(self):
        self.asked = []

    def run(self, call):
        import asyncio
        from types import SimpleNamespace

        async def sample_solutions(problems, n, temperature, max_tokens, seed):
            self.asked += [pid for pid, _, _ in problems]
            return [[SimpleNamespace(response_text=f"{pid} sample {i}\nAnswer: {4 + i % 2}", truncated=False,
                                     response_length=5) for i in range(n)] for pid, _, _ in problems]

        return asyncio.run(call(SimpleNamespace(sample_solutions=sample_solutions)))


def test_sampling_resumes_from_its_cache_and_other_settings_sample_again(tmp_path):
    from driver.bon_problems import sample_benchmark, sampling_cache

    generator = tmp_path / "gen"
    generator.mkdir()
    (generator / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    (generator / "tokenizer.json").write_text("{}")
    (generator / "model.safetensors").write_bytes(b"")
    bench = _write(tmp_path / "bench.jsonl", [{"id": f"p{i}", "problem": f"Compute {i}.", "answer": "4"}
                                              for i in range(20)])
    cfg = benchmark_settings(bench, str(generator), k=4)
    cache = sampling_cache(tmp_path / "out.samples.jsonl", cfg)
    first = FakeEngine()
    problems, record = sample_benchmark(cfg, first, cache, progress=False)
    assert len(first.asked) == 20 and record["samples"] == 80 and cache.is_file()
    assert problems[3].candidates[1] == "p3 sample 1\nAnswer: 5" and problems[3].candidate_answers[:2] == ("4", "5")
    again = FakeEngine()
    assert sample_benchmark(cfg, again, cache, progress=False)[0] == problems and again.asked == []
    lines = cache.read_text().splitlines()
    cache.write_text(lines[0] + "\n")  # interrupted after the first chunk: only the rest is sampled
    rest = FakeEngine()
    assert sample_benchmark(cfg, rest, cache, progress=False)[0] == problems and rest.asked == [f"p{i}" for i in
                                                                                             range(16, 20)]
    hotter = benchmark_settings(bench, str(generator), k=4, temperature=0.7)
    assert sampling_cache(tmp_path / "out.samples.jsonl", hotter) != cache


def test_a_selector_config_that_forces_the_judgment_reads_the_selector_in_that_form(tmp_path):
    """`--config smollm2` (`rollout.response_form.name: forced_judgment`) gives the selector's engine the forced form
    with the config's reasoning budget; without a config, the plain form (nothing starts here)."""
    from actors.rollout.forced_judgment import ForcedJudgment
    from actors.rollout.response_forms import FreeText
    from driver.bon import selector_engine

    from core.config import load_config

    forced = selector_engine(str(tmp_path / "export"), config="smollm2")
    assert isinstance(forced.response_form, ForcedJudgment)
    assert forced.response_form.reasoning_budget == load_config("smollm2").rollout.response_form["reasoning_budget"]
    assert forced.worker is None                             # started on first use only
    assert isinstance(selector_engine(str(tmp_path / "export")).response_form, FreeText)


def test_engines_run_in_the_dtype_of_the_config_else_float32(tmp_path):
    from driver.evaluate import engine_dtype

    assert engine_dtype(str(tmp_path / "model"), "paper_math") == "bfloat16"   # the config's model.dtype
    assert engine_dtype(str(tmp_path / "model")) == "float32"                  # no run beside it, no config
    assert engine_dtype(str(tmp_path / "model"), "paper_math", "float32") == "float32"   # --dtype wins


def _oracle(tasks):
    return [max(range(t.num_candidates), key=lambda i: t.labels[i]) for t in tasks]


def test_the_command_on_a_file_with_candidates_writes_the_table_and_samples_that_reproduce_it(tmp_path, monkeypatch,
                                                                                              capsys):
    import random

    rng = random.Random(0)
    rows = [_row(f"p{i}", [f"Answer: {rng.choice([4, 4, 5, 6])}" for _ in range(4)]) for i in range(8)]
    bench = _write(tmp_path / "bench.jsonl", rows)
    monkeypatch.setattr(bon, "knockout_chooser", lambda *args, **kwargs: _oracle)
    monkeypatch.chdir(tmp_path)
    assert bon.main(["--selector", str(tmp_path / "sel" / "export"), "--problems", str(bench), "--ks", "2,4"]) == 0
    out = tmp_path / "runs" / "bon" / "bench-sel.json"
    result = json.loads(out.read_text())
    assert list(result["table"]) == ["pass@1", "maj@k", "GenSelect@k", "pass@k"]
    for k, cell in result["table"]["pass@k"].items():  # an oracle selector is pass@k
        assert result["table"]["GenSelect@k"][k] == pytest.approx(cell)
    assert result["labels"]["verifiers"]["math-verify"]["correct"] > 0
    assert "GenSelect@k" in capsys.readouterr().out
    again = tmp_path / "again.json"
    assert bon.main(["--selector", "sel", "--samples", result["samples"], "--ks", "2,4", "--out", str(again)]) == 0
    assert json.loads(again.read_text())["curves"] == result["curves"]


def test_one_engine_samples_and_selects_only_when_both_paths_name_one_folder(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "model")
    assert bon.same_model(str(tmp_path / "model"), str(tmp_path / "link"))
    assert bon.same_model(str(tmp_path / "model") + "/", str(tmp_path / "model"))
    assert not bon.same_model(str(tmp_path / "other"), str(tmp_path / "model"))
    assert not bon.same_model(None, str(tmp_path / "model")) and not bon.same_model("", str(tmp_path / "model"))


@pytest.mark.slow
def test_a_tiny_model_samples_a_benchmark_and_selects_and_the_samples_reproduce_the_table(tmp_path, monkeypatch):
    """For real, in this process: a tiny model (vLLM) writes 4 solutions to each of 6 procedural problems, a stand-in
    judge labels them (the tiny model's text rarely states an answer, so math-verify would mark all wrong), a copy of
    the model in another folder selects by a knockout of pairs (two engines, as with a generator and a selector of
    their own); the samples file then reproduces the table through `--samples`, with the selector's recorded choices
    replayed."""
    from tiny_recipe.config import TinyModelConfig
    from driver.data import procedural
    from tiny_recipe.model import build_tiny_model

    rows = procedural.generate(6, 2, seed=5, spec=procedural.ProceduralSpec())
    bench = _write(tmp_path / "bench.jsonl", [{"id": r["id"], "problem": r["problem"], "answer": r["answer"]}
                                              for r in rows])
    (tmp_path / "parity_judge.py").write_text(textwrap.dedent('''
        def judge(problem, candidate, answer, **extra):
            """Right when the text has an even length: mixed labels for whatever the tiny model writes."""
            return len(candidate) % 2 == 0
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    texts = [r["problem"] + "\n" + "\n".join(r["candidates"]) + "\nJudgment: 1" for r in rows] * 10
    model = build_tiny_model(TinyModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                                             intermediate_size=128, vocab_size=256, max_position_embeddings=512),
                             texts, tmp_path / "tiny", seed=0)
    seen = {}
    real = bon.knockout_chooser

    def recording(*args, **kwargs):
        choose = real(*args, **kwargs)
        return lambda tasks: [seen.setdefault(t.prompt_id, c) for t, c in zip(tasks, choose(tasks))]

    monkeypatch.setattr(bon, "knockout_chooser", recording)
    out = tmp_path / "bon.json"
    args = ["--selector", str(model), "--ks", "2,4", "--seed", "1", "--out", str(out)]
    generator = shutil.copytree(model, tmp_path / "generator")
    assert not bon.same_model(str(generator), str(model))
    assert bon.main(args + ["--problems", str(bench), "--generator", str(generator), "--samples-per-problem", "4",
                            "--max-tokens", "24", "--label-function", "parity_judge:judge"]) == 0
    result = json.loads(out.read_text())
    table = result["table"]
    assert list(table) == ["pass@1", "maj@k", "GenSelect@k", "pass@k"] and result["problems"] == 6
    for k in ("2", "4"):
        assert set(table["pass@k"][k]) == {"mean", "lo", "hi"}
        for row in table.values():
            assert row[k]["lo"] <= row[k]["mean"] <= row[k]["hi"]
        assert table["pass@k"][k]["mean"] >= table["GenSelect@k"][k]["mean"] - 1e-9  # C(4, k) <= draws: exact
        assert table["pass@k"][k]["mean"] >= table["pass@1"][k]["mean"]
    assert result["judged_subsets"] > 0 and result["generator"]["samples"] == 24
    samples = read_samples(result["samples"])
    assert len(samples) == 6 and all(len(s.texts) == 4 for s in samples)
    monkeypatch.setattr(bon, "knockout_chooser", lambda *a, **k: lambda tasks: [seen[t.prompt_id] for t in tasks])
    again = tmp_path / "again.json"
    assert bon.main(args[:-1] + [str(again), "--samples", result["samples"]]) == 0
    assert json.loads(again.read_text())["table"] == table
    sys.modules.pop("parity_judge", None)

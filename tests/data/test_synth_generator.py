"""Model-sampled candidates (`data.source=model`): bad inputs refused before anything starts,
the samples feed the same label/filter/build/manifest stages as every other source, the manifest records the
generator, its sampling settings and pass rates; and (slow) the real thing: the tiny model sampled by rollout
actors on vLLM through `python -m driver.synth`."""
import json
from dataclasses import replace

import pytest

from core.algo.passk import pass_at_k
from core.config import DataConfig
from core.records import Rollout
from driver import synth
from driver.data import generated, sources
from driver.data.pipeline import build_dataset
from driver.data.problem import RawProblem


class WordTokenizer:
    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": text.split()}


class FakeProvider:
    key = "words-v1"

    def load(self, corpus):
        return WordTokenizer(), {"model": "words"}


def fake_model_folder(path):
    """A folder that passes the model-folder check (nothing here loads it)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen3", "max_position_embeddings": 4096}))
    (path / "tokenizer.json").write_text("{}")
    (path / "model.safetensors").write_bytes(b"")
    return path


@pytest.fixture
def no_engine(monkeypatch):
    """Fails the test if anything tries to start the sampler's actors."""
    def refuse(self):
        raise AssertionError("the sampler was started")
    monkeypatch.setattr(generated.RaySampler, "__enter__", refuse)


def _synth(tmp_path, *overrides):
    return synth.main(["selector", f"data.out_dir={tmp_path}/ds", f"model.cache_dir={tmp_path}/m",
                       "data.num_problems=10", *overrides, "--quiet"])


def bad_folder(kind, tmp):
    """A generator path that is not a model folder, of the given kind."""
    if kind == "missing":
        return tmp / "missing"
    if kind == "file":
        (tmp / "weights.bin").write_bytes(b"")
        return tmp / "weights.bin"
    folder = fake_model_folder(tmp / kind)
    if kind == "empty":
        for f in folder.iterdir():
            f.unlink()
    elif kind == "no_weights":
        (folder / "model.safetensors").unlink()
    elif kind == "no_tokenizer":
        (folder / "tokenizer.json").unlink()
    elif kind == "no_model_type":
        (folder / "config.json").write_text("{}")
    return folder


@pytest.mark.parametrize("kind, reason", [
    ("missing", "no such folder"), ("file", "not a model folder"), ("empty", "config.json"),
    ("no_weights", "weights"), ("no_tokenizer", "tokenizer"), ("no_model_type", "model_type"),
])
def test_a_generator_path_that_is_not_a_model_folder_is_one_error_line(tmp_path, capsys, no_engine, kind, reason):
    path = bad_folder(kind, tmp_path)
    assert _synth(tmp_path, "data.source=model", f"data.generator={path}") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: data.generator={path}: ") and reason in err[0], err
    assert not (tmp_path / "ds").exists() or not any((tmp_path / "ds").iterdir())


@pytest.mark.parametrize("overrides, key", [
    (["data.candidates_per_problem=1"], "data.candidates_per_problem"),
    (["data.candidates_per_problem=0"], "data.candidates_per_problem"),
    (["data.generator="], "data.generator"),
    (["data.generator_problems=model"], "data.generator_problems"),
    (["data.generator_temperature=0"], "data.generator_temperature"),
])
def test_bad_sampling_settings_are_refused_by_the_config(tmp_path, capsys, no_engine, overrides, key):
    folder = fake_model_folder(tmp_path / "gen")
    assert _synth(tmp_path, "data.source=model", f"data.generator={folder}", *overrides) == 2
    err = capsys.readouterr().err.strip()
    assert key in err and "K" in err if "candidates_per_problem" in key else key in err


def test_k_below_two_is_refused_by_the_source_as_well(tmp_path):
    """A DataConfig built in code skips load_config: the source checks K itself, before anything starts."""
    cfg = DataConfig(source="model", generator=str(fake_model_folder(tmp_path / "gen")), candidates_per_problem=1)
    with pytest.raises(generated.DataError, match="candidates_per_problem=1.*>= 2"):
        build_dataset(cfg, FakeProvider(), progress=False, sampler_factory=lambda: pytest.fail("started"))


class FakeSampler:
    """Answers like a generator that solves problem i with probability (i % 4) / 4: the first (i % 4) * K / 4
    samples are right (`Answer: <reference>`), the others wrong; the problems' references come from the
    source the generator is asked to solve."""

    def __init__(self, references):
        self.references, self.calls = references, []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __call__(self, problems, n, temperature, max_tokens, seed):
        self.calls.append((len(problems), n, temperature, max_tokens, seed))
        out = []
        for pid, text, domain in problems:
            assert domain == "math" and text
            right = (int(pid.rsplit("-", 1)[-1]) % 4) * n // 4
            ref = self.references[pid]
            texts = [f"step\nAnswer: {ref}" if j < right else f"step\nAnswer: {ref}1" for j in range(n)]
            out.append([Rollout(pid, [1], [2] * (j + 1), [-0.1] * (j + 1), t, 0, "length" if j == 0 else "stop")
                        for j, t in enumerate(texts)])
        return out


def test_model_samples_feed_the_same_stages_and_the_manifest_records_the_generator(tmp_path):
    folder = fake_model_folder(tmp_path / "gen")
    cfg = DataConfig(source="model", generator=str(folder), num_problems=24, candidates_per_problem=8,
                     generator_temperature=0.7, generator_max_tokens=64, out_dir=str(tmp_path / "ds"),
                     max_correct_fraction=0.5)
    problems = sources.load_problems(replace(cfg, source="procedural_math")).problems
    sampler = FakeSampler({p.id: p.reference for p in problems})
    res = build_dataset(cfg, FakeProvider(), progress=False, sampler_factory=lambda: sampler)
    m, c = res.manifest, res.manifest["counts"]
    # every problem asked once (chunks of generated.CHUNK), K samples each, the data seed in the sampling seed
    assert sum(n for n, *_ in sampler.calls) == 24 and {call[1:4] for call in sampler.calls} == {(8, 0.7, 64)}
    assert c["problems_read"] == 24 and c["candidates_read"] == 24 * 8
    assert c["candidates_correct"] + c["candidates_wrong"] + c["candidates_unverified"] == 24 * 8
    assert c["candidates_correct"] == sum((i % 4) * 2 for i in range(24))
    assert c["problems_no_correct"] == 6 and c["problems_too_many_correct"] == 6  # i % 4 == 0; 6/8 > 0.5
    assert c["problems_kept"] == 12 and c["train_prompts"] + c["heldout_prompts"] > 0
    gen = m["generator"]
    assert gen["folder"] == str(folder.resolve()) and gen["problems_from"] == "procedural_math"
    assert gen["sampling"] == {"k": 8, "temperature": 0.7, "top_p": 1.0, "max_tokens": 64, "seed": 0}
    assert gen["samples"] == 192 and gen["truncated"] == 24 and gen["mean_tokens"] == pytest.approx(4.5)
    rates = gen["pass_rates"]
    fractions = [(i % 4) / 4 for i in range(24)]
    assert rates["problems"] == 24 and rates["mean_reward"] == pytest.approx(sum(fractions) / 24)
    assert rates["solved_at_least_once"] == pytest.approx(18 / 24)
    assert set(rates["pass_at_k"]) == {"1", "2", "4", "8"}
    want = sum(pass_at_k(8, (i % 4) * 2, 4) for i in range(24)) / 24
    assert rates["pass_at_k"]["4"] == {"value": pytest.approx(want), "problems": 24}
    assert m["source_versions"]["generator"].startswith(str(folder.resolve()))
    # the selection tasks are built from the generator's texts
    from driver.data.dataset import load_dataset

    tasks = load_dataset(res.path).train
    assert tasks and all(t.candidates[0].startswith("step\nAnswer: ") for t in tasks)
    # the table driver.synth prints names the generator and its pass rates
    text = synth.format_manifest(m)
    assert str(folder.resolve()) in text and "pass@8" in text and "samples/s" in text
    # same config and generator: reused, nothing sampled; a changed generator file: a new dataset
    again = build_dataset(cfg, FakeProvider(), progress=False, sampler_factory=lambda: pytest.fail("resampled"))
    assert again.cached and again.path == res.path
    (folder / "model.safetensors").write_bytes(b"changed")
    assert build_dataset(cfg, FakeProvider(), progress=False,
                         sampler_factory=lambda: FakeSampler(sampler.references)).path != res.path


def test_an_interrupted_sampling_run_resumes_where_it_stopped(tmp_path):
    """Finished chunks are kept beside the dataset; a rerun samples only the rest, with the same seeds, and
    builds the dataset an uninterrupted run builds; the kept samples go once the dataset is written."""
    folder = fake_model_folder(tmp_path / "gen")
    cfg = DataConfig(source="model", generator=str(folder), num_problems=40, candidates_per_problem=4,
                     out_dir=str(tmp_path / "ds"))
    problems = sources.load_problems(replace(cfg, source="procedural_math")).problems
    refs = {p.id: p.reference for p in problems}

    class Crashing(FakeSampler):
        def __call__(self, problems, *args):
            if self.calls:
                raise KeyboardInterrupt("interrupted")
            return super().__call__(problems, *args)

    crashing = Crashing(refs)
    with pytest.raises(KeyboardInterrupt):
        build_dataset(cfg, FakeProvider(), progress=False, sampler_factory=lambda: crashing)
    kept = list((tmp_path / "ds").glob("*.samples.jsonl"))
    assert len(kept) == 1 and len(kept[0].read_text().splitlines()) == 1  # the first chunk of 16
    second = FakeSampler(refs)
    res = build_dataset(cfg, FakeProvider(), progress=False, sampler_factory=lambda: second)
    assert [call[0] for call in second.calls] == [16, 8]                 # chunks 16..31 and 32..39 only
    assert [call[4] for call in second.calls] == [16, 32]                # their own seeds (data.seed 0)
    gen = res.manifest["generator"]
    assert gen["samples"] == 160 and gen["resumed_samples"] == 64 and not kept[0].exists()
    whole = build_dataset(replace(cfg, out_dir=str(tmp_path / "whole")), FakeProvider(), progress=False,
                          sampler_factory=lambda: FakeSampler(refs))
    assert (whole.path / "train.jsonl").read_text() == (res.path / "train.jsonl").read_text()
    assert whole.manifest["counts"] == res.manifest["counts"]


def test_a_problems_only_file_feeds_the_generator(tmp_path):
    """data.generator_problems=file: rows of id, problem and answer only (a converted verl file, say) are the
    problems the generator solves; no placeholder candidates are needed."""
    rows = [{"id": f"q-{i:05d}", "problem": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(20)]
    path = tmp_path / "problems.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    cfg = DataConfig(source="model", generator=str(fake_model_folder(tmp_path / "gen")), generator_problems="file",
                     path=str(path), candidates_per_problem=8, out_dir=str(tmp_path / "ds"))
    res = build_dataset(cfg, FakeProvider(), progress=False,
                        sampler_factory=lambda: FakeSampler({r["id"]: r["answer"] for r in rows}))
    c = res.manifest["counts"]
    assert c["rows_read"] == 20 and c["bad_rows"] == 0 and c["candidates_read"] == 20 * 8
    assert c["problems_kept"] == 10 and res.manifest["generator"]["problems_from"] == "file"


def test_code_candidates_are_programs():
    p = RawProblem("he-0", "code", "def f(x):\n    \"\"\"Double.\"\"\"\n", "def check(c): pass", (), (),
                   entry_point="f")
    assert generated.code_program(p, "    return 2 * x\n") == p.problem + "    return 2 * x\n"
    reply = "Here:\n```python\ndef f(x):\n    return 2 * x\n```\nDone."
    assert generated.code_program(p, reply) == "def f(x):\n    return 2 * x\n"
    assert generated.code_program(p, "```python\n    return x\n```") == p.problem + "    return x\n"
    math = RawProblem("m", "math", "1+1?", "2", (), ())
    sampled = generated.with_samples(math, ["1 + 1 = 2\nAnswer: 2", "so \\boxed{3}"])
    assert sampled.candidate_answers == ("2", "3") and sampled.labels is None


# ---- the real generator: rollout actors on vLLM -------------------------------------------------------------
@pytest.mark.slow
def test_synth_samples_candidates_from_the_tiny_model(tmp_path, capsys):
    """The tiny model of the test fixtures (random weights, tokenizer trained on procedural problems) as the
    generator: one rollout actor (Ray, vLLM) samples K solutions per problem; they are labelled by math-verify
    and go through the same stages; the manifest records it all. Its samples are noise, so (almost) every
    problem ends without a correct candidate, which the counts must say."""
    from core.algo.genselect import build_prompt
    from core.chat import SEPARATOR
    from core.config import ModelConfig
    from driver.data import procedural
    from driver.models.registry import resolve_model

    rows = procedural.generate(40, 4, 0, procedural.ProceduralSpec())
    corpus = [build_prompt(r["problem"], r["candidates"]) + SEPARATOR for r in rows]
    folder = resolve_model(ModelConfig(cache_dir=str(tmp_path / "models")), corpus)
    # one chunk of 16 problems x K = 8, all in flight: more prompt tokens than one engine step takes, so vLLM
    # would split a seeded prefill over two steps, which kills its CPU engine (actors.rollout.engine_gate.TokenGate)
    k, n = 8, 16
    args = ["selector", "data.source=model", f"data.generator={folder}", f"data.num_problems={n}",
            f"data.candidates_per_problem={k}", "data.generator_max_tokens=12", f"data.out_dir={tmp_path}/ds",
            f"model.name={folder}", "rollout.kv_cache_gib=1", "rollout.max_num_seqs=128",
            "--quiet"]
    assert synth.main(args) == 0
    out = capsys.readouterr().out
    manifest = json.loads(next((tmp_path / "ds").glob("model-*/manifest.json")).read_text())
    c, gen = manifest["counts"], manifest["generator"]
    assert c["problems_read"] == n and c["candidates_read"] == n * k
    assert c["candidates_correct"] + c["candidates_wrong"] + c["candidates_unverified"] == n * k
    assert gen["samples"] == n * k and gen["sampling"]["k"] == k and gen["samples_per_s"] > 0
    assert 0 < gen["mean_tokens"] <= 12
    assert gen["pass_rates"]["problems"] <= n  # problems with at least one verified sample
    assert f"generator {folder.resolve()}" in out and "pass rates" in out

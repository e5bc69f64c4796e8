"""Versioned dataset folders: manifest counts, caching by config hash, atomic writes, validated loading."""
import json
from dataclasses import replace

import pytest

from core.config import DataConfig
from driver.data import dataset as ds
from driver.data.pipeline import build_dataset


class WordTokenizer:
    """A stand-in tokenizer: one token per whitespace-separated word (fast, deterministic)."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": text.split()}


class FakeProvider:
    key = "words-v1"

    def __init__(self):
        self.calls = 0

    def load(self, corpus):
        self.calls += 1
        assert corpus and all(isinstance(t, str) for t in corpus)
        return WordTokenizer(), {"model": "words"}


def cfg_for(tmp_path, **kw):
    return DataConfig(**{"num_problems": 60, "out_dir": str(tmp_path / "datasets"), **kw})


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ds")
    cfg = cfg_for(tmp, max_prompt_tokens=120)
    return cfg, build_dataset(cfg, FakeProvider(), progress=False)


def test_layout_and_manifest_counts_are_consistent(built):
    cfg, res = built
    files = {p.name for p in res.path.iterdir()}
    assert {"train.jsonl", "heldout.jsonl", "manifest.json", "tokenizer_corpus.txt"} <= files
    assert res.path.name == f"procedural_math-{res.manifest['hash']}"
    m = json.loads((res.path / "manifest.json").read_text())
    c = m["counts"]
    assert c["problems_read"] == 60 == c["problems_in"]
    assert c["problems_read"] == (c["problems_kept"] + c["problems_no_correct"] + c["problems_too_many_correct"]
                                  + c["problems_too_few_candidates"])
    assert c["prompts_built"] == c["prompts_kept"] + c["prompts_over_token_budget"]
    assert c["prompts_kept"] == c["train_prompts"] + c["heldout_prompts"]
    assert c["train_problems"] + c["heldout_problems"] == c["problems_kept"]
    assert m["dropped_for_budget"] == c["prompts_over_token_budget"] > 0
    assert m["prompt_tokens"]["max"] <= 120
    lines = lambda f: sum(1 for _ in (res.path / f).open())  # noqa: E731
    assert lines("train.jsonl") == c["train_prompts"] and lines("heldout.jsonl") == c["heldout_prompts"]
    assert sum(m["train"]["candidates_histogram"].values()) == c["train_prompts"]
    assert m["seed"] == cfg.seed and m["config"]["num_problems"] == 60 and m["schema_version"] == ds.SCHEMA_VERSION
    assert "math-verify" in m["source_versions"] and m["tokenizer"]["key"] == "words-v1" and m["created"]


def test_loaded_rows_respect_the_builder_rules_and_split_by_problem(built):
    cfg, res = built
    data = ds.load_dataset(res.path)
    assert not {t.problem_id for t in data.train} & {t.problem_id for t in data.heldout}
    for t in data.train + data.heldout:
        assert cfg.min_candidates <= t.num_candidates <= cfg.max_candidates
        assert any(t.correct) and not all(t.correct)
    assert len({t.prompt_id for t in data.train + data.heldout}) == len(data.train) + len(data.heldout)


def test_unchanged_config_is_reused_and_changed_config_makes_a_new_dataset(built, tmp_path):
    cfg, res = built
    provider = FakeProvider()
    again = build_dataset(cfg, provider, progress=False)
    assert again.cached and again.path == res.path and provider.calls == 0
    assert ds.dataset_key(replace(cfg, out_dir="/elsewhere"), {}, "t") == ds.dataset_key(cfg, {}, "t")
    for change in ({"seed": 1}, {"max_candidates": 6}, {"candidate_error_rate": 0.5}, {"train_max_candidates": 2}):
        assert ds.dataset_key(replace(cfg, **change), {}, "t") != ds.dataset_key(cfg, {}, "t")
    assert ds.dataset_key(cfg, {"math-verify": "0.9.0"}, "t") != ds.dataset_key(cfg, {"math-verify": "1.0"}, "t")
    assert ds.dataset_key(cfg, {}, "t1") != ds.dataset_key(cfg, {}, "t2")


def test_writes_are_atomic(built, tmp_path):
    _, res = built
    data = ds.load_dataset(res.path)
    out = tmp_path / "d-1"
    ds.write_dataset(out, data.train, data.heldout, data.manifest)
    assert ds.is_complete(out) and not list(tmp_path.glob(".d-1.tmp-*"))
    partial = tmp_path / "d-2"
    partial.mkdir()
    (partial / "train.jsonl").write_text("")
    assert not ds.is_complete(partial)
    with pytest.raises(FileNotFoundError, match="missing"):
        ds.load_dataset(partial)


def test_loader_reports_bad_rows_with_file_and_line(built, tmp_path):
    _, res = built
    rows = (res.path / "heldout.jsonl").read_text().splitlines()
    bad = json.loads(rows[0])
    bad["labels"] = bad["labels"][:-1]
    path = tmp_path / "heldout.jsonl"
    path.write_text("\n".join([rows[1], json.dumps(bad), "{oops", rows[2]]) + "\n")
    with pytest.raises(ds.BadDatasetRow, match=rf"{path}:2: .*labels"):
        ds.load_tasks(path)
    seen = []
    assert len(ds.load_tasks(path, bad_rows="skip", on_bad=seen.append)) == 2
    assert [s.split(": ")[0] for s in seen] == [f"{path}:2", f"{path}:3"]


def test_file_source_bad_rows_are_counted_in_the_manifest(tmp_path):
    good = [{"id": f"m{i}", "problem": f"{i}+1?", "answer": str(i + 1),
             "candidates": [f"Answer: {i + 1}", f"Answer: {i}", f"Answer: {i + 2}", f"Answer: {i}"]}
            for i in range(12)]
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join([json.dumps(r) for r in good[:5]] + ["{broken"] + [json.dumps(r) for r in good[5:]]))
    cfg = cfg_for(tmp_path, source="file", path=str(path))
    res = build_dataset(cfg, FakeProvider(), progress=False)
    assert res.path.name.startswith("mine-")
    assert res.manifest["counts"]["bad_rows"] == 1 and res.manifest["bad_rows"]["examples"][0].startswith(f"{path}:6:")
    assert res.manifest["counts"]["problems_read"] == 12 == res.manifest["counts"]["problems_kept"]
    with pytest.raises(Exception, match=r"mine\.jsonl:6"):
        build_dataset(replace(cfg, bad_rows="error"), FakeProvider(), progress=False)


@pytest.mark.slow
def test_humaneval_dataset_labels_candidates_by_running_tests(tmp_path):
    pytest.importorskip("sandbox.pool", reason="the sandbox package is not available yet")
    from sandbox.backends.base import SandboxUnavailable

    cfg = cfg_for(tmp_path, source="humaneval", num_problems=4, max_prompt_tokens=100_000)
    try:
        res = build_dataset(cfg, FakeProvider(), progress=False)
    except SandboxUnavailable as e:
        pytest.skip(f"sandbox backend unavailable here: {e}")
    m = res.manifest
    assert m["counts"]["candidates_labeled"] == 4 * cfg.candidates_per_problem and m["labeling"]["errors"] == 0
    data = ds.load_dataset(res.path)
    for t in data.train + data.heldout:
        assert t.domain == "code" and t.entry_point and any(t.correct) and not all(t.correct)


class ContextProvider(FakeProvider):
    """A provider whose model reads at most `positions` tokens."""
    key = "words-ctx"

    def __init__(self, positions):
        super().__init__()
        self.positions = positions

    def context_length(self):
        return self.positions


def test_a_budget_above_the_models_context_is_refused_before_building(tmp_path):
    """A token budget above what the model can read is refused by name, in the config and before any building."""
    from core.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"data\.max_prompt_tokens=16384.*4096"):
        load_config("selector", ["data.max_prompt_tokens=16384"])
    provider = ContextProvider(100)
    with pytest.raises(ValueError, match=r"data\.max_prompt_tokens=120 .*100"):
        build_dataset(cfg_for(tmp_path, max_prompt_tokens=120), provider, progress=False)
    assert provider.calls == 0 and not (tmp_path / "datasets").exists()


def test_problems_that_lose_every_prompt_to_the_budget_are_listed(built):
    """Problems with no prompt under the budget are counted and named in the manifest, not dropped silently."""
    cfg, res = built
    m = res.manifest
    c = m["counts"]
    lost = m["problems_over_token_budget"]
    assert c["problems_over_token_budget"] == len(lost) > 0
    data = ds.load_dataset(res.path)
    with_prompts = {t.problem_id for t in data.train + data.heldout}
    assert not set(lost) & with_prompts
    assert len(with_prompts) + len(lost) == c["problems_kept"]
    assert m["train"]["problems"] + m["heldout"]["problems"] + len(lost) == c["problems_kept"]


def test_the_statistics_account_for_every_row_and_every_candidate(tmp_path):
    """What `driver.synth` prints adds up: rows, candidates (labels per verifier), problems, prompts."""
    from driver.synth import format_manifest

    rows = [{"id": f"m{i}", "problem": f"{i}+1?", "answer": str(i + 1),
             "candidates": [f"Answer: {i + 1}", f"Answer: {i}", f"Answer: {i + 2}", f"Answer: {i}"]}
            for i in range(12)]
    rows[3]["candidates"] = ["The answer is 4.", "2^(m+1)", "No idea.", "Answer: 5"]  # prose, formula, none
    lines = [json.dumps(r) for r in rows]
    lines.insert(5, '{"id": "broken", ')
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(lines) + "\n")
    res = build_dataset(cfg_for(tmp_path, source="file", path=str(path), max_rows=10, max_prompt_tokens=60),
                        FakeProvider(), progress=False)
    m, c = res.manifest, res.manifest["counts"]
    assert (c["rows_read"], c["bad_rows"], c["rows_over_cap"], c["problems_read"]) == (13, 1, 2, 10)
    assert c["candidates_read"] == 40 == c["candidates_correct"] + c["candidates_wrong"] + c["candidates_unverified"]
    assert m["labeling"]["verifiers"]["math-verify"]["correct"] == c["candidates_correct"]
    assert c["problems_read"] == (c["problems_kept"] + c["problems_no_correct"] + c["problems_too_many_correct"]
                                  + c["problems_too_few_candidates"])
    with_prompts = m["train"]["problems"] + m["heldout"]["problems"]
    assert c["problems_kept"] == with_prompts + c["problems_without_prompts"] + c["problems_over_token_budget"]
    assert c["prompts_built"] == c["prompts_kept"] + c["prompts_over_token_budget"]
    text = format_manifest(m, report=True)
    for key in ("rows_read", "rows_over_cap", "candidates_unverified", "problems_over_token_budget"):
        assert f"  {key:<34} {c[key]:>10}" in text
    assert "labels by verifier" in text and "m3#0: 'The answer is 4.' vs '4'" in text
    for problem_id in m["problems_over_token_budget"][:20]:
        assert problem_id in text


def test_a_key_added_later_leaves_the_hash_of_datasets_built_before_it_at_its_default(built):
    cfg, _ = built
    assert "train_max_candidates" not in ds.config_dict(cfg)  # so the datasets cached before it keep their names
    assert ds.config_dict(replace(cfg, train_max_candidates=2))["train_max_candidates"] == 2


def test_train_max_candidates_caps_training_prompts_and_leaves_the_heldout_set_as_it_was(built):
    cfg, res = built
    pairs = build_dataset(replace(cfg, train_max_candidates=2), FakeProvider(), progress=False)
    capped, before = ds.load_dataset(pairs.path), ds.load_dataset(res.path)
    assert capped.train and {t.num_candidates for t in capped.train} == {2}
    assert [t.prompt for t in capped.heldout] == [t.prompt for t in before.heldout]  # its draws ignore the cap
    assert max(t.num_candidates for t in capped.heldout) > 2

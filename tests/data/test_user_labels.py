"""Labels from the user: a file's `candidate_labels` kept as they are, `data.label_function` in place of the
verifiers (failures leave a candidate unlabelled and counted), and training data without references refused unless
a reward function scores it."""
import json
import sys
import textwrap
import time
from dataclasses import replace

import pytest

from core.config import DataConfig
from core.plugins import PluginError
from driver.data import dataset as ds
from driver.data.labeling import label_problems
from driver.data.pipeline import build_dataset
from driver.data.problem import DataError, RawProblem
from driver.data.user_labels import check_rewardable, label_function_identity

JUDGE = '''
    import time

    def judge(problem, candidate, answer, *, index=0, shift=0, **extra):
        """The team's judge: a candidate is right when it ends with the answer (plus `shift`, a param of the
        section, for a numeric answer); markers for the failure cases."""
        if shift:
            return candidate.strip().endswith(str(int(answer) + shift))
        if candidate == "HANG":
            time.sleep(600)
        if candidate == "RAISE":
            raise RuntimeError("judge model offline")
        if candidate == "NONE":
            return None
        if candidate == "HALF":
            return 0.5
        return candidate.strip().endswith(answer)
'''


@pytest.fixture()
def judge_module(tmp_path, monkeypatch):
    (tmp_path / "team_judge.py").write_text(textwrap.dedent(JUDGE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "team_judge:judge"
    sys.modules.pop("team_judge", None)


class WordTokenizer:
    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": text.split()}


class FakeProvider:
    key = "words-v1"

    def load(self, corpus):
        return WordTokenizer(), {"model": "words"}


def problem(pid, candidates, reference="7", labels=None):
    return RawProblem(pid, "math", f"problem {pid}", reference, tuple(candidates), tuple(candidates),
                      labels=labels, origin=f"file:{pid}")


def test_file_labels_are_kept_and_the_function_labels_the_rest(judge_module):
    given = problem("given", ["a", "b", "c"], labels=(1.0, 0.0, 0.25))
    judged = problem("judged", ["x = 7", "x = 8", "HALF", "RAISE", "NONE"])
    labeled, stats = label_problems([given, judged], label_function=judge_module)
    assert labeled[0] == given
    assert labeled[1].labels == (1.0, 0.0, 0.5) and labeled[1].candidates == ("x = 7", "x = 8", "HALF")
    report = stats.to_dict()
    assert report["checked"] == 8 and report["correct"] == 2 and report["wrong"] == 4 and report["error"] == 2
    fn = report["verifiers"]["label_function"]
    assert any("judge model offline" in e for e in fn["examples"]["error"])
    assert any("returned None" in e for e in fn["examples"]["error"])
    assert report["verifiers"]["candidate_labels"]["correct"] == 1


def test_a_hanging_label_function_is_a_counted_timeout(judge_module):
    from driver.data import user_labels

    started = time.monotonic()
    labels = user_labels.label_with_function([problem("h", ["HANG", "7"])], judge_module, processes=1,
                                             timeout_s=1.0)
    assert labels == [None, 1.0] and time.monotonic() - started < 30


def test_a_label_function_that_does_not_fit_is_refused_before_any_worker(tmp_path):
    with pytest.raises(PluginError, match=r"data\.label_function\.name='nowhere:judge'"):
        label_problems([problem("p", ["1", "2"])], label_function="nowhere:judge")


def test_the_label_functions_file_is_part_of_the_dataset_identity(judge_module, tmp_path):
    before = label_function_identity(judge_module)
    time.sleep(0.01)
    (tmp_path / "team_judge.py").write_text(textwrap.dedent(JUDGE) + "\n# a change\n")
    assert label_function_identity(judge_module) != before and "team_judge.py" in before


def _labelled_file(path, n=12):
    rows = [{"id": f"q{i}", "problem": f"Is {i} even?", "candidates": [f"yes {i}", f"no {i}", f"maybe {i}"],
             "candidate_labels": [i % 2 == 0, i % 2 == 1, 0.5]} for i in range(n)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_a_file_with_its_own_labels_and_no_answers_builds_and_needs_a_reward_function(tmp_path):
    path = _labelled_file(tmp_path / "judged.jsonl")
    cfg = DataConfig(source="file", path=str(path), out_dir=str(tmp_path / "ds"), max_candidates=3, heldout_fraction=0.25)
    built = build_dataset(cfg, FakeProvider(), progress=False)
    counts, labeling = built.manifest["counts"], built.manifest["labeling"]
    assert counts["problems_read"] == 12 and counts["bad_rows"] == 0 and counts["candidates_unverified"] == 0
    assert labeling["verifiers"]["candidate_labels"]["correct"] == 12 and "math-verify" not in labeling["verifiers"]
    data = ds.load_dataset(built.path)
    for task in data.train + data.heldout:
        i = int(task.problem_id[1:])
        want = {f"yes {i}": float(i % 2 == 0), f"no {i}": float(i % 2 == 1), f"maybe {i}": 0.5}
        assert dict(zip(task.candidates, task.labels)) == {c: want[c] for c in task.candidates}
        assert task.reference == ""
    with pytest.raises(DataError, match="no reference answer.*verifier.reward.name"):
        check_rewardable(data.train, "")
    check_rewardable(data.train, "actors.verifier.user_reward:stored_label")


def test_a_label_function_labels_sampled_or_given_candidates_in_the_dataset(tmp_path, judge_module):
    rows = [{"id": f"q{i}", "problem": f"{i} + 1?", "answer": str(i + 1),
             "candidates": [f"so {i + 1}", f"so {i + 2}", f"so {i}"]} for i in range(12)]
    path = tmp_path / "plain.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    cfg = DataConfig(source="file", path=str(path), out_dir=str(tmp_path / "ds"), max_candidates=3,
                     label_function={"name": judge_module})
    built = build_dataset(cfg, FakeProvider(), progress=False)
    assert built.manifest["labeling"]["verifiers"]["label_function"]["correct"] == 12
    assert built.manifest["config"]["label_function"] == judge_module  # a function without params: its path alone
    assert "label_function" in built.manifest["source_versions"]
    plain = build_dataset(replace(cfg, label_function={"name": ""}), FakeProvider(), progress=False)
    assert plain.path != built.path and "label_function" not in plain.manifest["config"]
    # the section's params reach the function (with shift=1 the candidate one past the answer is right) and enter
    # the dataset's key
    shifted = build_dataset(replace(cfg, label_function={"name": judge_module, "shift": 1}), FakeProvider(),
                            progress=False)
    assert shifted.path not in (built.path, plain.path)
    assert shifted.manifest["config"]["label_function"] == {"name": judge_module, "shift": 1}
    data = ds.load_dataset(shifted.path)
    for task in data.train + data.heldout:
        i = int(task.problem_id[1:])
        assert {c: label for c, label in zip(task.candidates, task.labels) if label == 1.0} == {f"so {i + 2}": 1.0}


def test_the_dataset_key_is_the_plain_keys_without_a_label_function_or_its_params():
    """Datasets cached when data.label_function was a plain string keep their folders: '' is left out of the key,
    a function without params is its path, as then."""
    plain = ds.config_dict(DataConfig())
    assert "label_function" not in plain
    named = ds.config_dict(DataConfig(label_function={"name": "team_judge:judge"}))
    assert named == {**plain, "label_function": "team_judge:judge"}

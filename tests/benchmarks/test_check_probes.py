"""benchmarks/check_probes.py: each variant patches the data the way its docstring says (patches undone after)."""
import driver.models.pretrain as pretrain
from benchmarks import check_probes
from driver.data import procedural, worked
from driver.data.slips import slip_kind


def _wrong_kinds(monkeypatch, final_only):
    monkeypatch.setattr(worked.Plan, "possible_slips", worked.Plan.possible_slips)
    check_probes.only_miscopies(final_only)
    rows = procedural.generate(40, 8, seed=3, spec=procedural.ProceduralSpec())
    return [(c, slip_kind(c)) for r in rows for c in r["candidates"] if c.rsplit("Answer: ", 1)[1] != r["answer"]]


def test_miscopy_variants_keep_only_copy_slips(monkeypatch):
    kinds = [kind for _, kind in _wrong_kinds(monkeypatch, final_only=False)]
    # no arithmetic slip; 'none': a miscopied carry that reads consistently (it equals a value written earlier)
    assert set(kinds) <= {"miscopy", "none"} and kinds.count("miscopy") > 0.8 * len(kinds)


def test_the_final_variant_miscopies_only_the_answer_line(monkeypatch):
    for text, _ in _wrong_kinds(monkeypatch, final_only=True):
        *steps, answer = text.splitlines()
        assert steps[-1].split(" = ")[1] != answer.split(": ")[1]  # the lines are right, the copy is not
        for line in steps:
            left, result = line.split(" = ")
            assert eval(left) == int(result)  # noqa: S307 - our own generated arithmetic


def test_the_lines_variant_labels_the_corpus_and_asks_for_labelled_prompts(monkeypatch):
    monkeypatch.setattr(pretrain, "corpus_text", pretrain.corpus_text)
    seen = []
    import learnability
    monkeypatch.setattr(learnability, "main", lambda argv: seen.append(argv) or 0)
    assert check_probes.main(["lines", "selector", "data.seed=3", "--mode", "sft"]) == 0
    assert seen == [["selector", "data.seed=3", "--mode", "sft", "--line-labels"]]  # = data.line_labels=true
    monkeypatch.setattr(worked.Plan, "possible_slips", worked.Plan.possible_slips)
    assert check_probes.main(["miscopy", "selector", "--mode", "sft"]) == 0
    assert seen[1] == ["selector", "--mode", "sft"]  # the other variants pass the arguments as they are
    text = pretrain.corpus_text("Compute 1 + 2.", "1 + 2 = 3\nAnswer: 3")
    labels = {line.split("| ")[0] for line in text.split("Solution:\n")[1].splitlines() if line.strip()}
    assert len(labels) == 1 and labels.pop() in "01234567"

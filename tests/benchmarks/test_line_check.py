"""benchmarks/line_check.py: the AUC it reports."""
import pytest

from benchmarks.line_check import auc


def test_auc_is_the_probability_a_positive_outscores_a_negative_with_ties_half():
    assert auc([3, 4], [1, 2]) == 1.0
    assert auc([1, 2], [3, 4]) == 0.0
    assert auc([1, 3], [2, 2]) == 0.5
    assert auc([2], [2]) == 0.5
    assert auc([0.9, 0.8, 0.1], [0.85, 0.2]) == pytest.approx(3 / 6)  # 0.9 > both, 0.8 > 0.2 only


def test_both_scores_run_on_a_tiny_model_and_the_report_names_what_it_scored(tmp_path, capsys):
    import math

    from benchmarks.line_check import main, mark_scores, verdict_scores
    from core.config import ModelConfig
    from driver.data import procedural
    from driver.models.pretrain import corpus_text
    from driver.models.registry import resolve_model

    rows = procedural.generate(30, 2, 0, procedural.ProceduralSpec(error_rate=0.5))
    texts = [corpus_text(r["problem"], c, position=i) for i, r in enumerate(rows) for c in r["candidates"]]
    folder = resolve_model(ModelConfig(cache_dir=str(tmp_path)), texts)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    row = rows[0]
    assert math.isfinite(mark_scores(model, tokenizer, row["problem"], row["candidates"][0]))
    assert math.isfinite(verdict_scores(model, tokenizer, row["problem"], row["candidates"][0]))
    assert main(["--model", str(folder), "--problems", "3", "--verdict"]) == 0
    assert "the check's log-odds of 'wrong'" in capsys.readouterr().out


def test_in_prompt_scores_read_each_candidates_own_line_ends(tmp_path, capsys):
    """prompt_mark_scores reads log P('?') at the last token of every line of each candidate inside one selection
    prompt: checked against a hand-made reading at the tokens that end `... = <result>` lines."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from benchmarks.line_check import main, prompt_mark_scores
    from core.algo.genselect import PromptStyle, build_prompt
    from core.config import ModelConfig
    from driver.data import procedural
    from driver.models.registry import resolve_model

    rows = procedural.generate(20, 2, 0, procedural.ProceduralSpec(error_rate=0.5))
    texts = [build_prompt(r["problem"], r["candidates"], style=PromptStyle(end_lines=True, line_labels=True))
             for r in rows]
    folder = resolve_model(ModelConfig(cache_dir=str(tmp_path)), texts)
    model, tokenizer = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    row = rows[0]
    for labels in (False, True):
        scores = prompt_mark_scores(model, tokenizer, row["problem"], row["candidates"], labels)
        prompt = build_prompt(row["problem"], row["candidates"], style=PromptStyle(end_lines=True, line_labels=labels))
        enc = tokenizer(prompt, return_offsets_mapping=True, add_special_tokens=False)
        with torch.no_grad():
            logp = model(input_ids=torch.tensor([enc["input_ids"]])).logits[0].log_softmax(-1)
        mark = tokenizer("?", add_special_tokens=False)["input_ids"][0]
        blocks = prompt.split("\n\nSolution ")[1:]
        expected = []
        for i, candidate in enumerate(row["candidates"]):
            start = prompt.index(f"Solution {i}:\n") + len(f"Solution {i}:\n")
            line_ends = []
            for line in candidate.strip().split("\n"):
                shown = (f"{i}| " if labels else "") + line
                at = prompt.index(shown, start)
                line_ends.append(at + len(shown.rstrip()) - 1)
                start = at + len(shown)
            tokens = [t for t, (a, b) in enumerate(enc["offset_mapping"]) if any(a <= c < b for c in line_ends)]
            expected.append(max(logp[t, mark].item() for t in tokens))
        assert len(blocks) == len(scores) == 2
        assert scores == pytest.approx(expected)
    assert main(["--model", str(folder), "--problems", "2", "--in-prompt", "--line-labels"]) == 0
    assert "in selection prompts (line labels)" in capsys.readouterr().out

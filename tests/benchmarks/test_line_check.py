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

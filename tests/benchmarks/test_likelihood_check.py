"""benchmarks/likelihood_check.py: result spans of a worked solution, and the scores of one candidate."""
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from likelihood_check import candidate_scores, result_spans  # noqa: E402


def test_result_spans_cover_what_follows_the_last_equals_or_answer():
    text = "5 + 2 = 7\n7 * 7 = 49\nThis might be wrong.\nAnswer: 49"
    assert [text[a:b] for a, b in result_spans(text)] == ["7", "49", "49"]
    assert result_spans("no results here") == []


def test_candidate_scores_read_the_candidates_tokens_and_its_results(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from core.config import TinyModelConfig
    from driver.models.tiny import build_tiny_model

    texts = ["Problem:\nCompute 5 + 2.\n\nSolution:\n5 + 2 = 7\nAnswer: 7\n"] * 4
    build_tiny_model(TinyModelConfig(), texts, tmp_path / "m", seed=0)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "m")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "m", dtype="float32").eval()
    total, results = candidate_scores(model, tokenizer, "Compute 5 + 2.", "5 + 2 = 7\nAnswer: 7")
    head = tokenizer("Problem:\nCompute 5 + 2.\n\nSolution:\n")["input_ids"]
    ids = tokenizer("Problem:\nCompute 5 + 2.\n\nSolution:\n5 + 2 = 7\nAnswer: 7\n")["input_ids"]
    assert ids[:len(head)] == head  # the candidate's tokens start where the head ends
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1], -1)
    by_token = [float(logp[t - 1, ids[t]]) for t in range(len(head), len(ids))]
    assert total == pytest.approx(sum(by_token), abs=1e-4)
    assert results < 0 and math.isfinite(results) and results >= min(by_token)
    assert candidate_scores(model, tokenizer, "p", "no results")[1] == 0.0

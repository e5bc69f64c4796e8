"""benchmarks/induction_probe.py: its rows repeat random non-special tokens, and its reading counts a copied
repeat as right and a model that cannot copy as wrong."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from induction_probe import repeat_loss_and_accuracy, repeated_rows  # noqa: E402


class _Logits:
    def __init__(self, logits):
        self.logits = logits


class _Copier(torch.nn.Module):
    """Predicts at every position the token that followed the previous occurrence of the current token (an
    induction head written out), or token 0 where there is none: a stand-in model to test the reading alone."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab = vocab

    def forward(self, input_ids):
        logits = torch.zeros(*input_ids.shape, self.vocab)
        for b, row in enumerate(input_ids.tolist()):
            for t, token in enumerate(row):
                earlier = [k for k in range(t) if row[k] == token]
                logits[b, t, row[earlier[-1] + 1] if earlier else 0] = 1.0
        return _Logits(logits)


def test_rows_repeat_their_first_half_within_the_range():
    rows = repeated_rows(torch.Generator().manual_seed(0), 3, 10, 5, 50)
    assert rows.shape == (3, 20)
    assert torch.equal(rows[:, :10], rows[:, 10:])
    assert rows.min() >= 5 and rows.max() < 50


def test_a_copier_reads_one_and_a_constant_model_reads_about_nothing():
    rows = repeated_rows(torch.Generator().manual_seed(1), 4, 12, 1, 400)
    rows[:, :12] = torch.stack([torch.randperm(399)[:12] + 1 for _ in range(4)])  # distinct tokens in each half
    rows[:, 12:] = rows[:, :12]
    _, copied = repeat_loss_and_accuracy(_Copier(400), rows, 12)
    _, constant = repeat_loss_and_accuracy(lambda input_ids: _Logits(torch.zeros(*input_ids.shape, 400)), rows, 12)
    assert copied == 1.0 and constant < 0.05

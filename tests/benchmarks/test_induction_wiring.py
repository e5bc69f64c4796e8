"""benchmarks/induction_wiring.py: the written circuit copies at initialisation, matches contexts of several tokens,
and stays as written when frozen; solve_point_probe.py's beside layout and pointer rows."""
import random
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from induction_probe import repeat_loss_and_accuracy, repeated_rows  # noqa: E402
from induction_wiring import circuit_masks, freeze_circuit, offset_query_key, rotary_angles, wire_induction  # noqa: E402


def tiny_qwen3(vocab: int = 300):
    """An untrained Qwen3 of the default tiny shape (hidden 256, 4 heads of 64, 2 KV heads, 4 layers)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    return Qwen3ForCausalLM(Qwen3Config(vocab_size=vocab, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                                        num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                                        max_position_embeddings=1024, rope_theta=10000.0, tie_word_embeddings=True))


def test_the_constant_query_and_key_peak_at_their_offset():
    angles = rotary_angles(64, 10000.0).float()
    for offset in (1, 2, 3):
        q, k = offset_query_key(64, 10000.0, offset)

        def score(distance):  # query at position m, key at m - distance: rotate q by m, k by m - distance
            zq = torch.complex(q[:32], q[32:]) * torch.polar(torch.ones(32), angles * 100)
            zk = torch.complex(k[:32], k[32:]) * torch.polar(torch.ones(32), angles * (100 - distance))
            return (zq * zk.conj()).real.sum().item()

        scores = [score(d) for d in range(0, 40)]
        assert max(range(40), key=scores.__getitem__) == offset


def test_an_untrained_model_with_the_circuit_copies_and_one_without_does_not():
    model = tiny_qwen3().eval()
    rows = repeated_rows(torch.Generator().manual_seed(1), 8, 48, 3, 300)
    with torch.no_grad():
        before = repeat_loss_and_accuracy(model, rows, 48)[1]
        wire_induction(model, context=3)
        after = repeat_loss_and_accuracy(model, rows, 48)[1]
        # a small alphabet: one token no longer says where the copy is, three do
        small = repeated_rows(torch.Generator().manual_seed(2), 8, 48, 3, 11)
        small_after = repeat_loss_and_accuracy(model, small, 48)[1]
    assert before < 0.05
    assert after > 0.85
    assert small_after > 0.6


def test_one_token_of_context_cannot_tell_repeats_of_a_small_alphabet_apart():
    model = wire_induction(tiny_qwen3().eval(), context=1)
    small = repeated_rows(torch.Generator().manual_seed(2), 8, 48, 3, 11)
    with torch.no_grad():
        assert repeat_loss_and_accuracy(model, small, 48)[1] < 0.5


def test_a_frozen_circuit_stays_as_written_while_the_rest_trains():
    model = wire_induction(tiny_qwen3(), context=3)
    masks = circuit_masks(model, 3)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    freeze_circuit(model, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    ids = torch.randint(3, 300, (2, 32))
    for _ in range(3):
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    moved = 0
    for name, p in model.named_parameters():
        assert torch.equal(p[masks[name]], before[name][masks[name]]), name
        moved += (p[~masks[name]] != before[name][~masks[name]]).sum().item()
    assert moved > 1000
    assert masks["model.embed_tokens.weight"][:, 255].all() and not masks["model.embed_tokens.weight"][:, 64].any()


def test_the_beside_layout_writes_each_index_after_its_answer():
    from solve_point_probe import beside, pointer_lines

    prompt = "Solution 0:\n2 + 2 = 4\nAnswer: 4\nEnd of solution 0.\n\nSolution 1:\nAnswer: 5\nEnd of solution 1."
    assert beside(prompt) == ("Solution 0:\n2 + 2 = 4\nAnswer: 4 #0\nEnd of solution 0.\n\n"
                              "Solution 1:\nAnswer: 5 #1\nEnd of solution 1.")
    with pytest.raises(ValueError, match="End of solution"):
        beside("Solution 0:\nAnswer: 4")

    class Task:
        candidate_answers = ("4", "5", "4")

    lines = pointer_lines(Task(), random.Random(0)).splitlines()
    assert sorted(lines) == ["Answer: 4 #0", "Answer: 5 #1"]  # each distinct answer once, at its first candidate


def test_a_solution_is_cut_after_its_first_answer_line():
    from solve_point_probe import cut_at_answer

    assert cut_at_answer("2 + 2 = 4\nAnswer: 4\nAnswer: 5\n") == ("2 + 2 = 4\nAnswer: 4", "4")
    assert cut_at_answer("2 + 2 = 4\nAnswer: 4 #1\n") == ("2 + 2 = 4\nAnswer: 4", "4")  # an index it wrote is cut off
    assert cut_at_answer("2 + 2 = 4\n") == (None, None)

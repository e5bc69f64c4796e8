"""core.frozen.freeze_entries: masked entries keep their values through optimizer steps; bad masks are named."""
import numpy as np
import pytest
import torch

from core.frozen import freeze_entries


def test_masked_entries_never_move_and_the_rest_trains():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    mask = np.zeros((3, 4), dtype=bool)
    mask[1] = True
    before = model.weight.detach().clone()
    handles = freeze_entries(model, {"weight": mask})
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.0)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(8, 4)).pow(2).sum().backward()
        opt.step()
    assert len(handles) == 1
    assert torch.equal(model.weight[1], before[1]) and not torch.equal(model.weight[0], before[0])


def test_a_mask_for_a_missing_parameter_or_of_another_shape_is_refused():
    model = torch.nn.Linear(4, 3)
    with pytest.raises(KeyError, match="'nope'"):
        freeze_entries(model, {"nope": np.zeros((3, 4), dtype=bool)})
    with pytest.raises(ValueError, match="mask shape"):
        freeze_entries(model, {"weight": np.zeros((4, 3), dtype=bool)})

"""Parameter entries a model folder declares frozen: they keep their values through every training step.

A model may need some of its weights to stay exactly as they are (the embedded tiny model's hand-written induction
circuit is one: tiny_recipe.model.frozen_entries). The learner takes them as `{parameter name: bool array, True
where the entry never trains}` and zeroes their gradients on every backward pass (`freeze_entries`); with AdamW and
no weight decay an entry whose gradient is always 0 never moves. The learner knows nothing else of the model.
"""
from __future__ import annotations


def freeze_entries(model, masks: dict) -> list:
    """Zero the gradient of every masked entry of `model` (a torch module) on each backward pass; `masks`: {parameter
    name: bool tensor or array of the parameter's shape}. Returns the hook handles. KeyError names a parameter the
    model does not have; ValueError a mask of another shape."""
    import torch

    params = dict(model.named_parameters())
    handles = []
    for name, mask in masks.items():
        if name not in params:
            raise KeyError(f"frozen entries name {name!r}, which the model does not have")
        mask = torch.as_tensor(mask, dtype=torch.bool, device=params[name].device)
        if mask.shape != params[name].shape:
            raise ValueError(f"frozen entries of {name!r}: mask shape {tuple(mask.shape)}, parameter "
                             f"{tuple(params[name].shape)}")
        if mask.any():
            handles.append(params[name].register_hook(lambda grad, m=mask: grad.masked_fill(m, 0.0)))
    return handles

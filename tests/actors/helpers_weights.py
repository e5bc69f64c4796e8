"""What the weight-sync tests' stand-in learners share (tests/actors/test_weight_sync.py, test_weight_broadcast.py):
the fixed prompt and completion both sides score, a seeded perturbation of a model's weights, and transformers'
log-probs of the completion (the reference an engine's must equal after a sync)."""
from __future__ import annotations

PROMPT = "Problem: what is 12 + 7?\nSolution 0: 12 + 7 = 19.\nSolution 1: 12 + 7 = 20.\n"
COMPLETION = "Judgment: 0 because 12 + 7 = 19"


def perturb(model, seed: int, scale: float = 0.02) -> None:
    """Add seeded Gaussian noise of std `scale` to every parameter of `model`, in place."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)


def fixed_ids(tokenizer) -> tuple:
    """(prompt ids, completion ids) of PROMPT and COMPLETION, without special tokens."""
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    return encode(PROMPT), encode(COMPLETION)


def completion_logprobs(model, prompt_ids: list, response_ids: list) -> list:
    """Per-token log-probs (float64 softmax) of `response_ids` after `prompt_ids` under `model`."""
    import torch

    ids = torch.tensor([list(prompt_ids) + list(response_ids)])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].double(), dim=-1)
    return [logp[len(prompt_ids) + i - 1, t].item() for i, t in enumerate(response_ids)]

"""The model's own greedy solutions, as the warm-starts read them: greedy continuations of prompts in batches, the
first `Answer: X` line of a solution, and a ` #k` pointer appended to it as a training target."""
from __future__ import annotations

import contextlib
import re

ANSWER_LINE = re.compile(r"Answer: ?[^\n#]*")


def greedy_continuations(model, tokenizer, prompts: list, max_new_tokens: int, batch_size: int = 16,
                         dtype: str = "float32") -> list:
    """The model's greedy continuation (text, special tokens dropped) of each prompt (token id lists), generated in
    left-padded batches of prompts of similar length; in the order given."""
    import torch

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bfloat16" else contextlib.nullcontext())
    texts = [""] * len(prompts)
    model.eval()
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        width = max(len(prompts[i]) for i in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for j, i in enumerate(chunk):  # left padding for generation
            ids[j, width - len(prompts[i]):] = torch.tensor(prompts[i])
            mask[j, width - len(prompts[i]):] = 1
        with torch.no_grad(), autocast:
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                                 do_sample=False, pad_token_id=pad, eos_token_id=tokenizer.eos_token_id)
        for j, i in enumerate(chunk):
            texts[i] = tokenizer.decode(out[j, width:], skip_special_tokens=True)
    return texts


def first_answer(text: str):
    """(the text cut after its first `Answer: X` line, X) of a greedy solution; None when it writes no such line."""
    line = ANSWER_LINE.search(text)
    return (text[:line.end()].rstrip(), line.group()[len("Answer:"):]) if line else None


def with_pointer(tokenizer, cut: str, k: int):
    """(ids of `cut`, ids of `cut` + ` #k` + a newline, as the pretraining's answer lines end); None when the
    pointer merges into the answer's last token (not a clean target)."""
    cut_ids = tokenizer(cut, add_special_tokens=False)["input_ids"]
    full = tokenizer(f"{cut} #{k}\n", add_special_tokens=False)["input_ids"]
    return (cut_ids, full) if full[:len(cut_ids)] == cut_ids else None

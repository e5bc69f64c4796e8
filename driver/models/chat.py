"""One way to turn a GenSelect prompt into the text a model reads, shared by rollout, learner and warm-start.

A tokenizer with a chat template (SmolLM2's ChatML) gets the user message wrapped by its template with the
generation prompt appended. A tokenizer without one (the tiny model) gets the plain prompt followed by
`SEPARATOR`; the response (`Judgment: IDX` + EOS) follows directly. Both sides of RL must format
identically, or the learner's log-probs are of a different sequence than the rollout engine's.
"""
from __future__ import annotations

SEPARATOR = "\n\nResponse:\n"


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def format_prompt(tokenizer, user_text: str) -> str:
    """The full prompt text (before tokenization) for `user_text`; the response is appended after it."""
    if has_chat_template(tokenizer):
        return tokenizer.apply_chat_template([{"role": "user", "content": user_text}], tokenize=False,
                                             add_generation_prompt=True)
    return user_text + SEPARATOR


def prompt_token_ids(tokenizer, user_text: str) -> list:
    """Token ids of `format_prompt(tokenizer, user_text)` without extra special tokens (templates add their own)."""
    return tokenizer(format_prompt(tokenizer, user_text), add_special_tokens=False)["input_ids"]


def response_token_ids(tokenizer, response_text: str) -> list:
    """Token ids of a response followed by the end-of-sequence token (the warm-start target)."""
    eos = tokenizer.eos_token_id
    return tokenizer(response_text, add_special_tokens=False)["input_ids"] + ([eos] if eos is not None else [])

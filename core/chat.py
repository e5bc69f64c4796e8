"""One way to turn a GenSelect prompt into the text a model reads, shared by rollout, learner and warm-start.

A tokenizer with a chat template (SmolLM2's ChatML) gets the user message wrapped by its template with the
generation prompt appended; such a model writes its reasoning and then `Judgment: IDX` itself. A tokenizer
without one (the tiny model, which cannot reason) gets the plain prompt followed by `SEPARATOR` and the
*answer prefix* `Judgment: `: its response is only the index and EOS, so RL's action is exactly the
decision (format tokens in the response were where the tiny model lost its format under RL; BENCHMARKS.md).
`full_response` puts the prefix back in front of the generated text, so parsing is the same for both kinds. Both
sides of RL must format identically, or the learner's log-probs are of a different sequence than the rollout
engine's.

The embedded tiny recipe's own templates (solve-then-point, pick-then-point) are in tiny_recipe/chat.py.
"""
from __future__ import annotations

SEPARATOR = "\n\nResponse:\n"
ANSWER_PREFIX = "Judgment: "
# The most tokens a forced judgment (`rollout.response_form.name=forced_judgment`: a newline, `Judgment: ` and a
# two-digit index; actors/rollout/forced_judgment.py) takes in the tokenizers met (prefix 3-5, index 1-3):
# `rollout.max_response_tokens` must leave this much room after `rollout.response_form.reasoning_budget`.
FORCED_TOKENS_RESERVE = 8
# What a response that picks first writes right after the prompt, before the pick's index and its worked solution
# (`Pick: #3`; tiny.pretrain.pick_line). The pick comes first because an index sampled before the solution learns
# the hedge cue (0.47 -> 0.78 on held-out pairs) while one sampled after it collapsed onto one index (0.405).
PICK_MARK = "Pick: #"
# What precedes the index in a solve-then-point or pick-then-point answer line (`Answer: 24 #3`,
# core.algo.genselect): the rollout's greedy solution stops at it (tiny_recipe/pick_point.py).
POINTER_MARK = "#"


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def format_prompt(tokenizer, user_text: str) -> str:
    """The full prompt text (before tokenization) for `user_text`; the response is appended after it."""
    if has_chat_template(tokenizer):
        return tokenizer.apply_chat_template([{"role": "user", "content": user_text}], tokenize=False,
                                             add_generation_prompt=True)
    return user_text + SEPARATOR + ANSWER_PREFIX


def answer_prefix(tokenizer) -> str:
    """The start of the response that the prompt already holds: `ANSWER_PREFIX` without a chat template."""
    return "" if has_chat_template(tokenizer) else ANSWER_PREFIX


def full_response(tokenizer, generated_text: str) -> str:
    """The response as the parser reads it: the answer prefix, then what the model generated."""
    return answer_prefix(tokenizer) + generated_text


def prompt_token_ids(tokenizer, user_text: str) -> list:
    """Token ids of `format_prompt(tokenizer, user_text)` without extra special tokens (templates add their own)."""
    return tokenizer(format_prompt(tokenizer, user_text), add_special_tokens=False)["input_ids"]


def response_token_ids(tokenizer, response_text: str) -> list:
    """Token ids the model generates for a full response (the answer prefix, which the prompt holds, left
    out), followed by the end-of-sequence token (the warm-start target)."""
    prefix = answer_prefix(tokenizer)
    if not response_text.startswith(prefix):
        raise ValueError(f"response {response_text[:40]!r} does not start with the answer prefix {prefix!r}")
    eos = tokenizer.eos_token_id
    generated = response_text[len(prefix):]
    return tokenizer(generated, add_special_tokens=False)["input_ids"] + ([eos] if eos is not None else [])


# Special tokens that end a turn or a text in the chat formats this project has met (ChatML, Llama 3, Qwen,
# SentencePiece). A model may write one that is not its configured EOS (SmolLM2's EOS is `<|im_end|>`, yet it also
# knows `<|endoftext|>`); the engine would then write on past it, and the text, which drops special tokens, would
# join the two sides (`Judgment: 1` + `<|endoftext|>` + `2` read as `Judgment: 12`).
END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "</s>", "<|end|>")


def end_token_ids(tokenizer) -> list:
    """Ids of the tokenizer's end tokens: its EOS and every special token in `END_TOKENS` it has. Generation stops
    at the first of them, so a response ends where the model ended it."""
    special = set(getattr(tokenizer, "all_special_tokens", ()) or ())
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    for token in END_TOKENS:
        if token in special:
            ids.add(tokenizer.convert_tokens_to_ids(token))
    return sorted(i for i in ids if isinstance(i, int) and i >= 0)


def index_token_ids(tokenizer, n: int):
    """Token ids of the indices 0..n-1 when each is a single token (per-digit tokenizers), else None. Shared by
    the warm-start's index target and constrained judgment in the rollout."""
    ids = [tokenizer(str(i), add_special_tokens=False)["input_ids"] for i in range(n)]
    return [t[0] for t in ids] if all(len(t) == 1 for t in ids) else None


# ---- generator prompts (a model that writes solutions: model-sampled candidates, docs/data.md) ------------
SOLUTION_SEPARATOR = "\n\nSolution:\n"
GENERATOR_INSTRUCTIONS = {
    "math": "Solve the problem step by step. End with a line `Answer: X`, where X is the final answer.",
    "code": "Complete the Python function. Reply with the complete function in one ```python code block.",
}


def generator_user_text(problem: str, domain: str) -> str:
    """The user message that asks a generator for one solution of `problem` ("math" or "code")."""
    if domain not in GENERATOR_INSTRUCTIONS:
        raise ValueError(f"domain must be one of {sorted(GENERATOR_INSTRUCTIONS)}, got {domain!r}")
    return f"{problem}\n\n{GENERATOR_INSTRUCTIONS[domain]}"


def format_generator_prompt(tokenizer, problem: str, domain: str) -> str:
    """The full prompt text a generator continues with a solution. With a chat template: the instruction as
    the user message and the generation prompt; without one (a small model trained on worked solutions):
    the problem, then `SOLUTION_SEPARATOR` (math) or the prompt itself, which a completion continues (code,
    HumanEval style)."""
    if has_chat_template(tokenizer):
        return tokenizer.apply_chat_template([{"role": "user", "content": generator_user_text(problem, domain)}],
                                             tokenize=False, add_generation_prompt=True)
    return problem if domain == "code" else problem + SOLUTION_SEPARATOR


def generator_prompt_token_ids(tokenizer, problem: str, domain: str) -> list:
    """Token ids of `format_generator_prompt` without extra special tokens (templates add their own)."""
    return tokenizer(format_generator_prompt(tokenizer, problem, domain), add_special_tokens=False)["input_ids"]

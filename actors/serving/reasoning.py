"""A reasoning model's thinking split out of its answer on /v1/chat/completions (`serve.reasoning_parser`).

The splitting is vLLM's own: a parser named in vLLM's `ReasoningParserManager` (`deepseek_r1`, `qwen3`, ...),
composed by `vllm.parser.ParserManager` into the `Parser` vLLM's OpenAI server holds per choice, used the way its
chat serving uses it: `parse` on a whole answer, `parse_delta` on each streamed piece (the parser keeps the
stream's state). The thinking goes to `reasoning_content` (and `reasoning`, vLLM's own name for the field), the
rest stays in `content`.
"""
from __future__ import annotations


def available() -> list:
    """The names of vLLM's registered reasoning parsers."""
    from vllm.reasoning import ReasoningParserManager

    return ReasoningParserManager.list_registered()


def check_name(name: str) -> None:
    """ValueError naming the key and listing the parsers when `name` is set and not a vLLM reasoning parser."""
    if name and name not in available():
        raise ValueError(f"serve.reasoning_parser={name!r} is not one of vLLM's reasoning parsers: "
                         f"{', '.join(available())} (or '' for none)")


def parser_class(name: str, tokenizer):
    """vLLM's `Parser` class for the reasoning parser `name`, checked against `tokenizer` (e.g. a `<think>`
    parser needs the tokenizer to have those tokens); None when `name` is ''."""
    if not name:
        return None
    check_name(name)
    from vllm.parser import ParserManager

    try:
        return ParserManager.get_parser(reasoning_parser_name=name, tokenizer=tokenizer)
    except TypeError as e:  # vLLM's check names its command-line flag: the cause is what matters here
        raise ValueError(f"serve.reasoning_parser={name!r} cannot read this model's output: "
                         f"{e.__cause__ or e}") from None


def new_parser(parser_cls, tokenizer, req, prompt_ids: list):
    """One parser for one choice of a request (parsers keep state, as in vLLM's server); None without a class."""
    if parser_cls is None:
        return None
    parser = parser_cls(tokenizer, chat_template_kwargs=req.chat_template_kwargs or {})
    parser.set_prompt_token_ids(prompt_ids)
    return parser


def split(parser, req, text: str, token_ids) -> tuple:
    """(reasoning or None, content) of a whole answer; without a parser all of it is content."""
    if parser is None:
        return None, text
    reasoning, content, _ = parser.parse(text, req, model_output_token_ids=list(token_ids))
    return (reasoning if req.include_reasoning else None), content


def split_delta(parser, req, prompt_ids: list, text: str, token_ids, finished: bool) -> tuple:
    """(reasoning or None, content or None) of one streamed piece; both None when the parser holds it back (a
    marker token). Without a parser the piece is content."""
    if parser is None:
        return None, text
    delta = parser.parse_delta(text, list(token_ids), req, prompt_token_ids=prompt_ids, finished=finished)
    if delta is None:
        return None, None
    return delta.reasoning, delta.content


def name_reasoning_content(response: dict) -> dict:
    """A dumped chat response or chunk whose choices' `reasoning` (vLLM's name) is also `reasoning_content` (the
    name of DeepSeek's API and of the clients that follow it)."""
    for choice in response.get("choices", ()):
        message = choice.get("message") or choice.get("delta") or {}
        if message.get("reasoning") is not None:
            message["reasoning_content"] = message["reasoning"]
    return response

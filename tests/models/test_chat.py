"""format_prompt: the chat template when the tokenizer has one, plain text + separator + answer prefix otherwise."""
import pytest
from transformers import AutoTokenizer

from core.algo.genselect import render_judgment
from core.algo.genselect import parse_judgment
from core.chat import (ANSWER_PREFIX, SEPARATOR, answer_prefix, format_prompt, full_response,
                       prompt_token_ids, response_token_ids)


@pytest.fixture(scope="module")
def tok(tiny_dir):
    return AutoTokenizer.from_pretrained(tiny_dir)


def test_plain_tokenizer_gets_text_separator_and_answer_prefix(tok):
    assert tok.chat_template is None
    assert format_prompt(tok, "Problem: 1+1") == "Problem: 1+1" + SEPARATOR + ANSWER_PREFIX
    ids = prompt_token_ids(tok, "Problem: 1+1")
    assert tok.decode(ids) == "Problem: 1+1" + SEPARATOR + ANSWER_PREFIX


def test_template_is_applied_with_generation_prompt(tok):
    tok = tok.__class__.from_pretrained(tok.name_or_path)
    tok.chat_template = ("{% for m in messages %}<u>{{ m['content'] }}</u>{% endfor %}"
                         "{% if add_generation_prompt %}<a>{% endif %}")
    assert format_prompt(tok, "hi") == "<u>hi</u><a>"
    assert answer_prefix(tok) == "" and full_response(tok, "so... Judgment: 2") == "so... Judgment: 2"


def test_response_is_the_index_and_eos_and_parses_with_the_prefix_back(tok):
    ids = response_token_ids(tok, render_judgment(3))
    assert ids[-1] == tok.eos_token_id and tok.decode(ids[:-1]) == "3"
    # prompt + generated tokens tokenize as the whole text does: the index token follows the prefix's space
    whole = tok("x" + SEPARATOR + render_judgment(3), add_special_tokens=False)["input_ids"]
    assert prompt_token_ids(tok, "x") + ids[:-1] == whole
    assert parse_judgment(full_response(tok, tok.decode(ids[:-1])), 4).index == 3
    with pytest.raises(ValueError, match="answer prefix"):
        response_token_ids(tok, "3")

"""format_prompt: the chat template when the tokenizer has one, plain text + separator otherwise."""
import pytest
from transformers import AutoTokenizer

from driver.algo.genselect import render_judgment
from driver.models.chat import SEPARATOR, format_prompt, prompt_token_ids, response_token_ids


@pytest.fixture(scope="module")
def tok(tiny_dir):
    return AutoTokenizer.from_pretrained(tiny_dir)


def test_plain_tokenizer_gets_text_and_separator(tok):
    assert tok.chat_template is None
    assert format_prompt(tok, "Problem: 1+1") == "Problem: 1+1" + SEPARATOR
    ids = prompt_token_ids(tok, "Problem: 1+1")
    assert tok.decode(ids) == "Problem: 1+1" + SEPARATOR


def test_template_is_applied_with_generation_prompt(tok):
    tok = tok.__class__.from_pretrained(tok.name_or_path)
    tok.chat_template = ("{% for m in messages %}<u>{{ m['content'] }}</u>{% endfor %}"
                         "{% if add_generation_prompt %}<a>{% endif %}")
    assert format_prompt(tok, "hi") == "<u>hi</u><a>"


def test_response_ends_with_eos(tok):
    ids = response_token_ids(tok, render_judgment(3))
    assert ids[-1] == tok.eos_token_id and tok.decode(ids[:-1]) == "Judgment: 3"

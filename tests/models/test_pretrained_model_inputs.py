"""What a pretrained chat model brings that the tiny model does not: several end tokens, a chat template the
selector's prompt needs, and a model name that writes the candidates itself (`data.generator=smollm2-135m`).
The parser's side (thinking traces, cut and multi-token indices) is in tests/core/algo/test_genselect.py."""
import json
import shutil

import pytest
from transformers import AutoTokenizer

from core.chat import end_token_ids
from core.config import DataConfig, ModelConfig
from driver.data.problem import DataError
from driver.prepare import check_chat_template, with_generator_folder


def test_every_end_token_a_tokenizer_has_stops_generation(tiny_dir):
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    assert end_token_ids(tok) == [tok.eos_token_id]
    tok.add_special_tokens({"additional_special_tokens": ["<|im_end|>", "<|endoftext|>", "<|im_start|>"]})
    ids = end_token_ids(tok)
    # ChatML's two end tokens join EOS; a start token does not end anything
    assert set(ids) == {tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>"),
                        tok.convert_tokens_to_ids("<|endoftext|>")}
    assert tok.convert_tokens_to_ids("<|im_start|>") not in ids


def _folder(tiny_dir, tmp_path, kind, template=None):
    folder = tmp_path / kind
    shutil.copytree(tiny_dir, folder)
    (folder / "genselect_model.json").write_text(json.dumps({"kind": kind}))
    if template is not None:
        tok = AutoTokenizer.from_pretrained(folder)
        tok.chat_template = template
        tok.save_pretrained(folder)
    return folder


def test_a_pretrained_model_without_a_chat_template_is_refused_with_the_fix(tiny_dir, tmp_path):
    folder = _folder(tiny_dir, tmp_path, "pretrained")
    with pytest.raises(DataError, match="has no chat template.*chat_template") as err:
        check_chat_template(ModelConfig(name=str(folder)))
    assert str(folder) in str(err.value)
    # with a template it is accepted; a tiny model built here (and its exports) answers after the prefix
    check_chat_template(ModelConfig(name=str(_folder(tiny_dir, tmp_path, "chat", "{{ messages[0]['content'] }}"))))
    check_chat_template(ModelConfig(name=str(_folder(tiny_dir, tmp_path, "tiny"))))
    # a folder that is not a model folder at all is the same one-line error, naming what it lacks
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="lacks config.json"):
        check_chat_template(ModelConfig(name=str(tmp_path / "empty")))


def test_the_generator_may_be_a_model_name_and_becomes_its_folder(tmp_path, monkeypatch):
    from driver.models import registry

    monkeypatch.setattr(registry, "resolve_model", lambda cfg, corpus=None: tmp_path / cfg.name)
    model = ModelConfig(name="smollm2-135m", cache_dir=str(tmp_path))
    cfg = with_generator_folder(DataConfig(source="model", generator="smollm2-135m"), model)
    assert cfg.generator == str(tmp_path / "smollm2-135m")
    kept = DataConfig(source="model", generator="/models/mine")
    assert with_generator_folder(kept, model) is kept


class TemplatedWords:
    """A tokenizer of one token per word whose chat template wraps the user message in 30 words, as SmolLM2's adds
    its system prompt and turn markers."""
    chat_template = "system prompt"

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": text.split()}

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return " ".join(["sys"] * 29) + " " + messages[0]["content"] + " assistant"


def test_the_budget_counts_the_chat_template_and_every_prompt_over_it_is_counted(tmp_path):
    from core.chat import format_prompt
    from driver.data.pipeline import build_dataset

    class Provider:
        key = "templated-words"

        def load(self, corpus):
            return TemplatedWords(), {"model": "templated-words"}

    def build(budget):
        cfg = DataConfig(num_problems=40, out_dir=str(tmp_path / f"b{budget}"), max_prompt_tokens=budget)
        return build_dataset(cfg, Provider(), format_fn=format_prompt, progress=False).manifest

    free = build(10_000)
    longest = free["prompt_tokens"]["max"]
    assert free["counts"]["prompts_over_token_budget"] == 0
    # a budget the raw prompts fit (the longest is `longest` - 30 words) drops the templated ones above it
    tight = build(longest - 15)
    c = tight["counts"]
    assert c["prompts_over_token_budget"] > 0
    assert c["prompts_built"] == c["prompts_kept"] + c["prompts_over_token_budget"]
    assert tight["prompt_tokens"]["max"] <= longest - 15
    assert c["problems_over_token_budget"] == len(tight["problems_over_token_budget"])

"""The tiny Qwen3 selector: deterministic tokenizer (digits one per token), HF folder that transformers
loads with tied embeddings, cached by (shape, seed, corpus)."""
import json

import pytest
import torch

from core.config import ModelConfig
from driver.models import registry
from tiny_recipe.config import TinyModelConfig, TinyRecipeConfig
from tiny_recipe.model import train_tokenizer


def tiny(seed: int = 0, **shape) -> TinyRecipeConfig:
    """The recipe's keys with the tiny model's shape `shape` (`tiny.model`) and `seed` (`tiny.seed`)."""
    return TinyRecipeConfig(model=TinyModelConfig(**shape), seed=seed)


def test_tokenizer_is_deterministic_and_splits_digits(corpus):
    a = train_tokenizer(corpus, 1024)
    b = train_tokenizer(list(corpus), 1024)
    assert a.backend_tokenizer.to_str() == b.backend_tokenizer.to_str()
    ids = a("12 + 7 = 19\nAnswer: 2048", add_special_tokens=False)["input_ids"]
    pieces = [a.decode([i]) for i in ids]
    assert all(len(p.strip()) == 1 for p in pieces if p.strip().isdigit())
    assert "".join(pieces) == "12 + 7 = 19\nAnswer: 2048"
    assert len(a) <= 1024 and a.eos_token_id is not None and a.pad_token_id is not None


def test_whole_number_tokenizer_keeps_frequent_numbers_whole_and_has_its_own_key(corpus):
    whole = train_tokenizer(corpus, 1024, split_digits=False)
    ids = whole("12 + 7 = 19", add_special_tokens=False)["input_ids"]
    pieces = [whole.decode([i]).strip() for i in ids]
    assert "12" in pieces or "19" in pieces  # numbers of the corpus merge into single tokens
    assert whole.decode(ids) == "12 + 7 = 19"
    cfg, split, merged = ModelConfig(), tiny(), tiny(split_digits=False)
    assert registry.tokenizer_key(cfg, split) != registry.tokenizer_key(cfg, merged)  # another dataset hash
    assert registry.tiny_dir(cfg, corpus, split) != registry.tiny_dir(cfg, corpus, merged)  # another model folder


def test_saved_folder_loads_with_transformers_and_ties_lm_head(tiny_dir):
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    assert model.config.model_type == "qwen3" and model.config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    with safe_open(str(tiny_dir / "model.safetensors"), "pt") as f:
        assert "lm_head.weight" not in set(f.keys())
    n = sum(p.numel() for p in model.parameters())
    assert 2e6 < n < 5e6 and json.loads((tiny_dir / "genselect_model.json").read_text())["params"] == n
    ids = tok("Compute 3 + 4.", return_tensors="pt")["input_ids"]
    again = AutoModelForCausalLM.from_pretrained(tiny_dir)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, again(ids).logits)


def test_resolve_model_caches_by_corpus_shape_and_seed(tmp_path, corpus):
    cfg = ModelConfig(cache_dir=str(tmp_path))
    recipe = tiny(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)
    first = registry.resolve_model(cfg, corpus, recipe)
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert registry.resolve_model(cfg, corpus, recipe) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    assert registry.tiny_dir(cfg, corpus[:-1], recipe) != first
    recipe.seed = 1
    assert registry.tiny_dir(cfg, corpus, recipe) != first
    with pytest.raises(ValueError, match="corpus"):
        registry.resolve_model(cfg, None, recipe)


@pytest.mark.parametrize("remove,message", [("config.json", "config.json"), ("tokenizer.json", "tokenizer"),
                                            ("model.safetensors", "weights")])
def test_local_folder_is_validated_with_a_clear_error(tmp_path, tiny_dir, remove, message):
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(tiny_dir, folder)
    assert registry.validate_hf_folder(folder) == folder.resolve()
    assert registry.resolve_model(ModelConfig(name=str(folder))) == folder.resolve()
    (folder / remove).unlink()
    with pytest.raises(registry.ModelFolderError, match=message):
        registry.resolve_model(ModelConfig(name=str(folder)))


def test_unknown_model_name_is_a_clear_error():
    with pytest.raises(registry.ModelFolderError, match="nothing is downloaded"):
        registry.resolve_model(ModelConfig(name="Qwen/Qwen3-1.7B"))


def test_a_wired_model_copies_at_initialisation_and_records_its_circuit(tmp_path, corpus):
    from transformers import AutoModelForCausalLM

    from tiny_recipe.induction import wired_circuit

    cfg = ModelConfig(cache_dir=str(tmp_path))
    folder = registry.resolve_model(cfg, corpus, tiny(induction_circuit=True))
    assert folder != registry.tiny_dir(cfg, corpus, tiny()) and wired_circuit(folder) == 3
    assert wired_circuit(tmp_path) == 0  # no model info there: nothing to freeze
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    gen = torch.Generator().manual_seed(0)
    seq = torch.randint(4, model.config.vocab_size, (4, 24), generator=gen)
    ids = torch.cat([seq, seq], 1)  # each row repeated once: the second half is predictable only by copying
    with torch.no_grad():
        guess = model(ids).logits[:, 24:-1].argmax(-1)
    assert (guess == ids[:, 25:]).float().mean() > 0.8


def test_a_default_model_keeps_the_cache_key_it_had_before_the_circuit_and_the_response_keys(corpus):
    import dataclasses
    import hashlib

    recipe = TinyRecipeConfig()
    shape = {k: v for k, v in dataclasses.asdict(recipe.model).items() if k not in ("induction_circuit", "response")}
    blob = f"{json.dumps(shape, sort_keys=True)}|seed={recipe.seed}|corpus={registry.corpus_hash(corpus)}"
    assert registry.tiny_dir(ModelConfig(), corpus, recipe).name == \
        f"tiny-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def test_the_circuit_needs_the_shape_it_is_written_for():
    from core.config import ConfigError, load_config

    load_config("selector", ["tiny.model.induction_circuit=true"])
    with pytest.raises(ConfigError, match="tiny.model.induction_circuit.*hidden_size=256"):
        load_config("smoke", ["tiny.model.induction_circuit=true"])  # the smoke config's model is 64 wide


def test_a_solve_then_point_model_restates_the_problem_after_the_prompt(tmp_path, corpus):
    from transformers import AutoTokenizer

    from core.algo.genselect import PromptStyle, build_prompt, parse_judgment
    from core.chat import answer_prefix, format_prompt

    cfg, solve = ModelConfig(cache_dir=str(tmp_path)), tiny(response="solve_point", split_digits=False)
    assert registry.tokenizer_key(cfg, solve) != registry.tokenizer_key(cfg, tiny())  # another prompt budget
    tokenizer = AutoTokenizer.from_pretrained(registry.resolve_model(cfg, corpus, solve))
    prompt = build_prompt("Compute 3 + 4.", ["3 + 4 = 7\nAnswer: 7", "3 + 4 = 8\nAnswer: 8"],
                          style=PromptStyle(end_lines=True, answer_labels=True))
    text = format_prompt(tokenizer, prompt)
    assert text == prompt + "\n\nProblem:\nCompute 3 + 4.\n\nSolution:\n" and answer_prefix(tokenizer) == ""
    assert parse_judgment("3 + 4 = 7\nAnswer: 7 #0", 2).index == 0  # what the model writes after it
    side = build_prompt("Compute 3 + 4.", ["Answer: 7", "Answer: 8"], style=PromptStyle(side_by_side=True))
    assert format_prompt(tokenizer, side).endswith("\n\nProblem:\nCompute 3 + 4.\n\nSolution:\n")


def test_a_pick_then_point_model_ends_the_prompt_in_the_pick_mark(tmp_path, corpus):
    """tiny.model.response=pick_point: the built tokenizer's template ends the prompt in `Pick: #` (the rollout then
    writes the pick, the head, the solution and the pointer; tiny_recipe/pick_point.py), its tokenizer key differs from the
    other responses' (another prompt budget), and the response text the verifier reads names the pointer."""
    from transformers import AutoTokenizer

    from core.algo.genselect import PromptStyle, build_prompt, parse_judgment
    from core.chat import PICK_MARK, format_prompt
    from tiny_recipe.chat import is_pick_point, pick_point_head

    cfg, pick = ModelConfig(cache_dir=str(tmp_path)), tiny(response="pick_point", split_digits=False)
    solve = tiny(response="solve_point", split_digits=False)
    assert len({registry.tokenizer_key(cfg, t) for t in (pick, solve, tiny())}) == 3
    tokenizer = AutoTokenizer.from_pretrained(registry.resolve_model(cfg, corpus, pick))
    assert is_pick_point(tokenizer)
    prompt = build_prompt("Compute 3 + 4.", ["3 + 4 = 7\nAnswer: 7", "3 + 4 = 8\nAnswer: 8"],
                          style=PromptStyle(end_lines=True, answer_labels=True))
    assert format_prompt(tokenizer, prompt) == prompt + "\n\n" + PICK_MARK
    response = PICK_MARK + "1" + pick_point_head("Compute 3 + 4.") + "3 + 4 = 7\nAnswer: 7 #0"
    assert parse_judgment(response, 2).index == 0


def test_the_registry_hands_each_model_folder_its_response_form(tmp_path, corpus):
    """The response-form hook a tiny folder names by path (driver/models/hooks.py, loaded by
    driver.models.registry.response_form): a pick-then-point tiny folder gets the recipe's PickThenPoint (its pick
    weighted by the run's `tiny.pick_reward`), `tiny.sample_index_only` SolveThenPoint, and any other folder (an index
    tiny model here, a user's own model alike) the general FreeText, so a run and a served selector sample what the
    model was built for."""
    import dataclasses

    from actors.rollout.forced_judgment import ForcedJudgment
    from actors.rollout.response_forms import FreeText
    from core.config import RolloutConfig, TrainConfig
    from driver.models.hooks import KIND_HOOKS
    from tiny_recipe.model import FOLDER_HOOKS
    from tiny_recipe.pick_point import PickThenPoint
    from tiny_recipe.solve_point import SolveThenPoint

    def run(rollout=None, **tiny_keys):
        base = TrainConfig()
        return dataclasses.replace(base, rollout=rollout or RolloutConfig(),
                                   tiny=dataclasses.replace(base.tiny, **tiny_keys))

    cfg = ModelConfig(cache_dir=str(tmp_path))
    pick = registry.resolve_model(cfg, corpus, tiny(response="pick_point", split_digits=False))
    index = registry.resolve_model(cfg, corpus)
    written = json.loads((index / "genselect_model.json").read_text())["hooks"]
    assert written == FOLDER_HOOKS and all(KIND_HOOKS["tiny"][k] == v for k, v in written.items())
    assert type(registry.response_form(pick)) is PickThenPoint and registry.response_form(pick).pick_reward == 0.0
    assert registry.response_form(pick, run(pick_reward=0.5)).pick_reward == 0.5
    assert type(registry.response_form(index)) is FreeText
    assert type(registry.response_form(index, run(sample_index_only=True))) is SolveThenPoint
    forced = RolloutConfig(response_form={"name": "forced_judgment", "reasoning_budget": 16})
    assert registry.response_form(index, run(forced)).reasoning_budget == 16
    assert type(registry.response_form(index, run())) is FreeText
    assert isinstance(registry.response_form(index, run(forced)), ForcedJudgment)
    with pytest.raises(ValueError, match="own response form"):
        registry.response_form(pick, run(forced))
    assert registry.frozen_entries(index) is None  # no circuit wired: nothing frozen

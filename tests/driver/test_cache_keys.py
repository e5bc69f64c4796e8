"""The cache folders a config names stay where they were: datasets and models are cached under `.cache/` by keys
hashed from config sections (driver/data/dataset.py, driver/models/registry.py, tiny_recipe/pretrain.py `-pt-`,
tiny_recipe/warmstart.py `-ws-`), so moving a key between sections, or adding one at a default that builds what was
built before, must leave these names as they are (else every cached dataset and model is rebuilt). The names below
were computed before the tiny recipe's keys moved under `tiny:`; the dataset's with the package versions it was first
built with, the model's from a fixed stand-in corpus (the real one is the dataset's train prompts)."""
import pytest

from core.config import load_config
from driver.data import dataset as ds
from driver.models.registry import tiny_dir, tokenizer_key
from tiny_recipe.pretrain import pretrain_dir
from tiny_recipe.warmstart import warm_start_dir

VERSIONS = {"math-verify": "0.9.0", "procedural_math": 2, "tokenizers": "0.23.3"}
CORPUS = ["a fixed corpus"]
EXCLUDE = frozenset({"1 + 2"})

#: config, overrides -> (dataset folder, dataset key without versions, model, pretrained, warm-started)
PINNED = {
    ("default", ()): ("procedural_math-e936c17d2627", "3cab4c2fb1b9", "tiny-9f4210493779",
                      "tiny-9f4210493779-pt-4e4b178dfc3d", "tiny-9f4210493779-pt-4e4b178dfc3d-ws-afe8a196984e"),
    ("default", ("tiny.seed=3",)): ("procedural_math-e936c17d2627", "3cab4c2fb1b9", "tiny-6ff06b1abfb0",
                                    "tiny-6ff06b1abfb0-pt-069bb5a7a93a",
                                    "tiny-6ff06b1abfb0-pt-069bb5a7a93a-ws-6d5781d7cdbd"),
    ("selector", ()): ("procedural_math-79b282498053", "9de8e9fcff21", "tiny-4e50c6a3de69",
                       "tiny-4e50c6a3de69-pt-4a197c69dad8", "tiny-4e50c6a3de69-ws-29b88e62e3b7"),
}


@pytest.mark.parametrize("name,overrides", sorted(PINNED))
def test_a_config_keeps_its_dataset_and_model_folders(name, overrides):
    cfg = load_config(name, list(overrides))
    data = ds.settings(cfg.data, cfg.tiny)
    tokenizer = tokenizer_key(cfg.model, cfg.tiny)
    key = ds.dataset_key(data, {}, tokenizer)
    base = tiny_dir(cfg.model, CORPUS, cfg.tiny)
    pretrained = pretrain_dir(base, cfg.tiny.pretrain, EXCLUDE, key)
    warm = warm_start_dir(pretrained if cfg.tiny.pretrain.steps > 0 else base, cfg.tiny.warm_start, key,
                          cfg.model.dtype, cfg.tiny.seed)
    got = (ds.dataset_dir(data, ds.dataset_key(data, VERSIONS, tokenizer)).name, key, base.name, pretrained.name,
           warm.name)
    assert got == PINNED[(name, overrides)]


def test_the_dataset_key_holds_the_recipe_settings_it_held_as_data_keys():
    """The recipe's dataset settings (`tiny.solution_end_line`, ...) sit in the hashed dict beside the data keys,
    as when they were data keys; a plain DataConfig reads as their defaults."""
    cfg = load_config("default")
    hashed = ds.config_dict(ds.settings(cfg.data, cfg.tiny))
    assert hashed["solution_end_line"] is True and hashed["answer_labels"] is True
    assert hashed["line_labels"] is False and hashed["train_no_cue_share"] == 0.0
    plain = ds.config_dict(cfg.data)
    assert plain["solution_end_line"] is False and "answer_labels" not in plain  # a later key, at its default

"""The config sections recipes own (core/recipe_sections.py): named by dotted path, resolved when a config is built,
typed and checked like the system's; a section whose recipe does not import is empty, and a config that needs it is
refused naming the package."""
import dataclasses

import pytest

from core import recipe_sections
from core.config import ConfigError, describe, load_config
from core.config_schema import TrainConfig
from core.recipe_sections import RECIPE_SECTIONS, RecipeSection


def test_every_registered_path_resolves_to_what_its_part_needs():
    for name, section in RECIPE_SECTIONS.items():
        assert not recipe_sections.unavailable(name)
        schema = recipe_sections._load(name, "schema")[0]
        assert dataclasses.is_dataclass(schema) and isinstance(recipe_sections.default(name), schema)
        assert callable(recipe_sections._load(name, "rules")[0])
        assert isinstance(recipe_sections._load(name, "choices")[0], dict)
        assert isinstance(recipe_sections._load(name, "moved_keys")[0], dict)
        assert all(key.startswith(f"{name}.") for key in recipe_sections.choices())


def test_the_tiny_section_is_the_recipes_dataclass_typed_and_checked():
    from tiny_recipe.config import TinyModelConfig, TinyRecipeConfig

    cfg = load_config("smoke", ["tiny.seed=3"])
    assert type(cfg.tiny) is TinyRecipeConfig and type(cfg.tiny.model) is TinyModelConfig and cfg.tiny.seed == 3
    assert type(TrainConfig().tiny) is TinyRecipeConfig
    assert type(cfg) is TrainConfig and recipe_sections.typed_schema(TrainConfig) is not TrainConfig
    with pytest.raises(ConfigError, match=r"^invalid config key 'tiny': field 'tiny' is not Optional"):
        load_config("smoke", ["tiny=null"])
    with pytest.raises(ConfigError, match="int is not a subclass of TinyRecipeConfig"):
        load_config("smoke", ["tiny=3"])
    with pytest.raises(ConfigError, match=r"^invalid config key 'tiny.seed': Value 'x' of type 'str' could not be "):
        load_config("smoke", ["tiny.seed=x"])
    with pytest.raises(ConfigError, match=r"^invalid config key 'tiny.nokey': Key 'nokey' not in 'TinyRecipeConfig'"):
        load_config("smoke", ["tiny.nokey=1"])
    with pytest.raises(ConfigError, match=r"^tiny.warm_start.target='x' is not one of \['format', "):
        load_config("smoke", ["tiny.warm_start.target=x"])
    with pytest.raises(ConfigError, match=r"^tiny.pick_reward=2.0 must be in \[0, 1\]"):
        load_config("smoke", ["tiny.pick_reward=2.0"])
    assert "tiny.model.hidden_size" in [key for key, _, _ in describe()]


def test_sections_read_the_same_as_dataclass_or_plain_data():
    from tiny_recipe.config import TinyRecipeConfig

    for section in (TinyRecipeConfig(answer_labels=True), {"answer_labels": True}):
        assert recipe_sections.section_value(section, "answer_labels", False) is True
        assert recipe_sections.section_value(section, "nokey", 7) == 7
    assert recipe_sections.section_value(None, "answer_labels", False) is False


def test_old_paths_move_into_the_section():
    tree = {"model": {"seed": 3, "name": "tiny"}, "data": {"answer_labels": True}, "tiny": {"seed": 5}}
    assert recipe_sections.moved_keys_in(tree) == ["model.seed", "data.answer_labels"]
    assert recipe_sections.moved_key("model.tiny.response") == ("model.tiny", "tiny.model")
    moved = recipe_sections.migrate_moved_keys(tree)
    assert moved == {"model": {"name": "tiny"}, "data": {}, "tiny": {"seed": 5, "answer_labels": True}}


@pytest.fixture
def missing_recipe(monkeypatch):
    """A registered section whose recipe package does not exist."""
    section = RecipeSection(package="no_such_recipe", schema="no_such_recipe.config:Section",
                            rules="no_such_recipe.rules:rules", choices="no_such_recipe.rules:CHOICES",
                            moved_keys="no_such_recipe.config:MOVED", models=("missing-model",))
    monkeypatch.setitem(RECIPE_SECTIONS, "absent", section)
    yield "absent"
    for part in ("schema", "rules", "choices", "moved_keys"):
        recipe_sections._LOADED.pop(("absent", part), None)


def test_a_section_whose_recipe_does_not_import_is_empty_and_refuses_what_needs_it(missing_recipe):
    assert "no_such_recipe" in recipe_sections.unavailable(missing_recipe)
    assert recipe_sections.default(missing_recipe) == {}
    with pytest.raises(ValueError, match="needs the recipe package no_such_recipe, which does not import here"):
        recipe_sections.require(missing_recipe)

    @dataclasses.dataclass
    class Model:
        name: str

    @dataclasses.dataclass
    class Config:
        model: Model
        absent: dict

    def broken(cfg, user_code=True):
        return [key for key, ok, _ in recipe_sections.availability_rules(cfg, user_code) if not ok]

    assert broken(Config(Model("tiny"), {})) == []
    assert broken(Config(Model("tiny"), {"shape": {"width": 3}})) == ["absent.shape.width"]
    assert broken(Config(Model("tiny"), {"shape": {"width": 3}}), user_code=False) == []  # a run's record
    assert broken(Config(Model("missing-model"), {})) == ["model.name"]

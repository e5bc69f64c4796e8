"""Shared fixtures of the model tests: a small task corpus and one tiny model folder per session."""
import pytest

from core.algo.genselect import build_prompt, render_judgment
from core.chat import SEPARATOR
from driver.data import procedural


@pytest.fixture(scope="session")
def corpus():
    rows = procedural.generate(40, 4, 0, procedural.ProceduralSpec())
    return [build_prompt(r["problem"], r["candidates"]) + SEPARATOR for r in rows] + \
        [render_judgment(i) for i in range(16)]


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory, corpus):
    from core.config import ModelConfig
    from driver.models.registry import resolve_model

    cfg = ModelConfig(cache_dir=str(tmp_path_factory.mktemp("models")))
    return resolve_model(cfg, corpus)

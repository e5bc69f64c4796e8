"""A model that does not need the embedded tiny recipe runs with the recipe unimportable: the system loads a model's
hooks by dotted path (driver/models/hooks.py) and imports nothing of `tiny_recipe` itself.

A subprocess whose import system refuses `tiny_recipe` (a meta-path finder that raises for it) takes a plain
Hugging Face folder (a tiny Qwen3 without the recipe's `genselect_model.json`, as a user's own model is) through the
config check and launch planning (`python -m driver.train smoke --plan`, its `tiny:` keys left out with `~tiny`) and
the model's hooks (the general response form, nothing frozen, no extra rows, no preparation of its own); the slow
test adds one learner step and its export. Another loads configs there: the recipe's section (core/recipe_sections.py)
is then empty, and a config that sets its keys or runs its model is refused naming the package.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

HIDE_RECIPE = '''
import sys

class RefuseRecipe:
    """Every import of the tiny recipe fails, as where it is not installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "tiny_recipe" or name.startswith("tiny_recipe."):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)", name=name)
        return None

sys.meta_path.insert(0, RefuseRecipe())
'''

PLAN = '''
import contextlib
import io
import json
import sys
from pathlib import Path

from core.env import apply_defaults

apply_defaults()
folder, out = sys.argv[1], Path(sys.argv[2])

# the config check and the launch plan, as the CLI runs them
from driver.train import main

text = io.StringIO()
with contextlib.redirect_stdout(text):
    assert main(["smoke", "--plan", f"model.name={folder}", "~tiny"]) == 0
assert "learner" in text.getvalue()

from core.config import load_config
from driver.models import registry
from driver.models.hooks import kind_hook

cfg = load_config("smoke", [f"model.name={folder}", "~tiny"])
assert cfg.tiny == {}
assert registry.response_form(folder, cfg).name == "free text"
assert registry.frozen_entries(folder, cfg) is None
assert registry.extra_rows(cfg, folder, []) is registry.no_extra_rows
assert kind_hook(cfg.model.name, "prepare") is None

'''

CONFIG = '''
# a config without the recipe: its section is empty and out of `--help`; setting a key of it, or running its model,
# is a ConfigError naming the package; a run's recorded section is read back as plain data
import re
import sys

from omegaconf import OmegaConf

from core.config import ConfigError, describe, from_yaml, load_config, to_yaml
from driver.data.dataset import prompt_style

folder = sys.argv[1]
cfg = load_config("smollm2")
assert cfg.tiny == {} and not [key for key, _, _ in describe() if key.startswith("tiny")]
for name, overrides, refused in (("smollm2", ["tiny.seed=3"], "tiny.seed=3"),
                                 ("smoke", [f"model.name={folder}"], "tiny.model.hidden_size=64"),
                                 ("smoke", ["~tiny"], "model.name='tiny'")):
    try:
        load_config(name, overrides)
    except ConfigError as err:
        needs = " needs the recipe package tiny_recipe, which does not import here"
        assert re.match(re.escape(refused) + needs, str(err)), err
    else:
        raise AssertionError(f"{name} {overrides} loaded without the recipe")
recorded = OmegaConf.to_container(OmegaConf.create(to_yaml(cfg)))
recorded["tiny"] = {"seed": 0, "answer_labels": True, "model": {"hidden_size": 64}}
again = from_yaml(OmegaConf.to_yaml(OmegaConf.create(recorded)))
assert again.tiny == recorded["tiny"] and prompt_style(again).answer_labels
'''

#: one learner step on the folder, then its export (DeepSpeed on CPU)
STEP = '''
# one learner step on the folder, then its export
import random

from actors.learner.learner import Learner
from core.packing import count_loss_tokens
from core.net import free_port
from core.records import TrainSequence

learner = Learner(cfg.learner, cfg.algorithm, folder, master_port=free_port(), seed=cfg.seed)
try:
    vocab = json.loads((Path(folder) / "config.json").read_text())["vocab_size"]
    rng = random.Random(0)
    batch = []
    for i in range(4):
        prompt, response = [rng.randrange(2, vocab) for _ in range(12)], [rng.randrange(2, vocab) for _ in range(4)]
        batch.append(TrainSequence(prompt, response, [-2.0] * 4, advantage=1.0 if i % 2 else -1.0, policy_version=0))
    lps = learner.compute_logprobs(batch)
    batch = [TrainSequence(s.prompt_token_ids, s.response_token_ids, lp, advantage=s.advantage, policy_version=0)
             for s, lp in zip(batch, lps)]
    stats = learner.train_step(batch, count_loss_tokens(batch), step=0)
    assert stats["weight_version"] == 1 and stats["loss_tokens"] == 16
    learner.export_hf(str(out))
finally:
    learner.shutdown()
assert (out / "config.json").is_file()
'''

CHECK = '''
hidden = sorted(name for name in sys.modules if name.split(".")[0] == "tiny_recipe")
assert not hidden, hidden
print("ran without the recipe")
'''


@pytest.fixture(scope="module")
def user_folder(tmp_path_factory) -> Path:
    """A plain tiny Qwen3 folder: weights, config and tokenizer, no `genselect_model.json` (no hooks, no kind)."""
    from tiny_recipe.config import TinyModelConfig
    from tiny_recipe.model import build_tiny_model

    texts = [f"{a} + {b} = {a + b}\nJudgment: {a % 4}" for a in range(40) for b in range(5)]
    built = build_tiny_model(TinyModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                                             intermediate_size=128, vocab_size=256),
                             texts, tmp_path_factory.mktemp("built") / "tiny", seed=0)
    folder = tmp_path_factory.mktemp("user") / "model"
    shutil.copytree(built, folder)
    (folder / "genselect_model.json").unlink()
    return folder


def run_hidden(tmp_path, *parts: str, args: tuple = ()) -> subprocess.CompletedProcess:
    """`parts` run as one script in a fresh interpreter whose imports of `tiny_recipe` fail."""
    script = tmp_path / "run_without_recipe.py"
    script.write_text(textwrap.dedent(HIDE_RECIPE) + "".join(textwrap.dedent(p) for p in parts))
    return subprocess.run([sys.executable, str(script), *map(str, args)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=240)


def test_a_model_without_hooks_loads_plans_and_runs_its_hooks_with_the_recipe_unimportable(user_folder, tmp_path):
    done = run_hidden(tmp_path, PLAN, CHECK, args=(user_folder, tmp_path / "export"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "ran without the recipe" in done.stdout


def test_a_config_loads_without_the_recipe_and_its_keys_ask_for_the_package(user_folder, tmp_path):
    done = run_hidden(tmp_path, CONFIG, CHECK, args=(user_folder,))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "ran without the recipe" in done.stdout


@pytest.mark.slow
def test_a_model_without_hooks_trains_a_step_and_exports_with_the_recipe_unimportable(user_folder, tmp_path):
    done = run_hidden(tmp_path, PLAN, STEP, CHECK, args=(user_folder, tmp_path / "export"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "ran without the recipe" in done.stdout and (tmp_path / "export" / "config.json").is_file()


def test_the_hidden_recipe_is_really_unimportable(tmp_path):
    """The finder the test above relies on does refuse the recipe (else that test would prove nothing)."""
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent(HIDE_RECIPE) + "import tiny_recipe.model\n")
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "hidden by the test" in done.stderr

"""Warm-start: response-only loss, 'format' vs 'oracle' targets, and a tiny budget that teaches the format."""
import dataclasses
import random

import pytest
import torch

from core.config import DataConfig, ModelConfig
from core.records import SelectionTask
from driver.models import sft
from tiny_recipe.config import TinyModelConfig, TinyRecipeConfig, WarmStartConfig
from tiny_recipe import warmstart


def task(labels):
    n = len(labels)
    return SelectionTask("p/p0", "p", "math", "q", tuple("c" * n), tuple("a" * n), tuple(labels), "1", "prompt")


@pytest.mark.parametrize("labels", [(1.0, 0.0, 0.0), (0.0, 0.0, 1.0, 1.0), (0.0, 1.0)])
def test_targets(labels):
    rng = random.Random(0)
    t = task(labels)
    oracle = {warmstart.pick_target(t, "oracle", rng) for _ in range(200)}
    fmt = {warmstart.pick_target(t, "format", rng) for _ in range(200)}
    assert oracle == {i for i, x in enumerate(labels) if x == 1.0}
    assert fmt == set(range(len(labels)))
    with pytest.raises(ValueError):
        warmstart.pick_target(t, "best", rng)


def test_collate_masks_everything_but_the_response():
    ids, mask, labels = sft.collate([([5, 6, 7], [8, 9]), ([5], [8, 9, 2])], pad_id=0)
    assert ids.tolist() == [[5, 6, 7, 8, 9], [5, 8, 9, 2, 0]]
    assert mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    assert labels.tolist() == [[-100, -100, -100, 8, 9], [-100, 8, 9, 2, -100]]


def test_length_batches_cover_similar_lengths():
    rng = random.Random(0)
    lengths = [random.Random(i).randint(50, 400) for i in range(64)]
    gen = sft.length_batches(lengths, 8, rng)
    seen = [i for _ in range(8) for i in next(gen)]
    assert sorted(seen) == list(range(64))


def tiny_configs(tmp_path, problems: int, candidates: int, width: int, layers: int, steps: int, batch: int):
    """(DataConfig, ModelConfig, TinyRecipeConfig) of a small procedural dataset and a tiny model with a `format`
    warm-start."""
    data = DataConfig(num_problems=problems, out_dir=str(tmp_path / "ds"), max_candidates=candidates)
    model = ModelConfig(cache_dir=str(tmp_path / "models"))
    recipe = TinyRecipeConfig(model=TinyModelConfig(hidden_size=width, num_layers=layers, num_heads=2, num_kv_heads=1,
                                                    intermediate_size=2 * width),
                              warm_start=WarmStartConfig(steps=steps, batch_size=batch, lr=3e-3, target="format"))
    return data, model, recipe


@pytest.mark.slow
def test_tiny_budget_teaches_the_format_and_is_cached(tmp_path):
    from driver.prepare import prepare

    data, model, recipe = tiny_configs(tmp_path, problems=60, candidates=4, width=64, layers=2, steps=40, batch=8)
    before = prepare(data, model, with_model=False, progress=False, tiny_cfg=recipe)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from driver.data.dataset import load_dataset

    held = load_dataset(before.dataset_dir).heldout[:24]
    base = warmstart.evaluate_selector(AutoModelForCausalLM.from_pretrained(before.model_dir),
                                       AutoTokenizer.from_pretrained(before.model_dir), held)
    prepared = prepare(data, model, with_model=True, progress=False, eval_prompts=24, tiny_cfg=recipe)
    stats = prepared.warm_start_stats
    assert prepared.model_dir != before.model_dir and (prepared.model_dir / "warm_start.json").exists()
    assert stats["heldout"]["parse_rate"] >= 0.9 > base["parse_rate"]
    assert stats["loss_last10"] < stats["loss_first"]
    again = prepare(data, model, with_model=True, progress=False, eval_prompts=24, tiny_cfg=recipe)  # cached
    assert again.model_dir == prepared.model_dir and again.warm_start_stats == stats
    loaded = AutoModelForCausalLM.from_pretrained(prepared.model_dir)
    assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()
    assert not torch.equal(loaded.model.embed_tokens.weight,
                           AutoModelForCausalLM.from_pretrained(before.model_dir).model.embed_tokens.weight)


def test_eval_prompts_0_skips_the_held_out_evaluation(tmp_path, monkeypatch):
    """A training run warm-starts with eval_prompts=0 (its step-0 evaluation reads the same weights): no HF decoding,
    `heldout: null` in warm_start.json, and `driver.synth` says so instead of failing on it."""
    from driver.data.dataset import load_dataset
    from driver.prepare import prepare
    from driver.synth import format_warm_start

    data, model, recipe = tiny_configs(tmp_path, problems=30, candidates=3, width=32, layers=1, steps=2, batch=4)
    before = prepare(data, model, with_model=False, progress=False, tiny_cfg=recipe)
    loaded = load_dataset(before.dataset_dir)

    def no_decoding(*args, **kwargs):
        raise AssertionError("the held-out evaluation ran with eval_prompts=0")

    monkeypatch.setattr(warmstart, "evaluate_selector", no_decoding)
    out, stats = warmstart.warm_start(before.model_dir, loaded.train, loaded.heldout, recipe.warm_start,
                                      tmp_path / "ws", eval_prompts=0, progress=False)
    assert stats["heldout"] is None and (out / "config.json").exists()
    assert "not evaluated here" in format_warm_start(stats)


def test_response_loss_without_soft_rows_is_the_usual_response_cross_entropy():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 11)
    _, _, labels = sft.collate([([1, 2, 3], [4, 5]), ([1], [4, 6, 7])], pad_id=0)
    expected = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 11), labels[:, 1:].reshape(-1))
    assert torch.allclose(warmstart.response_loss(logits, labels, [0, 0], [4, 5, 6]), expected)


def test_response_loss_trains_the_index_towards_uniform_over_valid_indices():
    """Row 0's response is `[9, IDX, EOS=10]`: its index term is -mean(log p over the first N index ids)."""
    torch.manual_seed(0)
    logits = torch.randn(1, 5, 12, requires_grad=True)
    _, _, labels = sft.collate([([1, 2], [9, 5, 10])], pad_id=0)
    index_ids = [4, 5, 6, 7]
    logp = torch.log_softmax(logits[0], -1)
    expected = -(logp[1, 9] + logp[2, index_ids[:3]].mean() + logp[3, 10]) / 3
    loss = warmstart.response_loss(logits, labels, [3], index_ids)
    assert torch.allclose(loss, expected)
    loss.backward()  # the index position's gradient pushes the 3 valid indices up equally, index 3 down
    grad = logits.grad[0, 2, index_ids]
    assert torch.all(grad[:3] < 0) and grad[3] > 0


def test_prompt_lm_loss_covers_prompt_tokens_only():
    """Position t predicts token t+1 while t+1 is inside the prompt: row 0 (prompt [1, 2, 3]) scores tokens
    2 and 3, row 1 (prompt [1]) scores nothing; response and padding never count."""
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 11)
    ids, _, _ = sft.collate([([1, 2, 3], [4, 5]), ([1], [4, 6, 7])], pad_id=0)
    logp = torch.log_softmax(logits, -1)
    expected = -(logp[0, 0, 2] + logp[0, 1, 3]) / 2
    assert torch.allclose(warmstart.prompt_lm_loss(logits, ids, [3, 1]), expected)


def test_warm_start_tasks_keep_prompts_up_to_the_cap():
    tasks = [task((1.0, 0.0)), task((1.0, 0.0, 0.0)), task((0.0, 1.0, 0.0, 0.0))]
    assert warmstart.warm_start_tasks(tasks, WarmStartConfig()) == tasks
    assert [t.num_candidates for t in warmstart.warm_start_tasks(tasks, WarmStartConfig(max_candidates=2))] == [2]
    with pytest.raises(ValueError, match="no training prompt"):
        warmstart.warm_start_tasks(tasks[1:], WarmStartConfig(max_candidates=2))
    a, b = (warmstart.warm_start_dir("/m/tiny", WarmStartConfig(max_candidates=k), "h", "float32", 0) for k in (0, 2))
    assert a != b  # a capped warm-start is cached apart


def test_the_row_pool_is_steps_x_batch_unless_set_and_never_more_than_the_prompts():
    cfg = WarmStartConfig(steps=300, batch_size=8)
    assert warmstart.pool_size(cfg, 10_000) == 2400 and warmstart.pool_size(cfg, 1000) == 1000
    assert warmstart.pool_size(dataclasses.replace(cfg, pool=800), 10_000) == 800
    a, b = (warmstart.warm_start_dir("/m/tiny", WarmStartConfig(pool=k), "h", "float32", 0) for k in (0, 800))
    assert a != b  # a smaller pool is cached apart


def test_pointer_pairs_cut_the_models_own_solution_after_its_answer_and_target_the_pointer(tiny_dir, monkeypatch):
    """The `pointer` warm-start's pairs: the prompt, then as target the model's own solution up to its first
    `Answer: X` line, ` #k` (k a valid index), a newline and EOS; a solution without an answer line is left out."""
    from transformers import AutoTokenizer

    from core.chat import prompt_token_ids

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    solutions = ["3 + 4 = 7\nAnswer: 7\nAnswer: 9", "no answer here", "Answer:12 #1 then more"]
    monkeypatch.setattr(warmstart, "greedy_continuations", lambda model, tok, prompts, n, dtype=None: solutions)
    tasks = [task((1.0, 0.0, 0.0)), task((0.0, 1.0)), task((0.0, 0.0, 1.0, 1.0))]
    pairs = warmstart.pointer_pairs(None, tokenizer, tasks, random.Random(0))
    assert [i for i, _, _ in pairs] == [0, 2]
    for (i, prompt, target), head in zip(pairs, ["3 + 4 = 7\nAnswer: 7", "Answer:12"]):
        assert prompt == prompt_token_ids(tokenizer, tasks[i].prompt) and target[-1] == tokenizer.eos_token_id
        written = tokenizer.decode(target[:-1])
        assert written.startswith(head + " #") and written.endswith("\n")
        assert int(written[len(head) + 2:]) < tasks[i].num_candidates


def test_the_pointer_target_belongs_to_the_solve_then_point_response():
    from core.config import ConfigError, load_config

    point = ["tiny.model.response=solve_point", "tiny.answer_labels=true"]
    load_config("selector", point + ["tiny.warm_start.target=pointer"])
    with pytest.raises(ConfigError, match="tiny.warm_start.target.*pointer"):
        load_config("selector", point)
    with pytest.raises(ConfigError, match="tiny.warm_start.target.*pointer"):
        load_config("selector", ["tiny.warm_start.target=pointer"])
    with pytest.raises(ConfigError, match="tiny.model.response.*answer_labels"):
        load_config("selector", ["tiny.model.response=solve_point", "tiny.warm_start.target=pointer"])

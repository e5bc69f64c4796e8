"""Pretraining on worked solutions (tiny_recipe/pretrain.py): a corpus of correct solutions only, held-out
problems excluded, each text used once; the stage runs before the warm-start in `prepare`, is cached, and the
config refuses it where it means nothing."""
import pytest
import torch

from core.config import ConfigError, DataConfig, ModelConfig
from core.config import load_config
from driver.data.slips import slip_kind
from tiny_recipe.config import PretrainConfig, TinyModelConfig, TinyRecipeConfig, WarmStartConfig
from tiny_recipe import pretrain


def test_the_corpus_is_correct_solutions_of_fresh_problems_minus_the_excluded_ones():
    cfg = PretrainConfig(steps=5, batch_size=8)
    texts = pretrain.solution_texts(cfg)
    assert len(texts) == 40 and len(set(texts)) == 40
    problems = [t.split("\n")[1] for t in texts]
    assert all(slip_kind(t.split("Solution:\n")[1]) == "none" for t in texts)
    held = frozenset(problems[:7])
    kept = pretrain.solution_texts(cfg, exclude=held)
    assert len(kept) == 33 and not any(t.split("\n")[1] in held for t in kept)
    assert pretrain.pretraining_problems(cfg) == frozenset(problems)
    assert pretrain.pretraining_problems(PretrainConfig(steps=0)) == frozenset()


def test_a_marked_slip_corpus_mixes_correct_and_slipped_solutions_with_their_lines_marked():
    cfg = PretrainConfig(steps=10, batch_size=20, slipped_share=0.5)
    texts = pretrain.solution_texts(cfg)
    solutions = [t.split("Solution:\n")[1].strip() for t in texts]
    marked = [s for s in solutions if "?" in s]
    assert 0.35 < len(marked) / len(solutions) < 0.65
    assert all(slip_kind(s.replace("?", "")) != "none" for s in marked)
    assert all(slip_kind(s) == "none" for s in solutions if "?" not in s)
    assert pretrain.pretraining_problems(cfg) == frozenset(t.split("\n")[1] for t in texts)


def test_a_solution_check_corpus_writes_every_other_solution_as_a_candidate_block_with_its_verdict():
    cfg = PretrainConfig(steps=10, batch_size=20, slipped_share=0.5, solution_check=True)
    texts = pretrain.solution_texts(cfg)
    checked = [t for t in texts if " Check: " in t]
    assert len(checked) == len(texts) // 2
    assert all("?" not in t.split("\n\n", 1)[1] for t in checked)  # its lines unmarked
    for t in checked:
        solution = t.split("\n\n", 1)[1]
        i = solution.split(":", 1)[0].removeprefix("Solution ")
        body, end = solution.split(f"\nEnd of solution {i}. Check: ")
        lines = body.split("\n", 1)[1]
        assert end == ("ok\n" if slip_kind(lines) == "none" else "wrong\n")
    verdicts = {t.rsplit(" ", 1)[1] for t in checked}
    assert verdicts == {"ok\n", "wrong\n"}
    assert all("Solution:\n" in t for t in texts if t not in checked)  # the others as before
    assert pretrain.pretraining_problems(cfg) == frozenset(t.split("\n")[1] for t in texts)


def test_an_excluded_problem_is_excluded_under_every_template():
    from driver.data.procedural import TEMPLATES, problem_key

    cfg = PretrainConfig(steps=5, batch_size=8)
    problems = [t.split("\n")[1] for t in pretrain.solution_texts(cfg)]
    expr = problem_key(problems[0])
    other_template = next(t.format(expr=expr) for t in TEMPLATES if t.format(expr=expr) != problems[0])
    kept = pretrain.solution_texts(cfg, exclude=frozenset({other_template}))
    assert len(kept) == 39 and all(problem_key(t.split("\n")[1]) != expr for t in kept)


def test_a_corpus_larger_than_the_procedural_space_is_refused_naming_the_pretrain_keys(monkeypatch):
    from driver.data import procedural

    def too_few(*args, **kwargs):
        raise ValueError("the procedural spec yields fewer than 96000 distinct problems")

    monkeypatch.setattr(procedural, "generate", too_few)
    with pytest.raises(ValueError, match="lower tiny.pretrain.steps"):
        pretrain.solution_texts(PretrainConfig(steps=3000, batch_size=32))


def test_lm_loss_ignores_padding():
    logits = torch.randn(2, 5, 11)
    ids = torch.randint(0, 11, (2, 5))
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    nll = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
    expected = (nll[0].sum() + nll[1, :2].sum()) / 6
    assert torch.allclose(pretrain.lm_loss(logits, ids, mask), expected)


def test_prepare_pretrains_then_warm_starts_learns_and_caches(tmp_path):
    from driver.data.dataset import load_dataset
    from driver.prepare import prepare

    data = DataConfig(num_problems=60, out_dir=str(tmp_path / "ds"), max_candidates=4)
    model = ModelConfig(cache_dir=str(tmp_path / "models"))
    tiny = TinyRecipeConfig(model=TinyModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                                                  intermediate_size=128),
                            pretrain=PretrainConfig(steps=40, batch_size=8, lr=3e-3),
                            warm_start=WarmStartConfig(steps=5, batch_size=8, lr=3e-3))
    prepared = prepare(data, model, with_model=True, progress=False, eval_prompts=8, tiny_cfg=tiny)
    pretrained = prepared.warm_start_stats["base_model"]
    assert "-pt-" in pretrained and "-pt-" in prepared.model_dir.name  # warm-started from the pretrained model
    import json
    from pathlib import Path

    stats = json.loads((Path(pretrained) / pretrain.STATS_FILE).read_text())
    held = load_dataset(prepared.dataset_dir).heldout
    assert stats["steps_run"] >= 39 and stats["loss_last10"] < 0.6 * stats["loss_first"]
    assert stats["excluded"] == len(pretrain.pretraining_problems(tiny.pretrain) & {t.problem for t in held})
    assert pretrain.problems_of_pretrained(pretrained) == pretrain.pretraining_problems(tiny.pretrain)
    assert pretrain.problems_of_pretrained(tmp_path) == frozenset()  # no pretrained model there
    again = prepare(data, model, with_model=True, progress=False, eval_prompts=8, tiny_cfg=tiny)  # cached, both
    assert again.model_dir == prepared.model_dir


def test_the_config_refuses_pretraining_where_it_means_nothing():
    load_config("smoke", ["tiny.pretrain.steps=10"])
    with pytest.raises(ConfigError, match="tiny.pretrain.steps.*procedural_math"):
        load_config("smoke", ["tiny.pretrain.steps=10", "data.source=reasoning_gym"])
    with pytest.raises(ConfigError, match="tiny.pretrain.batch_size"):
        load_config("smoke", ["tiny.pretrain.steps=10", "tiny.pretrain.batch_size=0"])
    with pytest.raises(ConfigError, match="tiny.pretrain.pack_tokens.*max_position_embeddings"):
        load_config("smoke", ["tiny.pretrain.steps=10", "tiny.pretrain.pack_tokens=100000"])


def test_packing_joins_texts_in_order_into_rows_no_wider_than_asked():
    assert pretrain.pack([[1, 2], [3], [4, 5, 6], [7]], 3) == [[1, 2, 3], [4, 5, 6], [7]]
    assert pretrain.pack([[1, 2, 3, 4, 5], [6]], 3) == [[1, 2, 3], [6]]  # a text longer than a row is cut
    assert pretrain.pack([], 4) == []


def test_packed_pretraining_trains_long_rows_and_keys_its_own_cache(tmp_path):
    from tiny_recipe.model import build_tiny_model

    texts = pretrain.solution_texts(PretrainConfig(steps=12, batch_size=8))
    base = build_tiny_model(TinyModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                                            intermediate_size=128), texts, tmp_path / "base", seed=0)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    rows = pretrain.text_rows(tokenizer, texts, 256)
    assert len(rows) < len(texts) / 2 and all(len(r) <= 256 for r in rows)
    assert sum(map(len, rows)) == sum(map(len, pretrain.text_rows(tokenizer, texts)))  # every token, once
    assert sum(r.count(tokenizer.eos_token_id) for r in rows) == len(texts)
    packed = PretrainConfig(steps=6, batch_size=8, pack_tokens=256)
    assert pretrain.pretrain_dir(base, packed, frozenset()) != pretrain.pretrain_dir(
        base, PretrainConfig(steps=6, batch_size=8), frozenset())
    out, stats = pretrain.pretrain(base, packed, frozenset(), tmp_path / "pt", progress=False)
    assert stats["pack_tokens"] == 256 and 1 <= stats["steps_run"] <= 6


def test_a_corpus_without_the_later_keys_keeps_the_cache_key_it_had_before_they_existed():
    import dataclasses
    import hashlib
    import json

    cfg = PretrainConfig(steps=600)
    before = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in pretrain.KEYS_ADDED_LATER}  # fields then
    blob = json.dumps({"pretrain": before, "base": "tiny-x", "version": pretrain.PRETRAIN_VERSION,
                       "exclude": hashlib.sha256(b"").hexdigest()}, sort_keys=True)
    assert pretrain.pretrain_dir("m/tiny-x", cfg, frozenset()).name == \
        f"tiny-x-pt-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def test_selection_rows_split_context_from_target_and_point_at_each_answers_first_candidate(tiny_dir):
    import random

    from transformers import AutoTokenizer

    from tiny_recipe.selection_rows import context_row, pointer_text, solution_row
    from driver.models.sft import collate

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    before, text = "Solution 0:\nAnswer: 7 #0", "Problem:\nCompute 2 + 3.\n\nSolution:\nAnswer: 5"
    context, target = context_row(tokenizer, before, text)
    assert tokenizer.decode(context + target[:-1]) == before + "\n\n" + text and target[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(target[:-1]).lstrip("\n") == text
    lines = pointer_text(["7", "5", "7", " 5"], random.Random(0))
    assert sorted(lines.splitlines()) == ["Answer: 5 #1", "Answer: 7 #0"]  # each answer once, its first candidate
    ids, attention, labels = collate([(context, target), solution_row([5, 6, 7])], pad_id=0)
    weights = labels != -100  # what the pretraining's loss reads
    assert ids.shape == (2, len(context) + len(target)) and attention[1].sum() == 3
    assert weights[0].sum() == len(target) and weights[0, :len(context)].sum() == 0 and weights[1, :3].sum() == 3


def test_two_stage_pretraining_with_pointer_steps_keeps_a_wired_circuit_as_written(tmp_path):
    import json
    from pathlib import Path

    from safetensors.torch import load_file

    from tiny_recipe.induction import circuit_masks
    from driver.prepare import prepare

    data = DataConfig(num_problems=60, out_dir=str(tmp_path / "ds"), max_candidates=4)
    model = ModelConfig(cache_dir=str(tmp_path / "models"))
    tiny = TinyRecipeConfig(model=TinyModelConfig(induction_circuit=True), solution_end_line=True, answer_labels=True,
                            pretrain=PretrainConfig(steps=8, batch_size=8, pointer_share=0.5, context_steps=4,
                                                    context_batch=2),
                            warm_start=WarmStartConfig(enabled=False))
    prepared = prepare(data, model, with_model=True, progress=False, tiny_cfg=tiny)
    stats = json.loads((prepared.model_dir / pretrain.STATS_FILE).read_text())
    kinds = stats["steps_by_kind"]
    assert kinds.get("solutions/pointer", 0) >= 1 and kinds["solutions/solution"] + kinds["solutions/pointer"] == 8
    assert sum(v for k, v in kinds.items() if k.startswith("context/")) == 4
    base = Path(json.loads((prepared.model_dir / pretrain.STATS_FILE).read_text())["base_model"])
    before, after = load_file(base / "model.safetensors"), load_file(prepared.model_dir / "model.safetensors")
    from transformers import AutoModelForCausalLM

    masks = circuit_masks(AutoModelForCausalLM.from_pretrained(base))
    moved_outside = False
    for name, mask in masks.items():
        if name not in before:  # the tied output layer
            continue
        assert torch.equal(before[name][mask], after[name][mask]), name  # the circuit as written
        moved_outside |= not torch.equal(before[name][~mask], after[name][~mask])
    assert moved_outside  # everything else trained
    plain = PretrainConfig(steps=8, batch_size=8)
    assert pretrain.pretrain_dir(base, tiny.pretrain, frozenset(), "a") != pretrain.pretrain_dir(
        base, tiny.pretrain, frozenset(), "b")  # it read that dataset's prompts
    assert pretrain.pretrain_dir(base, plain, frozenset(), "a") == pretrain.pretrain_dir(base, plain, frozenset(), "b")
    assert pretrain.pretraining_problems(tiny.pretrain) > pretrain.pretraining_problems(plain)  # both stages


def test_pointer_steps_need_answer_labels_and_context_steps_a_first_stage():
    load_config("smoke", ["tiny.pretrain.steps=10", "tiny.pretrain.pointer_share=0.2", "tiny.answer_labels=true",
                          "tiny.pretrain.context_steps=5"])
    with pytest.raises(ConfigError, match="tiny.pretrain.pointer_share.*answer_labels"):
        load_config("smoke", ["tiny.pretrain.steps=10", "tiny.pretrain.pointer_share=0.2"])
    with pytest.raises(ConfigError, match="tiny.pretrain.context_steps.*first stage"):
        load_config("smoke", ["tiny.pretrain.context_steps=5"])


def test_context_rows_carry_a_random_pick_line_only_when_asked(tiny_dir):
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from core.chat import PICK_MARK

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    tasks = [SimpleNamespace(prompt=f"Solution 0:\nAnswer: {i}", num_candidates=3) for i in range(4)]
    texts = [f"Problem:\nCompute {i} + 1.\n\nSolution:\nAnswer: {i + 1}" for i in range(40)]
    plain = pretrain.context_batches(tokenizer, texts, tasks, PretrainConfig(context_steps=10, context_batch=4), 0)
    picked = pretrain.context_batches(tokenizer, texts, tasks,
                                      PretrainConfig(context_steps=10, context_batch=4, pick_line=True), 0)
    contexts = [tokenizer.decode(c) for batch in picked for c, _ in batch]
    picks = [c.rsplit(PICK_MARK, 1)[1].strip() for c in contexts]
    assert all(PICK_MARK in c for c in contexts) and set(picks) == {"0", "1", "2"}   # every index of 3, no other
    assert not any(PICK_MARK in tokenizer.decode(c) for batch in plain for c, _ in batch)
    # the targets (the worked solutions, each once) do not change with the line
    assert [t for b in picked for _, t in b] == [t for b in plain for _, t in b]
    assert pretrain.pretrain_dir("m/tiny-x", PretrainConfig(context_steps=10, pick_line=True), frozenset()) != \
        pretrain.pretrain_dir("m/tiny-x", PretrainConfig(context_steps=10), frozenset())


def test_the_cosine_decay_warms_up_then_falls_to_zero_at_the_last_step_and_constant_stays():
    total = 100  # warm-up: the first 5 steps
    assert [pretrain.lr_factor(s, total) for s in range(5)] == [0.2, 0.4, 0.6, 0.8, 1.0]
    assert pretrain.lr_factor(99, total) == 1.0 and pretrain.lr_factor(4, total, "cosine") == 1.0
    cosine = [pretrain.lr_factor(s, total, "cosine") for s in range(5, total)]
    assert all(a > b for a, b in zip(cosine, cosine[1:])) and cosine[-1] == pytest.approx(0.0, abs=1e-12)
    assert pretrain.lr_factor(52, total, "cosine") == pytest.approx(0.5, abs=0.02)  # half-way through the decay
    with pytest.raises(ValueError, match="lr_decay"):
        pretrain.lr_factor(10, total, "linear")


def test_the_decay_is_part_of_the_cache_key_and_constant_keeps_the_old_key():
    from tiny_recipe.config import PretrainConfig

    assert pretrain.pretrain_dir("m/tiny-x", PretrainConfig(steps=10, lr_decay="cosine"), frozenset()) != \
        pretrain.pretrain_dir("m/tiny-x", PretrainConfig(steps=10), frozenset())
    assert "lr_decay" in pretrain.KEYS_ADDED_LATER and PretrainConfig().lr_decay == "constant"

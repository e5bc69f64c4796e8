"""The rules of the embedded tiny recipe's keys (`tiny.*`, config.py): what a loaded config must obey beyond its
types. The config check (core/config_rules.py) runs them after the system's rules, resolved by the dotted paths
core/recipe_sections.py registers (`TINY_CHOICES`: each key's allowed values; `tiny_rules`); a broken one is a
ConfigError naming the key."""
from __future__ import annotations

from core.rewards import function_path

# the warm-start target each tiny response needs
_WARM_TARGET = {"solve_point": "pointer", "pick_point": "pick_point"}

TINY_CHOICES = {
    "tiny.warm_start.target": ("format", "oracle", "pointer", "pick_point"),
    "tiny.model.response": ("index", "solve_point", "pick_point"),
    "tiny.warm_start.pointer": ("own_answer", "uniform", "pick"),
    "tiny.pretrain.lr_decay": ("constant", "cosine"),
}


def tiny_rules(cfg) -> list:
    """(key, ok, message) rules of the `tiny.*` keys (and of the system keys whose limits the tiny model sets)."""
    t, d, r, a = cfg.tiny, cfg.data, cfg.rollout, cfg.algorithm
    tiny_model = cfg.model.name == "tiny"
    pt, ws, shape = t.pretrain, t.warm_start, t.model
    return [
        ("tiny.train_no_cue_share", 0 <= t.train_no_cue_share <= 1, "must be in [0, 1]"),
        ("data.max_prompt_tokens", not tiny_model
         or d.max_prompt_tokens + r.max_response_tokens <= shape.max_position_embeddings,
         f"plus rollout.max_response_tokens={r.max_response_tokens} exceeds the model's context "
         f"(tiny.model.max_position_embeddings={shape.max_position_embeddings}): prompts that long "
         f"could not be read"),
        ("tiny.pretrain.steps", pt.steps >= 0, "must be >= 0 (0: off)"),
        ("tiny.pretrain.steps", pt.steps == 0 or (tiny_model and d.source == "procedural_math"),
         f"pretrains on procedural worked solutions: needs model.name=tiny and data.source=procedural_math "
         f"(they are {cfg.model.name!r} and {d.source!r}); set tiny.pretrain.steps=0"),
        ("tiny.pretrain.batch_size", pt.batch_size >= 1, "must be >= 1"),
        ("tiny.pretrain.lr", pt.lr > 0, "must be > 0"),
        ("tiny.pretrain.pointer_share", 0 <= pt.pointer_share < 1 and (pt.pointer_share == 0 or t.answer_labels),
         "must be in [0, 1), and above 0 only with tiny.answer_labels (pointer rows read `Answer: X #i` lines)"),
        ("tiny.pretrain.context_steps", pt.context_steps >= 0 and (pt.context_steps == 0 or pt.steps > 0),
         "must be >= 0, and above 0 only after a first stage (tiny.pretrain.steps > 0)"),
        ("tiny.pretrain.context_batch", pt.context_batch >= 1, "must be >= 1"),
        ("tiny.pretrain.context_lr", pt.context_lr > 0, "must be > 0"),
        ("tiny.pick_reward", 0.0 <= t.pick_reward <= 1.0, "must be in [0, 1]"),
        ("verifier.reward.name", not function_path(cfg.verifier.reward) or t.pick_reward == 0,
         f"replaces the built-in reward, which tiny.pick_reward={t.pick_reward} blends with the pick's: "
         f"set tiny.pick_reward=0"),
        ("tiny.pretrain.slipped_share", 0 <= pt.slipped_share < 1, "must be in [0, 1)"),
        ("tiny.pretrain.pack_tokens", 0 <= pt.pack_tokens <= shape.max_position_embeddings,
         f"must be 0 (one text per row) or a row length up to tiny.model.max_position_embeddings "
         f"({shape.max_position_embeddings})"),
        ("tiny.pretrain.solution_check", not pt.solution_check or pt.slipped_share > 0,
         "needs tiny.pretrain.slipped_share > 0 (a check of correct solutions only says nothing)"),
        ("tiny.anchor_corpus_rows", t.anchor_corpus_rows == 0 or (
            t.anchor_corpus_rows > 0 and a.solution_anchor > 0 and tiny_model
            and shape.response == "pick_point" and d.source == "procedural_math"),
         "needs algorithm.solution_anchor > 0, tiny.model.response=pick_point and data.source=procedural_math "
         "(0 = off)"),
        ("tiny.warm_start.pool", ws.pool == 0 or ws.pool >= ws.batch_size,
         "must be 0 (steps x batch_size) or at least tiny.warm_start.batch_size (a step's rows)"),
        ("tiny.warm_start.max_candidates", ws.max_candidates == 0 or d.min_candidates <= ws.max_candidates,
         "must be 0 (every prompt) or at least data.min_candidates"),
        ("tiny.model.response", shape.response == "index" or t.answer_labels,
         f"{shape.response!r} ends a solution with `Answer: X #k`, which points only where the prompt's "
         "answer lines carry their index: set tiny.answer_labels=true"),
        ("tiny.warm_start.target", not ws.enabled or not tiny_model
         or ws.target == _WARM_TARGET.get(shape.response, ws.target)
         and (shape.response != "index" or ws.target in ("format", "oracle")),
         "must be 'pointer' with tiny.model.response=solve_point, 'pick_point' with pick_point, and 'format' or "
         "'oracle' with index (those write `Judgment: IDX` alone)"),
        ("tiny.sample_index_only", not t.sample_index_only or shape.response != "pick_point" or not tiny_model,
         "must be false with tiny.model.response=pick_point (its rollout samples both indices and writes the "
         "solution between them greedily)"),
        ("tiny.sample_index_only", not t.sample_index_only or (
            cfg.task == "selector" and (not tiny_model or shape.response == "solve_point")),
         "samples the index after a greedily written solution's `#`: it needs task=selector and, with the tiny "
         "model, tiny.model.response=solve_point"),
        ("tiny.model.induction_circuit", not shape.induction_circuit or (
            shape.hidden_size, shape.num_heads, shape.num_kv_heads) == (256, 4, 2) and shape.num_layers >= 2,
         "is written for tiny.model hidden_size=256, num_heads=4, num_kv_heads=2 and at least 2 layers"),
        ("data.max_candidates", not (cfg.task == "selector" and tiny_model and r.constrain_index
                                     and shape.split_digits and d.max_candidates > 10),
         "must be <= 10 with the tiny model and rollout.constrain_index (its tokenizer writes one digit per "
         "token, so indices 10-15 are two tokens); or set rollout.constrain_index=false"),
    ]

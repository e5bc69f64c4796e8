"""A tiny Qwen3-architecture selector, built locally and deterministically from a seed.

The embedded default and the tests need a model that installs from nothing: no hub, no download. This
module trains a byte-level BPE tokenizer on the task's own text (digits split one per token, so arithmetic
stays legible to a small model), initialises a `Qwen3ForCausalLM` from a seed, and saves both as a standard
Hugging Face folder that transformers and vLLM load.

With `response="solve_point"` the tokenizer carries `tiny_recipe.chat.SOLVE_POINT_TEMPLATE` as its chat template (the
problem restated after the prompt; the model writes a worked solution and points), with `response="pick_point"`
`tiny_recipe.chat.PICK_POINT_TEMPLATE` (the prompt, then `Pick: #`: the model picks, then solves and points). With
`induction_circuit`, an induction circuit is written into the initial weights (`tiny_recipe.induction`).
Embeddings are tied (as in small Qwen3 models); the saved checkpoint therefore has no `lm_head.weight`,
which both transformers and vLLM re-tie on load. Weight sync sends `lm_head.weight` explicitly
(otherwise the engine's output layer would keep the old weights).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from tiny_recipe.induction import CIRCUIT_CONTEXT, MODEL_INFO_FILE

#: the hooks a tiny model folder names in its MODEL_INFO_FILE (driver/models/hooks.py): the system loads them by path
FOLDER_HOOKS = {
    "response_form": "tiny_recipe.forms:response_form",
    "frozen_entries": "tiny_recipe.model:frozen_entries",
    "extra_rows": "tiny_recipe.anchor_rows:extra_rows",
    "problems_seen": "tiny_recipe.pretrain:problems_seen",
}

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"
SPECIAL_TOKENS = [EOS_TOKEN, PAD_TOKEN]


def train_tokenizer(texts: Iterable[str], vocab_size: int, split_digits: bool = True):
    """Train a byte-level BPE tokenizer on `texts`; returns a transformers PreTrainedTokenizerFast.

    With `split_digits`, digits are pre-split one per token; without, a run of digits is one pre-token, so BPE
    merges the frequent numbers into single tokens. Deterministic for the same texts and settings.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=split_digits),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN, model_max_length=1 << 20,
    )


def qwen3_config(shape, tokenizer):
    """A Qwen3Config for `shape` (tiny_recipe.config.TinyModelConfig) and the trained tokenizer."""
    from transformers import Qwen3Config

    head_dim = shape.hidden_size // shape.num_heads
    return Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads,
        head_dim=head_dim,
        max_position_embeddings=shape.max_position_embeddings,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )


def build_tiny_model(shape, texts: Iterable[str], out_dir: str | Path, seed: int = 0) -> Path:
    """Train the tokenizer on `texts`, initialise the model from `seed`, save both to `out_dir`.

    Writes atomically: the folder appears complete or not at all. Returns the folder.
    """
    import torch
    from transformers import Qwen3ForCausalLM

    out_dir = Path(out_dir)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    _remove(tmp)
    tokenizer = train_tokenizer(texts, shape.vocab_size, getattr(shape, "split_digits", True))
    response = getattr(shape, "response", "index")
    if response != "index":
        from tiny_recipe.chat import PICK_POINT_TEMPLATE, SOLVE_POINT_TEMPLATE

        tokenizer.chat_template = {"solve_point": SOLVE_POINT_TEMPLATE, "pick_point": PICK_POINT_TEMPLATE}[response]
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(qwen3_config(shape, tokenizer))
    circuit = bool(getattr(shape, "induction_circuit", False))
    if circuit:
        from tiny_recipe.induction import check_shape, wire_induction  # torch-heavy: only when wiring

        check_shape(shape)
        wire_induction(model, seed, CIRCUIT_CONTEXT)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    info = {"kind": "tiny", "seed": seed, "params": sum(p.numel() for p in model.parameters()),
            "hooks": dict(FOLDER_HOOKS)}
    if circuit:
        info["induction_circuit"] = {"context": CIRCUIT_CONTEXT}
    (tmp / MODEL_INFO_FILE).write_text(json.dumps(info))
    _remove(out_dir)
    tmp.rename(out_dir)
    return out_dir


def build(tiny_cfg, corpus_texts: list, out_dir) -> Path:
    """The `build` hook of model.name=tiny (driver/models/hooks.py): `build_tiny_model` as the recipe's section
    `tiny_cfg` (TinyRecipeConfig: `tiny.model`, `tiny.seed`) says."""
    return build_tiny_model(tiny_cfg.model, corpus_texts, out_dir, seed=tiny_cfg.seed)


def _remove(path: Path) -> None:
    import shutil

    if path.exists():
        shutil.rmtree(path)


def frozen_entries(model_dir) -> dict | None:
    """The entries a tiny model folder keeps frozen in every training stage, as the learner takes them
    (core/frozen.py: {parameter name: bool array}): its hand-written induction circuit when one was written
    (`tiny_recipe.induction.circuit_masks`, the context its folder records); None for any other folder."""
    from tiny_recipe.induction import circuit_masks, wired_circuit

    context = wired_circuit(model_dir)
    if not context:
        return None
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    return {name: mask.numpy() for name, mask in circuit_masks(model, context).items() if bool(mask.any())}

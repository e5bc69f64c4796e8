"""An induction circuit written into the tiny Qwen3's initial weights (`tiny.model.induction_circuit`).

In `core` because both sides use it: the model builder writes it (tiny_recipe/model.py), and every training stage,
the DeepSpeed learner actor included, keeps it frozen (`freeze_if_wired`).

A content-keyed induction head (attend to the token after the earlier occurrence of the current context, copy it)
forms in the default's tiny model (docs/models.md) only after ~2,300 steps of synthetic repeats (~8.5 min on 2 CPU
cores), and every no-cue route to selection needs one: naming the candidate that states a value (BENCHMARKS.md).
The circuit is known (Olsson et al. 2022, "In-context learning and induction heads", arXiv 2209.11895): a
previous-token head in one layer and, in a later layer, a head whose key reads what the previous-token head wrote.
`wire_induction` writes it by hand in weights the ordinary Qwen3 architecture has (vLLM runs the result unchanged);
training leaves it as written only when `freeze_circuit` masks its gradients (language modelling erases its use
otherwise: after ~600 steps of worked solutions and answer lookups, the pointer named a candidate stating the asked
answer 0.40 of the time unfrozen, 0.95 frozen).

Residual stream layout (hidden 256): dims [0, 64) hold a fixed random identity code of each token (the embedding's
columns there), [64, 128) the rest of the embedding (trained freely), [128, 224) three blocks of 32 dims where layer 0
writes what stood 1, 2 and 3 positions back, dim 255 a constant 1 (every token's embedding carries it; it gives
layer 0 a query and key that do not depend on content). Every other residual writer (the MLPs, the other heads'
output columns, layers 2-3) starts at zero, a zero-initialised residual branch that training grows.

- Layer 0, heads 0-2 (`context` of them): query and key read only the constant dim; through RoPE (pairs `FAST` of
  the rotary frequencies) their dot product peaks at a relative offset of exactly d = 1, 2, 3, so head d-1 attends
  d tokens back. The value maps the identity code to 64 dims (`V`, orthonormal); each head writes 32 of them into
  its block d.
- Layer 1, head 0: key = sum_d A_d block_d, query = A_1 V(code of the current token) + sum_{d>1} A_d block_(d-1),
  in the lowest rotary frequencies (`SLOW`, nearly position-free over a few hundred tokens): high exactly where the
  d tokens before the key position equal the current token and the d-1 before it. Value `V` of the attended
  token's code, output `V^T` back into the code dims, scaled so the tied output layer predicts the copied token.

Untrained, the circuit copies 93-99% of the tokens of a repeated random sequence, and 90% when the alphabet has
only 8 tokens (three tokens of context needed).
"""
from __future__ import annotations

import json
from pathlib import Path

MODEL_INFO_FILE = "genselect_model.json"   # a built model's record: kind, seed, parameters, the circuit if wired
CIRCUIT_CONTEXT = 3                        # tokens of context the wired induction head matches
TOKEN_DIMS = 128
ID_DIMS = 64            # dims [0, 64) of the embedding: a fixed random code per token that the circuit matches on
COPY_DIMS = 32          # each previous-token head copies this many dims of the embedding
PREV_START = 128        # previous-token block of offset d: [PREV_START + 32 (d - 1), PREV_START + 32 d)
CONSTANT_DIM = 255
FAST = range(0, 8)      # rotary pairs with angle 10000^(-i/32) per position: 1 rad down to 0.18 rad
SLOW = range(22, 32)    # 1.8e-3 down to 1.3e-4 rad per position: a content match survives hundreds of tokens


def rotary_angles(head_dim: int, theta: float):
    """(head_dim / 2,) rotation per position of each rotary pair (HF `rotate_half` layout: pair i = dims i, i + d/2)."""
    import torch

    return theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)


def offset_query_key(head_dim: int, theta: float, offset: int):
    """(q, k), each (head_dim,): constant vectors whose rotary dot product for query position m and key position n
    is sum_i cos((m - n - offset) angle_i) over the FAST pairs, largest at n = m - offset."""
    import torch

    angles = rotary_angles(head_dim, theta)
    half = head_dim // 2
    q, k = torch.zeros(head_dim, dtype=torch.float64), torch.zeros(head_dim, dtype=torch.float64)
    for i in FAST:
        k[i] = 1.0
        q[i], q[i + half] = torch.cos(offset * angles[i]), -torch.sin(offset * angles[i])
    return q.float(), k.float()


def prev_block(offset: int) -> slice:
    return slice(PREV_START + COPY_DIMS * (offset - 1), PREV_START + COPY_DIMS * offset)


def slow_dims(head_dim: int) -> list[int]:
    half = head_dim // 2
    return [i for i in SLOW] + [i + half for i in SLOW]


def wire_induction(model, seed: int = 0, context: int = 3, fast_gain: float = 4.0, slow_gain: float = 2.0,
                   copy_gain: float = 6.0):
    """Overwrite `model`'s (a tiny Qwen3ForCausalLM, 2+ layers, hidden 256, head_dim 64, 4 heads) weights in place
    with the circuit of the module docstring, matching the last `context` tokens (1-3); returns the model."""
    import torch

    config = model.config
    hidden, head_dim = config.hidden_size, config.head_dim
    assert hidden == 256 and head_dim == 64 and config.tie_word_embeddings and 1 <= context <= 3, \
        "written for the default tiny shape"
    theta = config.rope_parameters["rope_theta"]
    gen = torch.Generator().manual_seed(seed)
    layers = model.model.layers
    with torch.no_grad():
        embed = model.model.embed_tokens.weight
        embed.zero_()
        embed[:, :ID_DIMS] = torch.randn(embed.shape[0], ID_DIMS, generator=gen) / ID_DIMS ** 0.5
        embed[:, ID_DIMS:TOKEN_DIMS] = torch.randn(embed.shape[0], TOKEN_DIMS - ID_DIMS, generator=gen) * 0.02
        embed[:, CONSTANT_DIM] = 1.0
        for layer in layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        value = torch.zeros(head_dim, TOKEN_DIMS)           # V: (64, 128), an orthonormal map of the identity code
        value[:, :ID_DIMS] = torch.linalg.qr(torch.randn(ID_DIMS, ID_DIMS, generator=gen))[0][:head_dim]
        # layer 0: head d - 1 attends to offset d and copies V[:32] of that token into block d
        attn0 = layers[0].self_attn
        for kv in range(config.num_key_value_heads):
            rows = slice(kv * head_dim, (kv + 1) * head_dim)
            attn0.k_proj.weight[rows].zero_()
            attn0.k_proj.weight[rows, CONSTANT_DIM] = offset_query_key(head_dim, theta, 1)[1]
            attn0.v_proj.weight[rows].zero_()
            attn0.v_proj.weight[rows, :TOKEN_DIMS] = value
        for offset in range(1, context + 1):
            head = offset - 1
            rows = slice(head * head_dim, (head + 1) * head_dim)
            attn0.q_proj.weight[rows].zero_()
            attn0.q_proj.weight[rows, CONSTANT_DIM] = offset_query_key(head_dim, theta, offset)[0]
            attn0.o_proj.weight[prev_block(offset), rows][:, :COPY_DIMS] = torch.eye(COPY_DIMS) / 8.0
        for norm in (attn0.q_norm, attn0.k_norm):
            for i in FAST:
                norm.weight[i] = norm.weight[i + head_dim // 2] = fast_gain
        # layer 1, head 0: the induction head; key = sum_d A_d block_d, query = A_1 V e(current) + sum_d A_(d+1) block_d
        attn1 = layers[1].self_attn
        dims = slow_dims(head_dim)
        attn1.q_proj.weight[:head_dim].zero_()
        attn1.k_proj.weight[:head_dim].zero_()
        for offset in range(1, context + 1):
            mix = torch.randn(len(dims), COPY_DIMS, generator=gen) / len(dims) ** 0.5        # A_d: (20, 32)
            attn1.k_proj.weight[dims, prev_block(offset)] = mix
            if offset == 1:
                attn1.q_proj.weight[dims, :TOKEN_DIMS] = mix @ value[:COPY_DIMS]
            else:
                attn1.q_proj.weight[dims, prev_block(offset - 1)] = mix
        for norm in (attn1.q_norm, attn1.k_norm):
            norm.weight[dims] = slow_gain
        attn1.v_proj.weight[:head_dim].zero_()
        attn1.v_proj.weight[:head_dim, :TOKEN_DIMS] = value
        attn1.o_proj.weight[:TOKEN_DIMS, :head_dim] = copy_gain * value.T / 8.0
    return model


def circuit_masks(model, context: int = 3) -> dict:
    """{parameter name: bool tensor, True where the entry belongs to the wired circuit}: the circuit's heads (their
    query, key and value rows, output columns), both layers' query/key norms, everything that writes into the
    previous-token blocks before layer 1 reads them (layer 0's other output columns and MLP rows there), and the
    embedding's columns outside the token block (the previous-token blocks stay 0, the constant dim 1). Zeroing
    these entries' gradients (`freeze_circuit`) trains everything else around a circuit that stays as written."""
    import torch

    config = model.config
    head_dim = config.head_dim
    masks = {name: torch.zeros_like(p, dtype=torch.bool) for name, p in model.named_parameters()}
    masks["model.embed_tokens.weight"][:, :ID_DIMS] = True
    masks["model.embed_tokens.weight"][:, TOKEN_DIMS:] = True
    prev = slice(PREV_START, PREV_START + COPY_DIMS * context)
    for layer, heads, kv_heads in ((0, range(context), range(config.num_key_value_heads)), (1, range(1), range(1))):
        pre = f"model.layers.{layer}."
        for h in heads:
            masks[pre + "self_attn.q_proj.weight"][h * head_dim:(h + 1) * head_dim] = True
            masks[pre + "self_attn.o_proj.weight"][:, h * head_dim:(h + 1) * head_dim] = True
        for kv in kv_heads:
            for proj in ("k_proj", "v_proj"):
                masks[pre + f"self_attn.{proj}.weight"][kv * head_dim:(kv + 1) * head_dim] = True
        for norm in ("self_attn.q_norm", "self_attn.k_norm", "input_layernorm"):
            masks[pre + f"{norm}.weight"][:] = True
    for rows in (prev, slice(0, ID_DIMS)):   # layer 1 reads the identity code and the blocks as layer 0 leaves them
        masks["model.layers.0.self_attn.o_proj.weight"][rows] = True
        masks["model.layers.0.mlp.down_proj.weight"][rows] = True
    return masks


def freeze_circuit(model, context: int = 3) -> list:
    """Zero the gradient of every circuit entry (`circuit_masks`) on each backward pass (core.frozen.freeze_entries);
    returns the hook handles. With AdamW and no weight decay, an entry whose gradient is always 0 never moves."""
    from core.frozen import freeze_entries

    return freeze_entries(model, circuit_masks(model, context))


def check_shape(shape) -> None:
    """ValueError unless `shape` (tiny_recipe.config.TinyModelConfig) is the shape the circuit is written for."""
    got = (shape.hidden_size, shape.num_heads, shape.num_kv_heads, shape.hidden_size // max(1, shape.num_heads),
           shape.num_layers >= 2)
    if got != (256, 4, 2, 64, True):
        raise ValueError("tiny.model.induction_circuit is written for hidden_size=256, num_heads=4, num_kv_heads=2 "
                         f"and at least 2 layers; got hidden_size={shape.hidden_size}, num_heads={shape.num_heads}, "
                         f"num_kv_heads={shape.num_kv_heads}, num_layers={shape.num_layers}")


def wired_circuit(model_dir) -> int:
    """Tokens of context of the induction circuit written into the model in `model_dir` (its MODEL_INFO_FILE's
    `induction_circuit`), 0 when none was."""
    path = Path(model_dir) / MODEL_INFO_FILE
    info = json.loads(path.read_text()) if path.is_file() else {}
    return int((info.get("induction_circuit") or {}).get("context", 0))


def freeze_if_wired(model, model_dir) -> list:
    """`freeze_circuit(model)` when the model folder `model_dir` records a wired circuit, else nothing; returns the
    hook handles. Every training stage of a tiny model calls it after loading (pretraining, warm-start, learner)."""
    context = wired_circuit(model_dir)
    return freeze_circuit(model, context) if context else []

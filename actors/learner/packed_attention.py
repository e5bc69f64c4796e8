"""Attention over a packed micro-batch by blocks: each block one SDPA call on the keys it may see.

A packed micro-batch (core/packing.py) holds shared-prefix units back to back: a prompt, then the responses
that share it. A prompt token sees the earlier tokens of its prompt; a response token sees its whole prompt and
the earlier tokens of its own response; padding is seen by nothing. The learner used to give SDPA this as a dense
(rows, 1, W, W) boolean mask: W^2 bytes per row (1 GiB at W = 32K), and a kernel that computes every one of the
W^2 scores, most of them masked. Here the micro-batch carries a `BlockLayout` (core/packing.py) instead, and each block
is one `scaled_dot_product_attention` call on its own keys only:

* a prompt `[a, b)`: queries and keys `[a, b)`, causal (`is_causal=True`, no mask tensor);
* a response segment `[s, e)` of a unit whose prompt is `[a, b)`: queries `[s, e)`, keys `[a, b)` then `[s, e)`:
  the whole prompt, causal within the segment, which is causal aligned to the lower right (torch's
  `causal_lower_right`, so that CUDA keeps its flash kernel; CPU materialises the (e - s, b - a + e - s) mask);
* padding: output 0 (no target reads it, no block sees it).

Grouped-query attention is SDPA's own (`enable_gqa`): keys and values are not copied per query head.
The cost is the sum over blocks of queries x keys, and the memory of a mask is per response segment, so neither
grows with W^2. Each query's softmax runs over exactly the keys the dense mask allows, in the same order of
positions, so the outputs equal the dense-mask attention up to float rounding (tests/actors/test_packing.py).

FlexAttention block masks would express the same layout in one call, but in torch 2.13 FlexAttention has no
backward on CPU ("FlexAttention does not support backward on CPU"), eager or compiled.

The layout reaches the attention layers through transformers' attention interface: `install(model)` registers
`packed_attention_forward` under the name "genselect_packed" (it hands any other mask to transformers' SDPA, so
the model keeps working with ordinary masks) and `_PolicyLogprobs` passes the layout as the model's
`attention_mask={"full_attention": layout}`, which transformers forwards to every layer untouched.
"""
from __future__ import annotations

import torch
from torch.nn.attention.bias import causal_lower_right

from core.packing import BlockLayout

NAME = "genselect_packed"


def _response_mask(prompt_len: int, length: int):
    """What a response segment of `length` queries sees of its `prompt_len + length` keys: every prompt key,
    then causal over the segment, i.e. causal aligned to the lower right. As torch's `CausalBias` rather than
    a boolean tensor, so that on CUDA SDPA keeps its flash kernel (a mask tensor rules it out); on CPU it is
    materialised as the (length, prompt_len + length) boolean mask it stands for."""
    return causal_lower_right(length, prompt_len + length)


def _sdpa(query, key, value, **kwargs) -> torch.Tensor:
    """SDPA over query (1, H, Lq, D) and key/value (1, H_kv, Lk, D): grouped-query attention (H_kv < H) is
    SDPA's own (`enable_gqa`), with no copy of the keys and values per query head."""
    return torch.nn.functional.scaled_dot_product_attention(query, key, value,
                                                            enable_gqa=key.shape[1] != query.shape[1], **kwargs)


def block_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layout: BlockLayout,
                    scaling=None) -> torch.Tensor:
    """query (rows, H, W, D), key/value (rows, H_kv, W, D) -> (rows, H, W, D) attention output."""
    rows, heads, width, dim = query.shape
    if (rows, width) != (layout.rows, layout.width):
        raise ValueError(f"attention input {rows}x{width} does not match the layout {layout.rows}x{layout.width}")
    out_rows = []
    for r in range(rows):
        blocks = layout.blocks[r]
        sizes = [e - s for _, s, e, _, _ in blocks]
        # split (not slice): the backward of a split is one concatenation, a slice's is a zero tensor of the whole
        # row per block
        qs, ks, vs = (x[r:r + 1].split(sizes, dim=2) for x in (query, key, value))
        start_of = {s: j for j, (_, s, _, _, _) in enumerate(blocks)}
        parts = []
        for j, (kind, s, e, a, b) in enumerate(blocks):
            if kind == "prompt":
                parts.append(_sdpa(qs[j], ks[j], vs[j], is_causal=True, scale=scaling))
            elif kind == "response":
                p = start_of[a]  # the unit's prompt block
                parts.append(_sdpa(qs[j], torch.cat([ks[p], ks[j]], dim=2), torch.cat([vs[p], vs[j]], dim=2),
                                   attn_mask=_response_mask(b - a, e - s), scale=scaling))
            else:
                parts.append(query.new_zeros(1, heads, e - s, dim))
        out_rows.append(torch.cat(parts, dim=2) if len(parts) > 1 else parts[0])
    return torch.cat(out_rows, dim=0) if rows > 1 else out_rows[0]


def query_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layout: BlockLayout,
                    positions: torch.Tensor, scaling=None) -> torch.Tensor:
    """Attention of a few queries: query (n, H, D) at the sorted flat `positions` (into rows * width) of
    `layout`, key/value (rows, H_kv, W, D) at every position -> (n, H, D). Each query sees what it sees in
    `block_attention` (its prompt block causally, or its prompt and its own segment causally)."""
    n, heads, dim = query.shape
    cols = positions.tolist()
    parts, i = [], 0
    for r in range(layout.rows):
        blocks = layout.blocks[r]
        base = r * layout.width
        if i >= n or cols[i] >= base + layout.width:
            continue
        sizes = [e - s for _, s, e, _, _ in blocks]
        ks, vs = (x[r:r + 1].split(sizes, dim=2) for x in (key, value))
        start_of = {s: j for j, (_, s, _, _, _) in enumerate(blocks)}
        for j, (kind, s, e, a, b) in enumerate(blocks):
            first = i
            while i < n and cols[i] < base + e:
                i += 1
            if i == first:
                continue
            if kind == "pad":
                raise ValueError("a query position in a padding block")
            seen = torch.tensor([c - base - s for c in cols[first:i]], device=query.device)  # offsets in [s, e)
            causal = torch.arange(e - s, device=query.device)[None, :] <= seen[:, None]
            if kind == "prompt":
                kk, vv, mask = ks[j], vs[j], causal
            else:
                p = start_of[a]
                kk, vv = torch.cat([ks[p], ks[j]], dim=2), torch.cat([vs[p], vs[j]], dim=2)
                mask = torch.cat([causal.new_ones(i - first, b - a), causal], dim=1)
            q = query[first:i].transpose(0, 1).unsqueeze(0)  # (1, H, m, D)
            parts.append(_sdpa(q, kk, vv, attn_mask=mask, scale=scaling)[0].transpose(0, 1))
    if i != n:
        raise ValueError("query positions outside the layout")
    return torch.cat(parts, dim=0) if len(parts) > 1 else parts[0]


def packed_attention_forward(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                             **kwargs):
    """transformers attention-interface function: block attention for a BlockLayout, SDPA otherwise."""
    if isinstance(attention_mask, BlockLayout):
        if dropout:
            raise ValueError("block attention has no dropout")
        return block_attention(query, key, value, attention_mask, scaling).transpose(1, 2).contiguous(), None
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  **kwargs)


def install(model) -> None:
    """Register the "genselect_packed" attention (and SDPA's mask builder under the same name) and switch
    `model` to it. Ordinary masks still go to SDPA; a BlockLayout goes to `block_attention`."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, packed_attention_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    if getattr(model.config, "_attn_implementation", None) != NAME:
        model.set_attn_implementation(NAME)

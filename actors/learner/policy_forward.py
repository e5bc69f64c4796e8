"""The policy's forward pass and the per-micro-batch losses of the learner (actors/learner/learner.py).

`_PolicyLogprobs` wraps a Hugging Face causal LM: per-token log-probs of the response tokens of a packed micro-batch
(core/packing.py), at `logits / temperature` as the engine sampled them, with the last layer computed at the target
positions only and a packed block layout for attention (actors/learner/packed_attention.py). `micro_batch_loss` is the
DAPO term of one micro-batch (arXiv 2503.14476 eq. 12, clip-higher, token-level mean over the whole batch; truncated
importance weights against a proximal policy where configured); `anchor_loss` the likelihood term of anchor tokens.
"""
from __future__ import annotations

import torch

from actors.learner import packed_attention
from core.algo.dapo import clipped_policy_loss, token_level_mean, truncated_is_weights

# decoder layers that are exactly: x + attn(input_layernorm(x)), then h + mlp(post_attention_layernorm(h))
_PRUNABLE_LAYERS = ("Qwen3DecoderLayer", "Qwen2DecoderLayer", "LlamaDecoderLayer", "MistralDecoderLayer")


def enable_gradient_checkpointing(hf) -> None:
    """`learner.gradient_checkpointing`: recompute each decoder layer in the backward pass, non-reentrant
    (works under no_grad and with DeepSpeed)."""
    hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


class _PolicyLogprobs(torch.nn.Module):
    """Wraps a HF causal LM: packed inputs -> log-probs and entropies of the target tokens only.

    The LM head runs only at the N target positions (GenSelect prompts are ~90% of the tokens).
    Inputs: input_ids, position_ids (rows, width); attention_mask: the micro-batch's BlockLayout (block
    attention, actors/learner/packed_attention.py) or a (rows, 1, width, width) bool mask (SDPA; the reference);
    target_index, target_ids (N,); optional allowed_ids (N, K), -1 padded (see core.packing.MicroBatch):
    then each distribution is the softmax over those ids only, as the constrained sampler drew from it.
    Returns two (N,) fp32 tensors: log pi(target) (with grad) and the entropy of the predictive
    distribution (no grad).

    The last decoder layer runs at the target positions too (`last_layer_at_targets`, for pre-norm decoder
    layers of the kinds in `_PRUNABLE_LAYERS`): its keys and values everywhere (the targets attend to them),
    its queries (with a BlockLayout), `o_proj` and MLP only where the loss reads them. On the default (one-token
    responses after ~300-token prompts: 16 target positions of ~4,800) that is a quarter of the model's work.
    """

    def __init__(self, model: torch.nn.Module, temperature: float = 1.0, last_layer_at_targets: bool = True):
        super().__init__()
        packed_attention.install(model)
        self.model = model
        self.temperature = temperature
        base = model.base_model
        self.last_layer_at_targets = last_layer_at_targets and all(
            type(layer).__name__ in _PRUNABLE_LAYERS for layer in base.layers) and all(
            hasattr(base, name) for name in ("embed_tokens", "rotary_emb", "norm"))

    def _hidden_at_targets(self, input_ids, position_ids, attention_mask, target_index):
        """Final hidden states (after the last norm) at `target_index` of the flattened (rows * width)."""
        base = self.model.base_model
        if isinstance(attention_mask, packed_attention.BlockLayout):  # handed to every layer untouched
            attention_mask = {"full_attention": attention_mask, "sliding_attention": attention_mask}
        if not self.last_layer_at_targets:
            hidden = base(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                          use_cache=False)[0]
            return hidden.reshape(-1, hidden.shape[-1]).index_select(0, target_index)
        # Qwen3Model / LlamaModel.forward without a cache, the last layer's MLP at the targets only
        layers = base.layers[:base.config.num_hidden_layers]
        types = getattr(base.config, "layer_types", None) or ["full_attention"] * len(layers)
        masks = [attention_mask[t] if isinstance(attention_mask, dict) else attention_mask for t in types]
        hidden = base.embed_tokens(input_ids)
        position_embeddings = base.rotary_emb(hidden, position_ids)
        for layer, mask in zip(layers[:-1], masks):
            hidden = layer(hidden, attention_mask=mask, position_ids=position_ids,
                           position_embeddings=position_embeddings, use_cache=False)
        last = layers[-1]
        positions, inverse = torch.unique(target_index, return_inverse=True)  # the last prompt token is shared
        x = last.input_layernorm(hidden)
        if isinstance(masks[-1], packed_attention.BlockLayout):  # queries at the targets only
            attn = self._last_attention_at(last.self_attn, x, position_embeddings, masks[-1], positions)
        else:
            attn, _ = last.self_attn(hidden_states=x, attention_mask=masks[-1], position_ids=position_ids,
                                     position_embeddings=position_embeddings)
            attn = attn.reshape(-1, attn.shape[-1]).index_select(0, positions)
        h = hidden.reshape(-1, hidden.shape[-1]).index_select(0, positions) + attn
        h = h + last.mlp(last.post_attention_layernorm(h))
        return base.norm(h).index_select(0, inverse)

    @staticmethod
    def _last_attention_at(attn, x, position_embeddings, layout, positions):
        """The attention block's output (o_proj included) at `positions` only: keys and values at every
        position, queries at `positions` (Qwen3/Llama attention: q/k norms when present, RoPE)."""
        rows, width, dim = x.shape
        hd = attn.head_dim
        q_norm, k_norm = getattr(attn, "q_norm", torch.nn.Identity()), getattr(attn, "k_norm", torch.nn.Identity())
        cos, sin = position_embeddings  # (rows, width, hd)

        def rotate(t, c, s):  # transformers' apply_rotary_pos_emb, one tensor
            half = t.shape[-1] // 2
            return t * c + torch.cat((-t[..., half:], t[..., :half]), dim=-1) * s

        k = rotate(k_norm(attn.k_proj(x).view(rows, width, -1, hd)).transpose(1, 2), cos[:, None], sin[:, None])
        v = attn.v_proj(x).view(rows, width, -1, hd).transpose(1, 2)
        q = q_norm(attn.q_proj(x.reshape(-1, dim).index_select(0, positions)).view(len(positions), -1, hd))
        q = rotate(q, cos.reshape(-1, hd)[positions][:, None], sin.reshape(-1, hd)[positions][:, None])
        out = packed_attention.query_attention(q, k, v, layout, positions, attn.scaling)
        return attn.o_proj(out.reshape(len(positions), -1))

    def forward(self, input_ids, position_ids, attention_mask, target_index, target_ids, allowed_ids=None,
                free_targets=None):
        """(log-probs (N,), entropies (N,)) of the targets; with `allowed_ids` over those ids only, except the
        targets `free_targets` (N,) bool marks (the anchor's), which are scored over the whole vocabulary."""
        h = self._hidden_at_targets(input_ids, position_ids, attention_mask, target_index)
        logits = self.model.get_output_embeddings()(h).float()
        if self.temperature != 1.0:
            logits = logits / self.temperature
        target_logits = logits.gather(1, target_ids.unsqueeze(1)).squeeze(1)
        free = allowed_ids is not None and free_targets is not None
        full_logits = logits
        if allowed_ids is not None:  # constrained decoding: the distribution over the allowed ids only
            logits = logits.gather(1, allowed_ids.clamp(min=0)).masked_fill(allowed_ids < 0, float("-inf"))
        log_z = torch.logsumexp(logits, dim=-1)
        logprobs = target_logits - log_z
        entropy = _entropy(logits, log_z)
        if free:  # the anchor's targets and the unconstrained ones: over the whole vocabulary
            free_log_z = torch.logsumexp(full_logits, dim=-1)
            logprobs = torch.where(free_targets, target_logits - free_log_z, logprobs)
            entropy = torch.where(free_targets, _entropy(full_logits, free_log_z), entropy)
        return logprobs, entropy


def _entropy(logits, log_z):
    """(N,) entropies (no grad) of the rows of `logits` (N, K; -inf where a token is not allowed), `log_z` (N,) their
    log-normalisers."""
    with torch.no_grad():
        probs = torch.softmax(logits, dim=-1)
        return log_z.detach() - (probs * logits.masked_fill(probs == 0, 0.0)).sum(-1)


def micro_batch_loss(logprobs, mb, algo, num_tokens: int, world_size: int, prox=False) -> tuple:
    """The loss one packed micro-batch backpropagates (pure: no engine, no process group).

    logprobs: (N,) log pi of `mb`'s targets (with grad). `prox`: False for the behaviour ratio, the proximal
    log-probs (N,) for the decoupled ratio, or None for "the proximal policy is the current weights" (this
    forward pass's own values, detached). Returns (loss to backpropagate: the token-sum scaled by
    world_size / num_tokens, the token-sum itself, the clip statistics, the truncated IS weights or None).
    """
    d = logprobs.device
    behaviour, weights = mb.behaviour_logprobs.to(d), mb.loss_weights.to(d)
    old, is_w = behaviour, None
    if prox is None:
        prox = logprobs.detach()
    if prox is not False:  # decoupled PPO: ratio vs proximal, truncated IS behaviour -> proximal
        is_w = truncated_is_weights(behaviour, prox, algo.tis_cap)
        old = prox
    loss_sum, stats = clipped_policy_loss(
        logprobs[None], old[None], mb.advantages.to(d)[None], weights[None], eps_low=algo.eps_low,
        eps_high=algo.eps_high, dual_clip_c=algo.dual_clip_c, is_weights=None if is_w is None else is_w[None])
    return token_level_mean(loss_sum, num_tokens, grad_divisor=world_size), loss_sum, stats, is_w


def anchor_loss(logprobs, mb, coef: float, num_anchor_tokens: int, world_size: int) -> tuple:
    """The label-free solution anchor of one packed micro-batch (pure): `coef` times the mean negative log-likelihood
    of the anchor targets (`mb.anchor_weights`: the model's own greedy solutions, and the worked solutions of
    `tiny.anchor_corpus_rows`), averaged over the `num_anchor_tokens` of the whole mini-batch on all ranks
    exactly as the DAPO token mean is (`token_level_mean`). A supervised term beside the policy gradient, as
    InstructGPT's pretraining mix (arXiv 2203.02155 eq. 2).
    logprobs: (N,) with grad. Returns (loss to backpropagate, the micro-batch's NLL sum, detached)."""
    nll_sum = -(logprobs * mb.anchor_weights.to(logprobs.device)).sum()
    return coef * token_level_mean(nll_sum, num_anchor_tokens, grad_divisor=world_size), nll_sum.detach()



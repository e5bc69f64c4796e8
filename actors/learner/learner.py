"""DeepSpeed learner rank: packed DAPO steps with an exact token-level loss across micro-batches and ranks.

A plain class (ray.remote is applied at launch, cluster/launch.py). `num_ranks` instances form one
process group (gloo on CPU, NCCL on GPU) and one DeepSpeed engine (ZeRO-2 by default, ZeRO-3 supported;
fp32 or bf16 with fp32 master weights; torch AdamW; global-norm clipping; LambdaLR warm-up + decay).

Exact DAPO token-level loss (arXiv 2503.14476 eq. 12) under sharding. One optimizer update sees a global
mini-batch spread over R ranks and M_r micro-batches per rank. Each micro-batch backpropagates

    loss_mb = sum_{tokens in mb} l_t * R / N_global          (dapo.token_level_mean, grad_divisor=R)

where N_global is the loss-token count of the whole mini-batch on all ranks (one all-reduce per step).
Gradients add up over micro-batches (DeepSpeed gradient accumulation with the boundary set by hand and
`gradient_accumulation_steps=1`, so DeepSpeed does not rescale) and DeepSpeed *averages* them over ranks
(divides by R), so the update uses sum_{all tokens} grad l_t / N_global: the global token mean whatever the
split. A test checks that 2 ranks on a split batch give the same weights as 1 rank on the whole batch.

Every rank runs the same number of forward/backward passes (ZeRO-3 gathers weights in the forward, ZeRO-2
reduces gradients in the backward): a rank with fewer packed micro-batches runs zero-weight dummies. The forward pass
and the per-micro-batch losses: actors/learner/policy_forward.py.

Weight sync: the learner holds the sending side of each weight transport it is asked to send through
(actors/weight_sync/: broadcast.py's `BroadcastSender`, ipc.py's `IpcSender`; the object store needs only
`export_weights`), made on first use; its Ray-callable methods below hand each call to that sender.
"""
from __future__ import annotations

import datetime
import functools
import logging
import time
from pathlib import Path
from typing import Optional

import deepspeed
import numpy as np
import torch

from actors.learner import checkpoint_io as cio
from actors.faults import maybe_crash
from actors.learner.process_group import join_process_group
from core.packing import (count_anchor_tokens, count_loss_tokens, count_sequences, dummy_micro_batch,
                          pack_sequences, split_mini_batches, unpack_per_sequence)
from actors.learner.policy_forward import _PolicyLogprobs, anchor_loss, enable_gradient_checkpointing, micro_batch_loss
from actors.weight_sync.broadcast import BroadcastSender
from actors.weight_sync.ipc import IpcSender
from core.algo.schedules import lr_multiplier
from core.records import TrainSequence

log = logging.getLogger(__name__)
CKPT_TAG = "state"
_STAT_KEYS = ("clip_frac", "clip_frac_high", "clip_frac_low", "dual_clip_frac", "approx_kl", "ratio_mean")


class Learner:
    """One data-parallel rank of the DeepSpeed learner.

    `total_train_steps` (train_step calls of the run) is needed by the 'linear'/'cosine' schedules;
    `temperature` must equal the rollout sampling temperature when behaviour log-probs are the engine's
    processed (temperature-scaled) log-probs.
    """

    def __init__(self, cfg, algo, model_path: str, rank: int = 0, world_size: int = 1,
                 master_addr: str = "127.0.0.1", master_port: int = 29500, seed: int = 0,
                 total_train_steps: int = 0, temperature: float = 1.0, frozen: Optional[dict] = None):
        """frozen: {parameter name: bool array, True where the entry never trains} (core/frozen.py), the entries the
        model folder declares frozen (tiny_recipe.model.frozen_entries for the embedded tiny model); None: none."""
        from transformers import AutoModelForCausalLM

        from core.frozen import freeze_entries

        if algo.ratio_reference not in ("behaviour", "proximal"):  # 'auto' is resolved by core.config
            raise ValueError(f"algorithm.ratio_reference={algo.ratio_reference!r}: the learner needs 'behaviour' or "
                             f"'proximal' (load the config with core.config.load_config to resolve 'auto')")
        self.cfg, self.algo, self.model_path = cfg, algo, Path(model_path)
        self.rank, self.world_size = rank, world_size
        logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.set_device(0)  # Ray gives each rank its own visible GPU
        self.device = torch.device("cuda", 0) if cuda else torch.device("cpu")
        join_process_group(functools.partial(deepspeed.init_distributed, dist_backend="nccl" if cuda else "gloo",
                                             auto_mpi_discovery=False, rank=rank, world_size=world_size,
                                             timeout=datetime.timedelta(seconds=cfg.step_timeout_s)),
                           rank, world_size, master_addr, master_port)
        torch.manual_seed(seed + rank)
        bf16 = cfg.dtype == "bfloat16"
        hf = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.bfloat16 if bf16 else torch.float32,
                                                  attn_implementation="sdpa")
        if frozen:  # entries the model folder declares frozen stay as they are
            if cfg.zero_stage == 3:
                raise ValueError("learner.zero_stage=3 partitions the parameters, so the gradient masks of the entries "
                                 "the model declares frozen cannot apply; use zero_stage 0-2 with this model")
            freeze_entries(hf, frozen)
        if cfg.gradient_checkpointing:
            enable_gradient_checkpointing(hf)
        self.tied = bool(getattr(hf.config, "tie_word_embeddings", False))
        module = _PolicyLogprobs(hf, temperature)
        optimizer = torch.optim.AdamW(module.parameters(), lr=cfg.lr, betas=tuple(cfg.betas),
                                      weight_decay=cfg.weight_decay)
        fn = functools.partial(lr_multiplier, schedule=cfg.lr_schedule, warmup_steps=cfg.warmup_steps,
                               total_steps=total_train_steps * cfg.mini_batches_per_step)
        fn(cfg.warmup_steps)  # fail here, not at step N, on a schedule that lacks total_train_steps
        self.engine, _, _, _ = deepspeed.initialize(
            model=module, optimizer=optimizer, config=self._ds_config(bf16), dist_init_required=False,
            lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, fn))
        self.hf = self.engine.module.model
        self._version = 0

    def _ds_config(self, bf16: bool) -> dict:
        return {
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1,  # accumulation boundary is set by hand; no loss rescaling
            "gradient_clipping": self.cfg.grad_clip,
            "zero_optimization": {"stage": self.cfg.zero_stage, "overlap_comm": False,
                                  "contiguous_gradients": True, "reduce_scatter": True},
            "bf16": {"enabled": bf16},
            "data_types": {"grad_accum_dtype": "fp32"},  # bf16: accumulate micro-batch gradients in fp32
            "steps_per_print": 1 << 30,
            "wall_clock_breakdown": False,
        }

    # ----------------------------------------------------------------- collectives
    def _all_reduce(self, values: list, op: str = "sum") -> list:
        if self.world_size == 1:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        deepspeed.comm.all_reduce(t, op=deepspeed.comm.ReduceOp.MAX if op == "max" else deepspeed.comm.ReduceOp.SUM)
        return t.tolist()

    def _barrier(self) -> None:
        if self.world_size > 1:
            deepspeed.comm.barrier()

    def _pad_counts(self, packed: list) -> list:
        """Pad each list of micro-batches with dummies to the largest count on any rank."""
        counts = [int(c) for c in self._all_reduce([len(p) for p in packed], "max")]
        return [p + [dummy_micro_batch() for _ in range(c - len(p))] for p, c in zip(packed, counts)]

    def _inputs(self, mb) -> dict:
        d, free = self.device, mb.free_targets
        return {"input_ids": mb.input_ids.to(d), "position_ids": mb.position_ids.to(d),
                "attention_mask": mb.attention_mask.to(d), "target_index": mb.target_index.to(d),
                "target_ids": mb.target_ids.to(d),
                "allowed_ids": None if mb.allowed_ids is None else mb.allowed_ids.to(d),
                "free_targets": None if free is None else free.to(d)}

    # ----------------------------------------------------------------- training
    def train_step(self, shard: list[TrainSequence], global_num_tokens: int, step: int) -> dict:
        """One DAPO step on this rank's `shard` (list of TrainSequence): `mini_batches_per_step` updates.

        `global_num_tokens` is the loss-token count of the whole step on all ranks; the learner re-derives
        it (and per-mini-batch counts) with one all-reduce and raises on a mismatch. Collective: every rank
        calls it with its shard. Returns global metrics (identical on every rank).
        """
        maybe_crash("learner_step")
        t_start = time.perf_counter()
        self.engine.train()
        minis = split_mini_batches(list(shard), self.cfg.mini_batches_per_step)
        packed = [pack_sequences(m, self.cfg.micro_batch_tokens) for m in minis]
        real_packed = [mb for p in packed for mb in p]
        staleness = sum((self._version - s.policy_version) * s.copies for s in shard)
        tokens = [int(n) for n in self._all_reduce([count_loss_tokens(m) for m in minis])]
        anchors = [int(n) for n in self._all_reduce([count_anchor_tokens(m) for m in minis])] \
            if self.algo.solution_anchor else [0] * len(minis)
        if sum(tokens) != int(global_num_tokens):
            raise ValueError(f"global_num_tokens={global_num_tokens} but the ranks hold {sum(tokens)} loss tokens")
        packed = self._pad_counts(packed)
        timing = {"forward_s": 0.0, "backward_s": 0.0, "optimizer_s": 0.0, "proximal_s": 0.0}
        proximal = None
        if self.algo.ratio_reference == "proximal":
            # the proximal policy is this step's starting weights; the first mini-batch's own forward pass
            # runs on exactly those, so only later mini-batches need a separate no-grad pass (None: reuse)
            t0 = time.perf_counter()
            proximal = [[None] * len(packed[0])] + [[self._logprobs_no_grad(mb)[0] for mb in p] for p in packed[1:]]
            timing["proximal_s"] = time.perf_counter() - t0
        acc = dict.fromkeys(("loss", "tokens", "entropy", "tis_mean", "tis_capped", "anchor_nll", "anchor_tokens")
                            + _STAT_KEYS, 0.0)
        grad_norms, lrs, skipped = [], [], 0
        for k, micro_batches in enumerate(packed):
            if tokens[k] == 0:  # same decision on every rank: the counts are global
                skipped += 1
                continue
            for i, mb in enumerate(micro_batches):
                prox = proximal[k][i] if proximal is not None else False
                self._micro_step(mb, prox, tokens[k], last=i == len(micro_batches) - 1, acc=acc, timing=timing,
                                 num_anchor_tokens=anchors[k])
            lrs.append(self.engine.get_lr()[0])
            t0 = time.perf_counter()
            self.engine.step()
            timing["optimizer_s"] += time.perf_counter() - t0
            grad_norms.append(float(self.engine.get_global_grad_norm() or 0.0))
            self._version += 1
        acc["staleness"] = staleness
        acc["sequence_tokens"] = sum(max(0, s.input_length) * s.copies for s in shard)
        return self._metrics(acc, timing, real_packed, grad_norms, lrs, skipped, step, count_sequences(shard),
                             time.perf_counter() - t_start, sum(tokens))

    def _micro_step(self, mb, prox, num_tokens: int, last: bool, acc: dict, timing: dict,
                    num_anchor_tokens: int = 0) -> None:
        """Forward and backward of one packed micro-batch. `prox`: False for the behaviour ratio, the proximal
        log-probs (tokens,) for the decoupled ratio, or None for "the proximal policy is the current weights"
        (first mini-batch of a step), in which case they are this forward pass's own values, detached.
        `num_anchor_tokens`: the mini-batch's anchor tokens on all ranks (0: no anchor term)."""
        self.engine.set_gradient_accumulation_boundary(last)
        t0 = time.perf_counter()
        logprobs, entropy = self.engine(**self._inputs(mb))
        weights = mb.loss_weights.to(self.device)
        loss, loss_sum, stats, is_w = micro_batch_loss(logprobs, mb, self.algo, num_tokens, self.world_size, prox)
        if num_anchor_tokens and mb.anchor_weights is not None:
            anchor, nll_sum = anchor_loss(logprobs, mb, self.algo.solution_anchor, num_anchor_tokens,
                                          self.world_size)
            loss = loss + anchor
            acc["anchor_nll"] += float(nll_sum)
            acc["anchor_tokens"] += float(mb.anchor_weights.sum())
        t1 = time.perf_counter()
        self.engine.backward(loss)
        timing["forward_s"] += t1 - t0
        timing["backward_s"] += time.perf_counter() - t1
        n = mb.num_loss_tokens
        counted = weights != 0
        copies = mb.copies.to(self.device)[counted] if mb.copies is not None else 1.0  # a merged sequence's copies
        acc["loss"] += float(loss_sum.detach()) / num_tokens
        acc["tokens"] += n
        acc["entropy"] += float((entropy[counted] * copies).sum())
        for key in _STAT_KEYS:
            acc[key] += stats[key] * n
        if is_w is not None:
            acc["tis_mean"] += float((is_w[counted] * copies).sum())
            acc["tis_capped"] += float(((is_w[counted] >= self.algo.tis_cap * (1 - 1e-6)) * copies).sum())

    def _metrics(self, acc, timing, real_packed, grad_norms, lrs, skipped, step, num_seqs, seconds, tokens):
        keys = sorted(acc) + sorted(timing)
        local = [acc[k] for k in sorted(acc)] + [timing[k] for k in sorted(timing)]
        local += [sum(m.num_real_tokens for m in real_packed), sum(m.padded_tokens for m in real_packed),
                  len(real_packed), num_seqs, seconds]
        g = dict(zip(keys + ["input_tokens", "padded_tokens", "micro_batches", "sequences", "seconds"],
                     self._all_reduce(local)))
        updates = max(1, len(grad_norms))
        n = max(1.0, g["tokens"])
        out = {"step": step, "weight_version": self._version, "updates": len(grad_norms),
               "skipped_mini_batches": skipped, "loss": g["loss"] / updates,
               "grad_norm": sum(grad_norms) / updates, "grad_norm_max": max(grad_norms, default=0.0),
               "lr": lrs[-1] if lrs else self.engine.get_lr()[0], "loss_tokens": tokens,
               "entropy": g["entropy"] / n, "input_tokens": int(g["input_tokens"]),
               "micro_batches": int(g["micro_batches"]), "sequences": int(g["sequences"]),
               "staleness_mean": g["staleness"] / max(1, g["sequences"]),
               "padding_fraction": 1.0 - g["input_tokens"] / g["padded_tokens"] if g["padded_tokens"] else 0.0}
        out.update({k: g[k] / n for k in _STAT_KEYS})
        if g["anchor_tokens"]:  # the label-free solution anchor: mean NLL of its tokens
            out["anchor_nll"] = g["anchor_nll"] / g["anchor_tokens"]
        out.update({k: g[k] / self.world_size for k in timing})  # mean over ranks
        out["seconds"] = g["seconds"] / self.world_size
        seconds = max(out["seconds"], 1e-9)
        # input_tokens: computed (a shared prompt counts once); sequence_tokens: the same batch unshared
        out["tokens_per_s"], out["sequence_tokens"] = g["input_tokens"] / seconds, int(g["sequence_tokens"])
        out["sequence_tokens_per_s"] = g["sequence_tokens"] / seconds
        if self.algo.ratio_reference == "proximal":
            out["tis_mean"], out["tis_capped_frac"] = g["tis_mean"] / n, g["tis_capped"] / n
        if self.rank == 0:
            log.info("learner step %d: loss %.4f grad_norm %.3f lr %.2e %d tok in %.2fs", step, out["loss"],
                     out["grad_norm"], out["lr"], out["input_tokens"], out["seconds"])
        return out

    # ----------------------------------------------------------------- inference
    def _logprobs_no_grad(self, mb):
        with torch.no_grad():
            return self.engine.module(**self._inputs(mb))

    def compute_logprobs(self, sequences: list[TrainSequence],
                         temperature: Optional[float] = None) -> list[list[float]]:
        """Per-token log-probs of each sequence's response under the current weights (no grad), at the training
        temperature, or at `temperature` when given (1.0: the raw model's, as an engine's prompt log-probs).

        Rank-local under ZeRO-2; under ZeRO-3 with several ranks it is collective (forward gathers weights).
        """
        packed = pack_sequences(list(sequences), self.cfg.micro_batch_tokens)
        if self.cfg.zero_stage == 3 and self.world_size > 1:
            packed = self._pad_counts([packed])[0]
        out = [[] for _ in sequences]
        was_training = self.engine.training
        module = self.engine.module
        trained_at = module.temperature
        module.temperature = trained_at if temperature is None else temperature
        self.engine.eval()
        try:
            for mb in packed:
                unpack_per_sequence(self._logprobs_no_grad(mb)[0], mb, out)
        finally:
            module.temperature = trained_at
            self.engine.train(was_training)
        return out

    # ----------------------------------------------------------------- weights
    def _full_state(self) -> dict[str, torch.Tensor]:
        """HF-named full weights (clones, training dtype), `lm_head.weight` included when tied.

        Under ZeRO-3 parameters are gathered in buckets with GatheredParameters: collective.
        """
        named = list(self.hf.named_parameters(remove_duplicate=False))
        out, seen, bucket = {}, {}, []

        def flush():
            with deepspeed.zero.GatheredParameters([p for _, p in bucket], enabled=self.cfg.zero_stage == 3):
                for name, p in bucket:
                    seen[id(p)] = out[name] = p.detach().clone()
            bucket.clear()

        for name, p in named:
            if id(p) in seen or any(p is q for _, q in bucket):
                continue
            bucket.append((name, p))
            if sum(getattr(q, "ds_numel", q.numel()) for _, q in bucket) >= 1 << 26:
                flush()
        flush()
        for name, p in named:
            out.setdefault(name, seen[id(p)])
        keys = set(self.hf.state_dict().keys())
        for name, b in self.hf.named_buffers():
            if name in keys:
                out[name] = b.detach().clone()
        if self.tied and "lm_head.weight" not in out:
            out["lm_head.weight"] = out[next(n for n, p in named if p is self.hf.get_input_embeddings().weight)]
        return out

    def export_weights(self, rank0_only: bool = False, widen: bool = True) -> dict[str, np.ndarray]:
        """Full HF-named state dict as numpy arrays, incl. `lm_head.weight`: float32 (bf16 widened exactly),
        or with `widen=False` in the training dtype, bf16 as marked uint16 bit patterns (what the weight sync
        sends: half the bytes of float32; see checkpoint_io.to_numpy).

        Collective under ZeRO-3: every rank must call it (the gather waits for all of them). Each gets the full
        dict, or with `rank0_only` ranks > 0 take part in the gather and return {} (nothing to ship).
        """
        if rank0_only and self.rank != 0:
            if self.cfg.zero_stage == 3:
                self._full_state()
            return {}
        return cio.to_numpy(self._full_state(), widen=widen)

    # ----------------------------------------------------------------- weight transports (actors/weight_sync/)
    def _sender(self, cls):
        """The sending side `cls` of a weight transport (it reads this learner's rank, device and `_full_state`),
        made on first use and held."""
        senders = self.__dict__.setdefault("_weight_senders", {})
        if cls not in senders:
            senders[cls] = cls(self)
        return senders[cls]

    def weight_call(self, sender: str, method: str, *args):
        """Any transport's learner-side call: `method(*args)` of the sender class `sender` names
        ("package.module:Class", a transport of your own: actors/weight_sync/transport.py), held like the built-in
        ones."""
        from core.plugins import load_object

        return getattr(self._sender(load_object(sender, "weight_sync.transport.name")), method)(*args)

    def weight_update_address(self) -> tuple:
        """Broadcast transports: (host, port) where rank 0 will host the weight group (BroadcastSender)."""
        return self._sender(BroadcastSender).weight_update_address()

    def init_weight_update_group(self, host: str, port: int, world_size: int, backend: str = "nccl",
                                 timeout_s: float = 300.0) -> None:
        """Broadcast transports: join the weight group as its rank 0 (BroadcastSender)."""
        self._sender(BroadcastSender).init_weight_update_group(host, port, world_size, backend, timeout_s)

    def close_weight_update_group(self) -> None:
        """Broadcast transports: abort and forget the weight group (BroadcastSender)."""
        self._sender(BroadcastSender).close_weight_update_group()

    def weight_metadata(self) -> list:
        """Broadcast transports: [(name, dtype name, shape)] the next broadcast sends; collective under ZeRO-3
        (BroadcastSender)."""
        return self._sender(BroadcastSender).weight_metadata()

    def broadcast_weights(self, timeout_s: float = 300.0) -> dict:
        """Broadcast transports: send the tensors of the last `weight_metadata()` within `timeout_s`
        (BroadcastSender)."""
        return self._sender(BroadcastSender).broadcast_weights(timeout_s)

    def export_ipc(self, export_id: str, bucket_bytes: int, engines: list) -> list:
        """ipc transport: one IPC handle per bucket of the full weights, kept until `engines` release them;
        collective under ZeRO-3 (IpcSender)."""
        return self._sender(IpcSender).export_ipc(export_id, bucket_bytes, engines)

    def release_ipc(self, export_id: str, engine: str) -> bool:
        """ipc transport: `engine` has copied `export_id`; True when it was the last (IpcSender)."""
        return self._sender(IpcSender).release_ipc(export_id, engine)

    def drop_ipc(self, export_id: str) -> None:
        """ipc transport: free the buckets of `export_id` now (IpcSender)."""
        self._sender(IpcSender).drop_ipc(export_id)

    def held_ipc(self) -> dict:
        """ipc transport: {export_id: engines that have not released it yet} (IpcSender)."""
        return self._sender(IpcSender).held_ipc()

    def weight_version(self) -> int:
        """Optimizer updates applied so far (restored by load_checkpoint)."""
        return self._version

    def export_hf(self, path: str, files: Optional[dict] = None) -> None:
        """Write a Hugging Face folder (config, model.safetensors in the training dtype, tokenizer files)
        that transformers and vLLM load, with `files` ({name: text}) beside them. Collective: every rank must call
        it (ZeRO-3 gathers, and all ranks meet at a barrier); rank 0 writes, atomically."""
        state = self._full_state()
        if self.rank == 0:
            tmp = cio.tmp_path(path)
            cio.remove(tmp)
            cio.write_hf_folder(tmp, self.model_path, self.hf.config,
                                getattr(self.hf, "generation_config", None), state, self.tied)
            for name, text in (files or {}).items():
                (tmp / name).write_text(text)
            cio.publish_dir(path)
        self._barrier()

    # ----------------------------------------------------------------- checkpoints
    def save_checkpoint(self, path: str, client_state: dict) -> None:
        """Model, optimizer, scheduler, version and per-rank RNG into `path` (atomic). Collective.

        Ranks must share a filesystem: each writes its optimizer partition into `path.tmp`.
        """
        tmp = cio.tmp_path(path)
        if self.rank == 0:
            cio.remove(tmp)
        self._barrier()
        state = {"client": dict(client_state), "weight_version": self._version, "world_size": self.world_size}
        self.engine.save_checkpoint(str(tmp), tag=CKPT_TAG, client_state=state, save_latest=False)
        torch.save(cio.rng_state(), tmp / f"rng_rank{self.rank}.pt")
        self._barrier()
        if self.rank == 0:
            cio.publish_dir(path)
        self._barrier()

    def load_checkpoint(self, path: str) -> dict:
        """Restore a `save_checkpoint` folder (same world size and ZeRO stage); returns its client_state."""
        if not (Path(path) / CKPT_TAG).is_dir():
            raise FileNotFoundError(f"no learner checkpoint in {path}")
        load_path, state = self.engine.load_checkpoint(str(path), tag=CKPT_TAG, load_optimizer_states=True,
                                                       load_lr_scheduler_states=True)
        if load_path is None:
            raise FileNotFoundError(f"no learner checkpoint in {path}")
        if state.get("world_size") != self.world_size:
            raise ValueError(f"checkpoint has world_size {state.get('world_size')}, learner has {self.world_size}")
        self._version = int(state["weight_version"])
        cio.set_rng_state(torch.load(Path(path) / f"rng_rank{self.rank}.pt", weights_only=False))
        return state["client"]

    def shutdown(self) -> None:
        """Release the engine (DeepSpeed's `destroy`: its optimizer's buffers and hooks, while the process group
        still exists), then destroy the process group (DeepSpeed's wrapper also drops its cached groups). Under
        ZeRO-2 the model and optimizer are then freed with the learner; ZeRO-3's parameter hooks still hold them
        until the process ends (one learner per actor process, as the system runs it)."""
        engine, self.engine = getattr(self, "engine", None), None
        if engine is not None:
            engine.destroy()
        if deepspeed.comm.is_initialized():
            deepspeed.comm.destroy_process_group()

"""The learner path checked on a GPU at paper-scale shapes: one run on one GPU, in one process (no Ray, no vLLM,
no dataset or tokenizer: models are random Qwen3s built from transformers configs and saved to a temporary folder,
sequences are random token ids):

* `env`: torch, CUDA, NCCL, transformers and DeepSpeed versions, the GPU, which dependencies are importable.
* `learner`: the real `actors.learner.learner.Learner` (DeepSpeed, one rank, NCCL with world size 1) for ZeRO-2/3 x
  bf16/fp32 on a small random Qwen3 and a GenSelect-shaped batch (8 prompts x 8 responses: half the groups one
  constrained index token, half free responses; two mini-batches per step, ratio 'proximal' as the paper configs
  resolve it): step time, the step's metrics (finite), that the weights change, that `weight_metadata()` (the
  NCCL sender's gather) lists every HF tensor at its full shape, that `export_hf` (the driver's final export)
  writes a folder transformers loads back equal to the learner's weights. Then, at temperature 1.5, the
  learner's log-probs (`_PolicyLogprobs`, packed, as train_step computes them) against a plain transformers
  fp32 forward of the same weights on the same device.
* `packed`: benchmarks/learner_step.py's `dense` (dense-mask rows: padded rows, a dense mask, the whole last
  layer) and `blocks` (packed blocks: one padding-free row, attention by blocks, what the learner runs) on the GPU
  in bf16, a Qwen3-0.6B-shaped model (vocabulary cut to 32,768) and one packed row of W in {4096, 16384, 32768}
  tokens (a 1,024-token prompt + 8 responses): fwd + bwd + AdamW step time and peak CUDA memory, out-of-memory
  reported as not fitting; at the smallest W the two modes' log-probs on the same weights, in bf16 and in fp32.
* `nccl_one_gpu`: whether NCCL lets two processes share one GPU (all_reduce between 2 spawned ranks on cuda:0;
  60 s hard limit): decides whether a 2-rank ZeRO-3 GPU test is possible on a one-GPU machine.

Each section, and each case in it, is guarded: an exception becomes a result with status "error" and the run
goes on. Every result is a JSON line printed and appended to --out; a short table closes the run (that is what
comes back from the device: the last 12,000 characters). A section stops starting new cases after
--max-seconds; a watchdog prints the stacks and the table and exits after --deadline-s, so a hang costs at most
that. It imports no ray, vllm or math_verify (the device has none; the summary line lists any that got loaded).

The device command (repo root as the working directory; .whl holds deepspeed, transformers and their pure-Python
dependencies):

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit; PYTHONUNBUFFERED=1 timeout 420 \
        python3 benchmarks/learner_gpu.py --out $OUT/learner_gpu.jsonl 2>&1 | tee $OUT/log.txt

On a CPU (`--device cpu`, or no GPU) every section runs at tiny sizes in seconds (`--quick` is implied), the
learner on gloo, and the NCCL probe is skipped:

    python benchmarks/learner_gpu.py --device cpu --out /tmp/learner_gpu.jsonl
"""
from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import math
import multiprocessing
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

SECTIONS = ("env", "learner", "packed", "nccl_one_gpu")
FORBIDDEN_MODULES = ("ray", "vllm", "math_verify")  # absent on the device
#: distributions whose versions `env` reports: the image's and the carried wheels' (deepspeed and transformers
#: import most of them at import time)
PACKAGES = ("torch", "numpy", "triton", "deepspeed", "transformers", "tokenizers", "safetensors", "huggingface_hub",
            "httpx", "accelerate", "omegaconf", "hjson", "pydantic", "pydantic_core", "psutil", "msgpack", "einops",
            "py-cpuinfo", "ninja", "tqdm", "pyyaml", "regex", "packaging", "filelock", "dill")
#: what the sections import: an import error shows in `env` at once (the packed section needs actors.learner.learner
#: too)
IMPORTS = ("transformers", "deepspeed", "omegaconf", "actors.learner.learner", "benchmarks.learner_step")


@dataclass(frozen=True)
class Sizes:
    """Model shapes (Qwen3Config keyword arguments) and batch sizes of one run."""
    learner_model: dict
    prompts: int  # GenSelect-shaped batch: prompts x samples; the first half of the groups constrained
    samples: int
    prompt_len: tuple  # [lo, hi) random prompt lengths
    free_len: tuple  # [lo, hi) lengths of the free responses
    candidates: int  # allowed index tokens of a constrained response
    micro_batch_tokens: int
    learner_warmup: int
    learner_repeats: int
    packed_model: dict
    packed_widths: tuple
    packed_prompt: int
    packed_samples: int
    packed_warmup: int
    packed_repeats: int


FULL = Sizes(
    learner_model=dict(vocab_size=4096, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=64, tie_word_embeddings=True),
    prompts=8, samples=8, prompt_len=(200, 400), free_len=(20, 60), candidates=8, micro_batch_tokens=2048,
    learner_warmup=1, learner_repeats=3,
    # Qwen3-0.6B's shape and RoPE (theta 1e6), the vocabulary cut to 32,768 (the ~30K targets' logits stay small)
    packed_model=dict(vocab_size=32768, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                      num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
                      max_position_embeddings=40960, rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
    packed_widths=(4096, 16384, 32768), packed_prompt=1024, packed_samples=8, packed_warmup=1, packed_repeats=3)

QUICK = Sizes(
    learner_model=dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True),
    prompts=4, samples=4, prompt_len=(16, 32), free_len=(3, 6), candidates=4, micro_batch_tokens=64,
    learner_warmup=0, learner_repeats=1,
    packed_model=dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True,
                      max_position_embeddings=1024),
    packed_widths=(256, 512), packed_prompt=64, packed_samples=8, packed_warmup=0, packed_repeats=1)


@dataclass
class Run:
    """What every section needs: the device, the sizes, a scratch folder, the per-section time guard."""
    device: object  # torch.device
    sizes: Sizes
    tmp: Path
    max_seconds: float
    nccl_timeout_s: float
    checkpointing: bool = False  # the learner's gradient_checkpointing, in the learner and packed sections
    widths: tuple = ()  # packed row widths instead of the sizes' own

    @property
    def suffix(self) -> str:
        """Case-name suffix of a run with gradient checkpointing."""
        return "_ckpt" if self.checkpointing else ""

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def packed_dtype(self) -> str:
        return "bfloat16" if self.cuda else "float32"


# ----------------------------------------------------------------------------- reporting
@dataclass
class Report:
    """Results as JSON lines (printed, appended to `out`) and the closing table."""
    out: Path
    run_id: str
    results: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def emit(self, result: dict) -> dict:
        result = {"run": self.run_id, **result}
        line = json.dumps(result, default=str)
        with self.lock:
            self.results.append(result)
            print(line, flush=True)
            with open(self.out, "a") as f:
                f.write(line + "\n")
        return result

    def case(self, section: str, name: str, fn) -> dict:
        """Run `fn() -> dict of fields` and emit its result. A "checks" dict {name: bool} gives status "fail"
        when one is false; an exception gives "error" ("oom" for CUDA out of memory: it does not fit)."""
        t0 = time.perf_counter()
        try:
            fields = fn()
            checks = fields.pop("checks", {})
            failed = sorted(k for k, ok in checks.items() if not ok)
            status = fields.pop("status", "fail" if failed else "ok")
            out = {**fields, "checks": checks, "failed_checks": failed}
        except Exception as err:  # reported; the next case runs
            status = "oom" if type(err).__name__ == "OutOfMemoryError" else "error"
            out = {"error": f"{type(err).__name__}: {str(err)[:2000]}", "traceback": traceback.format_exc()[-4000:]}
            if status == "oom":
                out.update(note="does not fit (CUDA out of memory)", peak_mib=_peak_mib())
        free_memory()
        if _allocated_mib() is not None:  # what the case left behind on the GPU (a leak shows here)
            out["cuda_allocated_mib_after"] = _allocated_mib()
        return self.emit({"section": section, "case": name, "status": status,
                          "seconds": round(time.perf_counter() - t0, 2), **out})

    def skip(self, section: str, name: str, note: str) -> dict:
        return self.emit({"section": section, "case": name, "status": "skipped", "note": note})

    def table(self) -> str:
        rows = [f"{'section':<13} {'case':<30} {'status':<8} summary"]
        rows += [f"{r['section']:<13} {r['case']:<30} {r['status']:<8} {brief(r)}" for r in self.results]
        return "\n".join(rows)


#: result fields the table shows, in this order (those present)
_TABLE_KEYS = ("answer", "gpu", "torch", "cuda", "nccl", "transformers", "deepspeed", "step_s_median", "peak_mib",
               "loss", "grad_norm", "max_weight_change", "metadata_tensors", "export_max_abs_diff", "max_abs_diff",
               "mean_abs_diff", "max_abs_diff_bfloat16", "max_abs_diff_float32", "max_abs_diff_constrained",
               "max_abs_diff_free", "cuda_allocated_mib_after", "forbidden_modules_loaded", "failed_checks", "note",
               "error")


def brief(result: dict, width: int = 200) -> str:
    """One line of the table: the fields of `_TABLE_KEYS` that the result has."""
    parts = []
    for key in _TABLE_KEYS:
        value = result.get(key)
        if value is None or value == []:
            continue
        if isinstance(value, float):
            value = f"{value:.3g}"
        elif key == "error":
            value = str(value).splitlines()[0] if str(value) else value
        parts.append(f"{key}={value}")
    return " ".join(parts)[:width]


def free_memory() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _peak_mib():
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**20, 1) if torch.cuda.is_available() else None


def _allocated_mib():
    import torch

    return round(torch.cuda.memory_allocated() / 2**20, 1) if torch.cuda.is_available() else None


def _reset_peak() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def timed(fn, device):
    """(wall seconds, fn()) with the device synchronised before and after."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    value = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0, value


# ----------------------------------------------------------------------------- env
def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "missing"


def _import_error(module: str) -> str:
    """"ok", or the error importing `module` gives."""
    import importlib

    try:
        importlib.import_module(module)
        return "ok"
    except Exception as err:  # reported in `env`
        return f"{type(err).__name__}: {str(err)[:300]}"


def env_info(device) -> dict:
    """Versions, the device, and whether what the sections import imports."""
    import torch

    out = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
           "device": str(device), "cpu_count": os.cpu_count(),
           "float32_matmul_precision": torch.get_float32_matmul_precision(),
           "transformers": _version("transformers"), "deepspeed": _version("deepspeed"),
           "packages": {name: _version(name) for name in PACKAGES},
           "imports": {name: _import_error(name) for name in IMPORTS}}
    out["checks"] = {f"imports_{name}": value == "ok" for name, value in out["imports"].items()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(0)
        nccl = torch.cuda.nccl.version()
        out.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                   capability=f"{props.major}.{props.minor}", gpus=torch.cuda.device_count(),
                   nccl=".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl),
                   cudnn=torch.backends.cudnn.version(), bf16_supported=torch.cuda.is_bf16_supported())
    return out


# ----------------------------------------------------------------------------- models and batches
def save_random_model(folder: Path, shape: dict, dtype: str, device, seed: int = 0) -> Path:
    """A randomly initialised Qwen3 of `shape` (Qwen3Config keyword arguments), built on `device` in `dtype`
    and saved as a Hugging Face folder."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(Qwen3Config(**shape), dtype=getattr(torch, dtype))
    model.save_pretrained(str(folder))
    return folder


def genselect_shaped_batch(sizes: Sizes, vocab: int, seed: int = 0) -> list:
    """`prompts` groups of `samples` TrainSequences sharing a random prompt: the first half of the groups one
    constrained index token each (allowed_token_ids: `candidates` ids, behaviour log-prob -log(candidates)), the
    second half free responses (behaviour log-probs -2). Advantages alternate +1/-1 inside a group. The halves
    are contiguous, so two mini-batches keep each micro-batch all-constrained or all-free (packing refuses a mix)."""
    from core.records import TrainSequence

    if sizes.prompts % 2:
        raise ValueError(f"prompts must be even (half constrained, half free), got {sizes.prompts}")
    rng = random.Random(seed)
    allowed = rng.sample(range(2, vocab), sizes.candidates)
    out = []
    for g in range(sizes.prompts):
        prompt = [rng.randrange(2, vocab) for _ in range(rng.randrange(*sizes.prompt_len))]
        for j in range(sizes.samples):
            adv = 1.0 if j % 2 == 0 else -1.0
            if g < sizes.prompts // 2:
                out.append(TrainSequence(prompt, [rng.choice(allowed)], [-math.log(sizes.candidates)], adv, 0,
                                         allowed_token_ids=list(allowed)))
            else:
                r = rng.randrange(*sizes.free_len)
                out.append(TrainSequence(prompt, [rng.randrange(2, vocab) for _ in range(r)], [-2.0] * r, adv, 0))
    return out


def expected_state_shapes(folder: Path) -> dict:
    """{HF state-dict name: full shape} of the model in `folder` (built on the meta device), `lm_head.weight`
    included when tied: what `weight_metadata()` must list."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(folder)))
    return {name: list(t.shape) for name, t in model.state_dict().items()}


def max_abs_change(a: dict, b: dict) -> float:
    """Largest |a - b| over the tensors of two state dicts with the same names."""
    return max(float((a[k].float() - b[k].float().to(a[k].device)).abs().max()) for k in a)


# ----------------------------------------------------------------------------- learner
def new_learner(folder: Path, stage: int, dtype: str, run: Run, temperature: float = 1.0):
    """The real Learner, one rank in this process (NCCL on a GPU, gloo on the CPU), on a fresh free port."""
    from actors.learner.learner import Learner
    from core.config import AlgorithmConfig, LearnerConfig
    from core.net import free_port

    cfg = LearnerConfig(zero_stage=stage, dtype=dtype, lr=1e-3, micro_batch_tokens=run.sizes.micro_batch_tokens,
                        mini_batches_per_step=2, step_timeout_s=120.0, gradient_checkpointing=run.checkpointing)
    try:  # 'proximal': what 'auto' resolves to in configs/paper_*.yaml (max_staleness 1)
        return Learner(cfg, AlgorithmConfig(ratio_reference="proximal"), str(folder), master_port=free_port(),
                       temperature=temperature)
    except Exception:
        import deepspeed

        if deepspeed.comm.is_initialized():  # a learner that failed half-built must not leave its group behind
            deepspeed.comm.destroy_process_group()
        raise


def own_logprobs(learner, seqs: list) -> list:
    """`learner.compute_logprobs` of each sequence, constrained and free ones packed apart (a micro-batch may not
    mix them). Returns per sequence a list of R floats."""
    out = [None] * len(seqs)
    for constrained in (True, False):
        idx = [i for i, s in enumerate(seqs) if (s.allowed_token_ids is not None) == constrained]
        if idx:
            for i, lp in zip(idx, learner.compute_logprobs([seqs[i] for i in idx])):
                out[i] = lp
    return out


def reference_logprobs(model, seqs: list, temperature: float) -> list:
    """Per sequence, R floats: log_softmax(logits / temperature) at its response tokens from a plain forward of
    prompt + response[:-1] (one sequence at a time), over the allowed ids when the sequence is constrained."""
    import torch

    device = next(model.parameters()).device
    out = []
    with torch.no_grad():
        for s in seqs:
            ids = torch.tensor([list(s.prompt_token_ids) + list(s.response_token_ids[:-1])], device=device)
            logits = model(input_ids=ids).logits[0, len(s.prompt_token_ids) - 1:].float() / temperature  # (R, V)
            targets = list(s.response_token_ids)
            if s.allowed_token_ids is not None:
                logits = logits[:, torch.tensor(s.allowed_token_ids, device=device)]
                targets = [list(s.allowed_token_ids).index(t) for t in targets]
            logp = torch.log_softmax(logits, dim=-1)
            out.append(logp.gather(1, torch.tensor(targets, device=device)[:, None])[:, 0].tolist())
    return out


def export_round_trip(learner, state: dict, path: Path, dtype: str) -> dict:
    """`learner.export_hf(path)` (the driver's final export), loaded back by transformers and compared with
    `state` (the learner's `_full_state()`)."""
    import torch
    from transformers import AutoModelForCausalLM

    learner.export_hf(str(path))
    loaded = AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype)).state_dict()
    same_keys = set(loaded) == set(state)
    diff = max_abs_change({k: loaded[k] for k in state if k in loaded}, state) if same_keys else float("nan")
    return {"export_keys_match": same_keys, "export_max_abs_diff": diff}


def metadata_check(learner, expected: dict, dtype: str) -> dict:
    """`weight_metadata()` (the NCCL sender's gather) against the HF state dict's names and full shapes."""
    meta = learner.weight_metadata()
    got = {name: shape for name, _, shape in meta}
    return {"metadata_tensors": len(meta), "expected_tensors": len(expected),
            "metadata_mismatches": sorted(n for n in set(got) | set(expected) if got.get(n) != expected.get(n))[:10],
            "metadata_dtypes": sorted({d for _, d, _ in meta}), "metadata_ok": got == expected and
            {d for _, d, _ in meta} == {dtype}}


_STEP_KEYS = ("loss", "grad_norm", "grad_norm_max", "entropy", "tis_mean", "clip_frac", "updates", "micro_batches",
              "input_tokens", "loss_tokens", "forward_s", "backward_s", "optimizer_s", "proximal_s")


def learner_case(folder: Path, seqs: list, stage: int, dtype: str, run: Run) -> dict:
    """Steps, weight change, weight metadata and the HF export of one (ZeRO stage, dtype) learner."""
    import dataclasses

    from core.packing import count_loss_tokens

    learner = new_learner(folder, stage, dtype, run)
    try:
        batch = [dataclasses.replace(s, behaviour_logprobs=lp) for s, lp in zip(seqs, own_logprobs(learner, seqs))]
        before = learner._full_state()
        _reset_peak()
        times, metrics = [], {}
        for k in range(run.sizes.learner_warmup + run.sizes.learner_repeats):
            seconds, metrics = timed(lambda: learner.train_step(batch, count_loss_tokens(batch), k), run.device)
            times.append(seconds)
        peak = _peak_mib()
        after = learner._full_state()
        change = max_abs_change(before, after)
        del before
        meta = metadata_check(learner, expected_state_shapes(folder), dtype)
        export = export_round_trip(learner, after, run.tmp / f"export_zero{stage}_{dtype}", dtype)
    finally:
        learner.shutdown()
    step = {k: metrics.get(k) for k in _STEP_KEYS}
    timed_steps = times[run.sizes.learner_warmup:]
    return {"zero_stage": stage, "dtype": dtype, "step_s_median": statistics.median(timed_steps),
            "step_s": [round(t, 4) for t in times], "warmup_steps": run.sizes.learner_warmup, "peak_mib": peak,
            **step, "max_weight_change": change, **meta, **export,
            "checks": {"metrics_finite": all(math.isfinite(step[k]) for k in ("loss", "grad_norm", "entropy")),
                       "grad_norm_positive": step["grad_norm"] > 0, "two_updates_per_step": step["updates"] == 2,
                       "weights_changed": change > 0, "weight_metadata_full_shapes": meta["metadata_ok"],
                       "export_keys_match": export["export_keys_match"],
                       "export_equals_learner": export["export_max_abs_diff"] == 0.0}}


def logprob_agreement_case(folder: Path, seqs: list, dtype: str, run: Run, temperature: float = 1.5) -> dict:
    """The learner's log-probs (ZeRO-2, `dtype`, `temperature`) against a plain transformers fp32 forward of the
    same weights on the same device."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    learner = new_learner(folder, 2, dtype, run, temperature)
    try:
        got = own_logprobs(learner, seqs)
        state = {k: v.float() for k, v in learner._full_state().items()}
    finally:
        learner.shutdown()
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(folder)), dtype=torch.float32)
    model.load_state_dict(state)
    want = reference_logprobs(model.to(run.device).eval(), seqs, temperature)
    diff = {kind: [abs(a - b) for s, g, w in zip(seqs, got, want) if (s.allowed_token_ids is not None) == (
        kind == "constrained") for a, b in zip(g, w)] for kind in ("constrained", "free")}
    every = diff["constrained"] + diff["free"]
    out = {"dtype": dtype, "temperature": temperature, "reference": "transformers fp32, unpacked",
           "float32_matmul_precision": torch.get_float32_matmul_precision(), "tokens": len(every),
           "max_abs_diff": max(every), "mean_abs_diff": sum(every) / len(every),
           **{f"max_abs_diff_{kind}": max(d) for kind, d in diff.items()}}
    out["checks"] = {"finite": all(math.isfinite(x) for x in every)}
    if dtype == "float32":
        out["checks"]["float32_max_abs_diff_below_1e-3"] = out["max_abs_diff"] < 1e-3
    return out


def learner_section(report: Report, run: Run) -> None:
    import torch

    folder = save_random_model(run.tmp / "learner_model", run.sizes.learner_model, "float32", torch.device("cpu"))
    seqs = genselect_shaped_batch(run.sizes, run.sizes.learner_model["vocab_size"])
    t0 = time.perf_counter()
    cases = [(f"zero{stage}_{dtype}{run.suffix}", lambda s=stage, d=dtype: learner_case(folder, seqs, s, d, run))
             for stage, dtype in ((3, "bfloat16"), (2, "bfloat16"), (3, "float32"), (2, "float32"))]
    cases += [(f"logprobs_T1.5_zero2_{dtype}{run.suffix}", lambda d=dtype: logprob_agreement_case(folder, seqs, d, run))
              for dtype in ("bfloat16", "float32")]
    for name, fn in cases:
        if time.perf_counter() - t0 > run.max_seconds:
            report.skip("learner", name, f"section time guard: over --max-seconds {run.max_seconds:g}")
            continue
        report.case("learner", name, fn)


# ----------------------------------------------------------------------------- packed
def packed_mode(folder: Path, seqs: list, width: int, mode: str, dtype: str, device, checkpointing: bool) -> tuple:
    """(micro-batches, learner_step.Step) of learner_step's `mode` ("dense" or "blocks"): `seqs` packed into
    micro-batches of at most `width` tokens as that mode packs them, the model of `folder` in `dtype` on `device`."""
    from core.packing import pack_sequences
    from benchmarks.learner_step import Step, load_model
    from core.config import AlgorithmConfig

    packed = pack_sequences(seqs, width, layout="rows" if mode == "dense" else "flat")
    model = load_model(folder, mode, dtype, device.type, checkpointing)
    return packed, Step(model, AlgorithmConfig(ratio_reference="behaviour"))


def packed_case(folder: Path, seqs: list, width: int, mode: str, run: Run) -> dict:
    """learner_step's `mode` on one packed row of `width` tokens: step time and peak memory (on the GPU)."""
    from core.packing import count_loss_tokens
    from benchmarks.learner_step import inputs

    packed, step = packed_mode(folder, seqs, width, mode, run.packed_dtype, run.device, run.checkpointing)
    num_tokens = count_loss_tokens(seqs)
    out = {"width": width, "mode": mode, "dtype": run.packed_dtype, "gradient_checkpointing": run.checkpointing,
           "rows_x_width": [list(mb.input_ids.shape)
                                                                                    for mb in packed],
           "loss_tokens": num_tokens, "attention_pairs": sum(
               mb.attention_mask.scored_pairs() if mode == "blocks" else mb.padded_tokens * mb.input_ids.shape[1]
               for mb in packed), "weights_mib": _allocated_mib()}
    if mode == "dense":  # part of every dense step (learner_step.inputs builds the mask on the CPU, then moves it)
        out["dense_mask_build_and_copy_s"] = timed(lambda: [inputs(mb, mode, run.device) for mb in packed],
                                                   run.device)[0]
    _reset_peak()
    times = [timed(lambda: step(packed, mode, num_tokens), run.device)[0]
             for _ in range(run.sizes.packed_warmup + run.sizes.packed_repeats)]
    timed_steps = times[run.sizes.packed_warmup:]
    return {**out, "step_s_median": statistics.median(timed_steps), "step_s": [round(t, 4) for t in times],
            "warmup_steps": run.sizes.packed_warmup, "peak_mib": _peak_mib(), "fits": True,
            "checks": {"step_times_finite": all(math.isfinite(t) for t in times)}}


def packed_agreement_case(folder: Path, seqs: list, width: int, run: Run) -> dict:
    """The dense and blocks modes' log-probs on the same weights (no grad), in the packed dtype and in fp32."""
    out = {"width": width}
    for dtype in dict.fromkeys((run.packed_dtype, "float32")):
        logprobs = {}
        for mode in ("dense", "blocks"):
            packed, step = packed_mode(folder, seqs, width, mode, dtype, run.device, run.checkpointing)
            logprobs[mode] = sum(step.logprobs(packed, mode, len(seqs)), [])
            del step
            free_memory()
        diffs = [abs(a - b) for a, b in zip(logprobs["dense"], logprobs["blocks"])]
        out[f"max_abs_diff_{dtype}"] = max(diffs)
        out[f"mean_abs_diff_{dtype}"] = sum(diffs) / len(diffs)
        out["tokens"] = len(diffs)
    out["checks"] = {"float32_max_abs_diff_below_1e-3": out["max_abs_diff_float32"] < 1e-3}
    return out


def packed_section(report: Report, run: Run) -> None:
    from benchmarks.learner_step import long_group

    sizes = run.sizes
    folder = save_random_model(run.tmp / "packed_model", sizes.packed_model, run.packed_dtype, run.device)
    t0 = time.perf_counter()
    widths = run.widths or sizes.packed_widths
    for width in widths:
        seqs = long_group(width, sizes.packed_prompt, sizes.packed_samples, sizes.packed_model["vocab_size"])
        cases = [(f"W{width}_{mode}{run.suffix}", lambda m=mode: packed_case(folder, seqs, width, m, run))
                 for mode in ("blocks", "dense")]
        if width == widths[0]:
            cases.insert(0, (f"W{width}_logprob_agreement", lambda: packed_agreement_case(folder, seqs, width, run)))
        for name, fn in cases:
            if time.perf_counter() - t0 > run.max_seconds:
                report.skip("packed", name, f"section time guard: over --max-seconds {run.max_seconds:g}")
                continue
            report.case("packed", name, fn)


# ----------------------------------------------------------------------------- nccl_one_gpu
def _all_reduce_worker(rank: int, world_size: int, port: int, backend: str, device: str, queue,
                       timeout_s: float) -> None:
    """One rank: init the process group over a TCP store on 127.0.0.1:port, all_reduce (4,) of rank + 1 on
    `device` ("cuda" means cuda:0 for every rank), put {"rank", "ok", "value" or "error"} on `queue`."""
    import datetime

    import torch
    import torch.distributed as dist

    os.environ.setdefault("NCCL_DEBUG", "WARN")
    try:
        if device == "cuda":
            torch.cuda.set_device(0)
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))
        t = torch.full((4,), float(rank + 1), device=device)
        dist.all_reduce(t)
        if device == "cuda":
            torch.cuda.synchronize()
        queue.put({"rank": rank, "ok": True, "value": t.tolist()})
        dist.destroy_process_group()
    except Exception as err:  # the answer, reported by the parent
        queue.put({"rank": rank, "ok": False, "error": f"{type(err).__name__}: {str(err)[:2000]}"})


def two_rank_all_reduce(backend: str, device: str, timeout_s: float) -> dict:
    """Spawn 2 ranks that all_reduce on `device` (both on cuda:0 for "cuda"); kill them after `timeout_s`.
    Returns {"answer": "works" | "refused" | "hung", "ranks": each rank's reply, "exitcodes"}."""
    import queue as queue_lib

    import torch.multiprocessing as mp

    from core.net import free_port

    ctx = mp.get_context("spawn")
    replies_q = ctx.Queue()
    port = free_port()
    group_timeout_s = max(1.0, timeout_s - 10)  # the ranks give up on each other before they are killed
    procs = [ctx.Process(target=_all_reduce_worker, args=(r, 2, port, backend, device, replies_q, group_timeout_s),
                         daemon=True) for r in range(2)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    hung = [p.pid for p in procs if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5)
    replies = []
    for _ in procs:
        try:
            replies.append(replies_q.get(timeout=1))
        except queue_lib.Empty:
            break
    works = len(replies) == 2 and all(r["ok"] and r["value"] == [3.0] * 4 for r in replies)
    answer = "works" if works else "hung" if hung and not any("error" in r for r in replies) else "refused"
    return {"backend": backend, "device": device, "answer": answer,
            "ranks": sorted(replies, key=lambda r: r["rank"]), "exitcodes": [p.exitcode for p in procs],
            "killed_after_timeout": hung}


def nccl_section(report: Report, run: Run) -> None:
    if not run.cuda:
        report.skip("nccl_one_gpu", "two_ranks_one_gpu", "no CUDA device: NCCL needs a GPU")
        return
    report.case("nccl_one_gpu", "two_ranks_one_gpu", lambda: two_rank_all_reduce("nccl", "cuda", run.nccl_timeout_s))


# ----------------------------------------------------------------------------- main
def start_watchdog(report: Report, seconds: float) -> threading.Timer:
    """After `seconds`: print every thread's stack and the table so far, kill spawned children, exit 3. A C-level
    hang that holds the GIL is caught 20 s later by faulthandler alone (stacks, exit)."""

    def fire():
        print(f"\nDEADLINE: {seconds:g} s passed (--deadline-s); stacks, then the results so far", flush=True)
        faulthandler.dump_traceback(file=sys.stdout, all_threads=True)
        for child in multiprocessing.active_children():
            child.kill()
        report.emit({"section": "watchdog", "case": "deadline", "status": "error",
                     "note": f"--deadline-s {seconds:g} passed; the stacks are in the log"})
        print(report.table(), flush=True)
        os._exit(3)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    faulthandler.dump_traceback_later(seconds + 20, exit=True)
    return timer


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, of {', '.join(SECTIONS)}")
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"),
                   help="auto: cuda when available; cpu hides the GPUs and implies --quick")
    p.add_argument("--quick", action="store_true", help="tiny sizes (packed W 256/512, one learner step)")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "learner_gpu.jsonl"),
                   help="append one JSON line per result to this file")
    p.add_argument("--max-seconds", type=float, default=75.0,
                   help="a section starts no new case after this many seconds")
    p.add_argument("--gradient-checkpointing", action="store_true",
                   help="the learner and packed sections with the learner's gradient_checkpointing on")
    p.add_argument("--widths", default="", help="comma-separated packed row widths instead of the sizes' own")
    p.add_argument("--nccl-timeout-s", type=float, default=60.0, help="hard limit of the two-process NCCL probe")
    p.add_argument("--deadline-s", type=float, default=270.0,
                   help="the watchdog prints stacks and the table and exits after this many seconds")
    args = p.parse_args(argv)
    sections = [s for s in args.sections.split(",") if s]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        p.error(f"unknown sections {unknown}; choose from {', '.join(SECTIONS)}")
    args.sections = sections
    return args


def select_device(choice: str):
    """torch.device for `choice`; hides the GPUs (before torch is imported), sets the project's environment
    defaults (core.env: offline hubs, caches, DeepSpeed's CPU accelerator without a GPU)."""
    if choice == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    from core.env import apply_defaults

    apply_defaults()
    import torch

    if choice == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is visible")
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")  # also where /dev/nvidiactl exists but torch sees no GPU
    return device


def main(argv=None) -> int:
    args = parse_args(argv)
    t_start = time.perf_counter()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = Report(out, time.strftime("%Y-%m-%dT%H:%M:%S"))
    watchdog = start_watchdog(report, args.deadline_s)
    device = select_device(args.device)
    run = Run(device, QUICK if args.quick or device.type == "cpu" else FULL,
              Path(tempfile.mkdtemp(prefix="learner_gpu_")), args.max_seconds, args.nccl_timeout_s,
              args.gradient_checkpointing, tuple(int(w) for w in args.widths.split(",") if w))
    sections = {"env": lambda: report.case("env", "versions", lambda: env_info(device)),
                "learner": lambda: learner_section(report, run), "packed": lambda: packed_section(report, run),
                "nccl_one_gpu": lambda: nccl_section(report, run)}
    try:
        for name in args.sections:
            try:
                sections[name]()
            except Exception as err:  # a section's setup failed: reported, the next section runs
                report.emit({"section": name, "case": "setup", "status": "error",
                             "error": f"{type(err).__name__}: {str(err)[:2000]}",
                             "traceback": traceback.format_exc()[-4000:]})
            free_memory()
    finally:
        shutil.rmtree(run.tmp, ignore_errors=True)
    loaded = sorted(m for m in FORBIDDEN_MODULES if m in sys.modules)
    counts = {s: sum(r["status"] == s for r in report.results) for s in ("ok", "fail", "error", "oom", "skipped")}
    report.emit({"section": "summary", "case": "run", "status": "fail" if loaded else "ok", "device": str(device),
                 "sizes": "quick" if run.sizes is QUICK else "full", "seconds": round(time.perf_counter() - t_start, 1),
                 "forbidden_modules_loaded": loaded, "statuses": counts})
    watchdog.cancel()
    faulthandler.cancel_dump_traceback_later()
    print("\n" + report.table(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
